"""Filesystems on a real Linux kernel: mkfs/grow tools, superblock sizes, shutdown and freeze."""

from __future__ import annotations

import errno
import fcntl
import os
import struct

from csi_hostpath.system.base import CommandError, FsStats
from csi_hostpath.system.linux._log import log
from csi_hostpath.system.linux.loop_ioctl import (
    LOOP_GET_STATUS64,
    LOOP_INFO64,
    SYS_BLOCK,
    loop_index,
    read_sys,
    user_dev,
)
from csi_hostpath.system.linux.mountinfo import read_mountinfo_at, topmost
from csi_hostpath.system.runner import run
from csi_hostpath.system.system_errors import command_error, syscall_error

# --- ioctl numbers (linux/fs.h) ------------------------------------------------------------------
FS_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32); also EXT4_IOC_SHUTDOWN / XFS_IOC_GOINGDOWN
FS_SHUTDOWN_NOSYNC = 2  # EXT4_GOING_FLAGS_NOLOGFLUSH == XFS_FSOP_GOING_FLAGS_NOLOGFLUSH
FIFREEZE = 0xC0045877
FITHAW = 0xC0045878
EXT4_IOC_RESIZE_FS = 0x40086610  # _IOW('f', 16, __u64): resize a mounted ext4 to N blocks

_MKFS: dict[str, list[str]] = {
    # Lazy init keeps mkfs fast and the backing file sparse; the kernel zeroes the inode tables
    # in the background after the first mount.
    "ext4": ["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1"],
    "xfs": ["mkfs.xfs", "-f", "-q"],
}
# mkfs and grow walk metadata proportional to the volume size; big volumes need more than the
# runner's default minute.
_FS_TOOL_TIMEOUT = 600.0
_BLKID_NOTHING_FOUND = 2  # blkid's exit code when no signature is found
_EXT4_SB_OFFSET = 1024
_EXT4_SB_SIZE = 1024


# --- filesystems ---------------------------------------------------------------------------------


def _open_loop_mount(mount_point: str) -> int:
    """Open the root of a loop-backed mount, refusing anything else.

    Shutdown and freeze act on the whole filesystem under the path: called by mistake on a path
    that is not mounted, they would hit the node's root filesystem. So the fd must be the mount
    root at mount_point, on a loop device.
    """
    path = os.path.realpath(mount_point)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        device_number = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        entry = topmost(read_mountinfo_at(path), path)
        is_loop = os.path.isdir(f"/sys/dev/block/{device_number}/loop")
        if entry is None or entry.device_number != device_number or not is_loop:
            raise ValueError(f"{mount_point} is not a mount of a loop device")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _ioctl_on_loop_mount(mount_point: str, request: int) -> None:
    fd = _open_loop_mount(mount_point)
    try:
        fcntl.ioctl(fd, request, 0)
    finally:
        os.close(fd)


def statvfs_stats(path: str) -> FsStats:
    """What statvfs(2) says of the filesystem holding path, in bytes and inodes."""
    st = os.statvfs(path)
    return FsStats(
        total_bytes=st.f_blocks * st.f_frsize,
        available_bytes=st.f_bavail * st.f_frsize,
        used_bytes=(st.f_blocks - st.f_bfree) * st.f_frsize,
        total_inodes=st.f_files,
        free_inodes=st.f_ffree,
        used_inodes=st.f_files - st.f_ffree,
    )


def _reads_as_zeros(device: str) -> bool:
    """True only if every byte of device reads as zero: a loop device, at offset 0, on a backing
    file without a single data extent (a fresh sparse volume). blkid can find nothing on such a
    device, so probing it needs no blkid. Anything this can't prove answers False.
    """
    try:
        index = loop_index(device)
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except (ValueError, OSError):
        return False
    try:
        buf = bytearray(LOOP_INFO64.size)
        try:
            fcntl.ioctl(fd, LOOP_GET_STATUS64, buf, True)
        except OSError:
            return False
        lo_device, lo_inode, _rdevice, lo_offset = LOOP_INFO64.unpack(bytes(buf))[:4]
        backing = read_sys(f"{SYS_BLOCK}/loop{index}/loop/backing_file")
        if lo_offset != 0 or backing is None:
            return False
        try:
            # Buffered writes to the device sit in its page cache, where blkid would see them;
            # the fsync moves them to the backing file, where SEEK_DATA sees them.
            os.fsync(fd)
            backing_fd = os.open(backing, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            st = os.fstat(backing_fd)
            # The path in sysfs could name another file by now (renamed, or " (deleted)").
            if (st.st_ino, st.st_dev) != (lo_inode, user_dev(lo_device)):
                return False
            try:
                os.lseek(backing_fd, 0, os.SEEK_DATA)
            except OSError as exc:
                return exc.errno == errno.ENXIO  # no data at or after offset 0: all holes
            return False
        finally:
            os.close(backing_fd)
    finally:
        os.close(fd)


def _geometry(device: str) -> tuple[int, int] | None:
    """(block size, blocks) of the ext4 or xfs filesystem on device, from its superblock; None
    if it holds neither."""
    with open(device, "rb") as f:
        head = f.read(_EXT4_SB_OFFSET + _EXT4_SB_SIZE)
    if len(head) >= _EXT4_SB_OFFSET + _EXT4_SB_SIZE:
        sb = head[_EXT4_SB_OFFSET:]
        if sb[0x38:0x3A] == b"\x53\xef":  # the ext2/3/4 magic, little-endian 0xEF53
            (blocks_lo,) = struct.unpack_from("<I", sb, 0x04)
            (log_block_size,) = struct.unpack_from("<I", sb, 0x18)
            (incompat,) = struct.unpack_from("<I", sb, 0x60)
            blocks_hi = struct.unpack_from("<I", sb, 0x150)[0] if incompat & 0x80 else 0
            return 1024 << log_block_size, int((blocks_hi << 32) | blocks_lo)
    if head[:4] == b"XFSB":
        (block_size,) = struct.unpack_from(">I", head, 4)
        (data_blocks,) = struct.unpack_from(">Q", head, 8)
        return int(block_size), int(data_blocks)
    return None


def _ext4_resize_refusal(mount_point: str, device: str) -> int | None:
    """Why the kernel refuses to resize the ext4 at mount_point, as an errno; None if it does not.

    resize2fs exits 1 whatever went wrong, so after it fails this asks the kernel directly:
    EXT4_IOC_RESIZE_FS to the current size checks the caller's CAP_SYS_RESOURCE (EPERM) and then
    does nothing (kernel fs/ext4/resize.c, ext4_resize_fs: "Nothing need to do")."""
    try:
        geometry = _geometry(device)
    except OSError:
        return None
    if geometry is None:
        return None
    try:
        fd = _open_loop_mount(mount_point)
    except (OSError, ValueError):
        return None
    try:
        fcntl.ioctl(fd, EXT4_IOC_RESIZE_FS, struct.pack("=Q", geometry[1]))
    except OSError as exc:
        return exc.errno
    finally:
        os.close(fd)
    return None


def _refuse_if_mounted(device: str) -> None:
    """EBUSY (ResourceBusy) when a filesystem on the device is mounted anywhere on this kernel,
    as the kernel says it: an exclusive open fails while a superblock holds the device, in
    whatever mount namespace. e2fsck opens it so too, but only says "Cannot continue" (exit 8)."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            raise syscall_error("open(O_EXCL)", device, exc) from exc
        raise
    os.close(fd)


class LinuxFs:
    def probe(self, device: str) -> str | None:
        # blkid answers "nothing found" (2) for a missing device too; a volume must never look
        # blank just because its device is gone.
        os.stat(device)
        if _reads_as_zeros(device):
            return None  # what blkid answers for a device of zeros, without spawning it
        try:
            out = run(["blkid", "-p", "-o", "export", device])
        except CommandError as exc:
            if exc.returncode == _BLKID_NOTHING_FOUND:
                return None
            raise
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        if "TYPE" in values:
            return values["TYPE"]
        if "PTTYPE" in values:
            # Not a filesystem, but not blank either: a caller that formats "blank" devices must
            # not wipe a partition table a block-volume user wrote.
            return f"partition-table:{values['PTTYPE']}"
        return None

    def mkfs(self, device: str, fs_type: str) -> None:
        if fs_type not in _MKFS:
            raise ValueError(f"unsupported filesystem type {fs_type!r}")
        run([*_MKFS[fs_type], device], timeout=_FS_TOOL_TIMEOUT)

    def grow(self, device: str, mount_point: str, fs_type: str) -> None:
        if fs_type == "ext4":
            try:
                run(["resize2fs", device], timeout=_FS_TOOL_TIMEOUT)
            except CommandError as exc:
                refused = _ext4_resize_refusal(mount_point, device)
                if refused is None:
                    raise
                raise command_error(
                    exc.argv, exc.returncode, exc.stdout, exc.stderr, errno=refused
                ) from exc
        elif fs_type == "xfs":
            run(["xfs_growfs", mount_point], timeout=_FS_TOOL_TIMEOUT)
        else:
            raise ValueError(f"unsupported filesystem type {fs_type!r}")

    def size(self, device: str) -> int | None:
        geometry = _geometry(device)
        return None if geometry is None else geometry[0] * geometry[1]

    def grow_offline(self, device: str, fs_type: str) -> None:
        if fs_type != "ext4":
            raise ValueError(f"offline grow is for ext4 only, not {fs_type!r}")
        _refuse_if_mounted(device)
        try:
            # -p repairs only what is safe without asking; resize2fs refuses an unchecked fs.
            run(["e2fsck", "-f", "-p", device], timeout=_FS_TOOL_TIMEOUT)
        except CommandError as exc:
            if exc.returncode not in (1, 2):  # 1 and 2: errors corrected
                raise
        run(["resize2fs", device], timeout=_FS_TOOL_TIMEOUT)

    def error_count(self, device: str) -> int:
        # errors_count: the errors ext4 raised (kept in the superblock, so it survives a
        # remount until fsck clears it). warning_count: this mount's warnings, among them every
        # write the loop device failed ("I/O error ... writing to inode", ext4_end_bio), which is
        # how a thin pool that ran out of space shows first; often no error is raised at all.
        total = 0
        for name in ("errors_count", "warning_count"):
            raw = read_sys(f"/sys/fs/ext4/{os.path.basename(device)}/{name}")
            total += int(raw) if raw and raw.isdigit() else 0
        return total

    def stats(self, path: str) -> FsStats:
        return statvfs_stats(path)

    def shutdown(self, mount_point: str) -> None:
        try:
            fd = _open_loop_mount(mount_point)
        except OSError as exc:
            if exc.errno == errno.EIO:
                # A filesystem already shut down refuses even to open its root: that is the
                # state we want, so a retried fence succeeds.
                log.warning("%s answers EIO; taking it as already shut down", mount_point)
                return
            raise
        try:
            fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", FS_SHUTDOWN_NOSYNC))
        finally:
            os.close(fd)
        log.warning("filesystem at %s shut down: every later write fails with EIO", mount_point)

    def freeze(self, mount_point: str) -> None:
        _ioctl_on_loop_mount(mount_point, FIFREEZE)

    def thaw(self, mount_point: str) -> None:
        _ioctl_on_loop_mount(mount_point, FITHAW)
