"""Loop devices on a real Linux kernel, driven with ioctls rather than losetup: losetup cannot
set the tag (lo_file_name) that lets several node plugins on one kernel tell their devices apart.
The kernel calls are loop_ioctl.py's; this module keeps the tag index and the locks."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from csi_hostpath.system.base import Holder, LoopCensus, LoopDevice
from csi_hostpath.system.holders import holders_of_device
from csi_hostpath.system.linux import devnodes
from csi_hostpath.system.linux import loop_ioctl as kernel
from csi_hostpath.system.linux._log import log
from csi_hostpath.system.linux.uevents import watch_loop_devices


class TagIndex:
    """tag → index of the loop device carrying it, for every device of this process's kernel
    that carries a tag, built by one scan of /sys/block on first use and kept by attach and
    detach since. A hit is checked with one LOOP_GET_STATUS64 on that device before it is used
    (someone else may have detached it, or reused the number), so a stale entry costs one ioctl
    and is dropped. Nothing is ever removed by a scan, only added: a scan racing an attach could
    otherwise forget the new device, and a miss is believed without a scan (no full scan on the
    request path). Each LinuxLoop keeps its own (linux_system() makes one per driver).

    What it does not see: a device another process tags after the first scan. The tags carry
    the node ID, and one node ID has one node plugin at a time; its restart scans again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tags: dict[str, int] | None = None

    def _scanned(self) -> dict[str, int]:
        if self._tags is None:
            found: dict[str, int] = {}
            for index in kernel.configured_loop_indices():
                tag = kernel.read_tag(f"/dev/loop{index}")
                if tag:
                    found.setdefault(tag, index)
            self._tags = found
        return self._tags

    def get(self, tag: str) -> int | None:
        with self._lock:
            return self._scanned().get(tag)

    def put(self, tag: str, index: int) -> None:
        with self._lock:
            self._scanned()[tag] = index

    def merge(self, seen: dict[str, int]) -> None:
        """What a full scan saw, added where the index has nothing for the tag (and the index
        itself when this was the first scan: no second one for it)."""
        with self._lock:
            if self._tags is None:
                self._tags = dict(seen)
                return
            tags = self._tags
            for tag, index in seen.items():
                tags.setdefault(tag, index)

    def drop(self, tag: str, index: int) -> None:
        with self._lock:
            if self._scanned().get(tag) == index:
                del self._scanned()[tag]


class LinuxLoop:
    """Loop devices by tag. find() costs one LOOP_GET_STATUS64 and three sysfs reads whatever
    the number of devices on the host (its tag index), and a stat of each node it opens
    (devnodes.py: made where /dev lacks it); list() scans them all."""

    def __init__(self) -> None:
        self._index = TagIndex()
        # "find by tag, else attach" for one tag runs under that tag's stripe, so two threads
        # attaching one tag can't both miss the find and attach the file twice, while attaches
        # of other tags go on.
        self._tag_locks = tuple(threading.Lock() for _ in range(64))
        # Held across LOOP_CTL_GET_FREE .. LOOP_CONFIGURE, so this driver's threads don't all
        # draw the same free device and collide in EBUSY; other processes still can, and the
        # retry handles it. Nothing in between waits: a missing node is made, not waited for.
        self._free_lock = threading.Lock()

    def _tag_lock(self, tag: str) -> threading.Lock:
        return self._tag_locks[hash(tag) % len(self._tag_locks)]

    def attach(self, backing_file: Path, tag: str, *, read_only: bool = False) -> LoopDevice:
        name = kernel.encode_tag(tag)
        flags = kernel.LO_FLAGS_READ_ONLY if read_only else 0
        with self._tag_lock(tag):
            existing = self._existing(tag)
            if existing is not None:
                return existing
            mode = os.O_RDONLY if read_only else os.O_RDWR
            backing_fd = os.open(backing_file, mode | os.O_CLOEXEC)
            try:
                control = devnodes.open_control()
                try:
                    for _ in range(kernel.ATTACH_ATTEMPTS):
                        with self._free_lock:
                            index = fcntl.ioctl(control, kernel.LOOP_CTL_GET_FREE)
                            device = f"/dev/loop{index}"
                            # A device the kernel added just now has no node in a static /dev
                            # (a kind node's): configure's open makes it, never waits for it.
                            configured = kernel.configure(device, backing_fd, flags, name)
                        if not configured:
                            log.debug("%s was taken by someone else; asking for another", device)
                            continue
                        self._index.put(tag, index)
                        described = kernel.describe(index, tag)
                        if described is None:
                            raise OSError(errno.ENXIO, "detached right after attach", device)
                        log.info("attached %s to %s as %r", backing_file, device, tag)
                        return described
                finally:
                    os.close(control)
            finally:
                os.close(backing_fd)
        raise OSError(errno.EBUSY, f"no free loop device after {kernel.ATTACH_ATTEMPTS} attempts")

    def _existing(self, tag: str) -> LoopDevice | None:
        """The device carrying tag for attach to reuse. One whose detach waits on another
        holder is taken back: handing it out as it is let the holder's last close take it
        away from its new user (a mount then read a device of size 0: "can't read
        superblock"); attaching the file to a second device instead would let two filesystems
        write one file. One already in rundown is waited for."""
        deadline = time.monotonic() + kernel.RUNDOWN_WAIT_SECONDS
        while True:
            found = self._lookup(tag)
            if found is None:
                return None
            device, flags = found
            if not flags & kernel.LO_FLAGS_AUTOCLEAR or kernel.take_back(device.path, tag):
                return device
            if time.monotonic() >= deadline:
                raise OSError(errno.EBUSY, f"{device.path} ({tag}) is still being released")
            time.sleep(kernel.POLL_SECONDS)

    def _lookup(self, tag: str) -> tuple[LoopDevice, int] | None:
        index = self._index.get(tag)
        if index is None:
            return None
        status = kernel.read_status(f"/dev/loop{index}")
        if status is not None and status[0] == tag:
            found = kernel.describe(index, tag)
            if found is not None:
                return found, status[1]
        self._index.drop(tag, index)
        return None

    def find(self, tag: str) -> LoopDevice | None:
        found = self._lookup(tag)
        return None if found is None else found[0]

    def list(self, tag_prefix: str = "") -> list[LoopDevice]:
        """Every device whose tag starts with tag_prefix: one scan of all loop devices, which
        also refreshes the tag index (reconcile at start calls this)."""
        devices: list[LoopDevice] = []
        seen: dict[str, int] = {}
        for index in kernel.configured_loop_indices():
            tag = kernel.read_tag(f"/dev/loop{index}")
            if not tag:
                continue
            seen.setdefault(tag, index)
            if not tag.startswith(tag_prefix):
                continue
            device = kernel.describe(index, tag)
            if device is not None:
                devices.append(device)
        self._index.merge(seen)
        return devices

    def census(self, tag_prefix: str) -> LoopCensus:
        devices = kernel.loop_devices()
        bound = [index for index, attached in devices if attached]
        # A device detached between the two reads has no tag any more: it counts as bound
        # but not ours, which errs towards a smaller limit for one call.
        tags = (kernel.read_tag(f"/dev/loop{index}") for index in bound)
        ours = sum(1 for tag in tags if tag is not None and tag.startswith(tag_prefix))
        return LoopCensus(
            devices=len(devices), bound=len(bound), ours=ours, ceiling=kernel.device_ceiling()
        )

    def detach(self, device: LoopDevice) -> None:
        """Release device if it is still the one described: its number may serve another
        process's attach by now (a detach that comes late, after the device was released by its
        last holder), and clearing that one took a volume away from under its mkfs or mount.
        The check and the kernel.LOOP_CLR_FD go through one open fd, and the kernel releases a loop
        device only at its last close, so the device checked is the device cleared."""
        # The index keeps its entry: a device still mounted only gets autoclear and carries its
        # tag until the last user closes it, and find() must still see it until then.
        index = kernel.loop_index(device.path)
        fd = kernel.open_loop(device.path, os.O_RDONLY)
        if fd is None:
            return  # gone, or already being released
        try:
            status = kernel.status_of(fd)
            if status is None:
                return  # not configured, nothing to release
            if not kernel.carries(status, device):
                log.info(
                    "not detaching %s: it carries %r now, not %r (ours is gone already)",
                    device.path,
                    status.tag,
                    device.tag,
                )
                return
            # A read-only flag set with BLKROSET outlives the attachment and would make the next
            # volume on this device unformattable, so it goes before the device is released.
            if kernel.read_sys(f"{kernel.SYS_BLOCK}/loop{index}/ro") == "1":
                fcntl.ioctl(fd, kernel.BLKROSET, struct.pack("i", 0))
            try:
                fcntl.ioctl(fd, kernel.LOOP_CLR_FD, 0)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: not configured, nothing to release
                    raise
                return
        finally:
            os.close(fd)
        # Still open elsewhere (mounted, say)? The kernel then only sets autoclear, and the
        # device goes when its last user closes it.
        log.info("detached %s (%s)", device.path, device.tag)

    def refresh_capacity(self, device: str) -> None:
        fd = kernel.open_device(device, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, kernel.LOOP_SET_CAPACITY, 0)
        finally:
            os.close(fd)

    def set_read_only(self, device: str, read_only: bool) -> None:
        fd = kernel.open_device(device, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, kernel.BLKROSET, struct.pack("i", int(read_only)))
        finally:
            os.close(fd)

    def holders(self, device: str) -> tuple[Holder, ...]:
        return tuple(holders_of_device(device))

    def watch(self, changed: Callable[[str], None]) -> Callable[[], None]:
        return watch_loop_devices(changed)


# --- devices -------------------------------------------------------------------------------------


class LinuxDevices:
    def size(self, device: str) -> int:
        try:
            kernel.loop_index(device)
        except ValueError:
            fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
        else:  # a loop device's node may be missing from a static /dev: made first
            fd = kernel.open_device(device, os.O_RDONLY)
        try:
            raw = fcntl.ioctl(fd, kernel.BLKGETSIZE64, bytes(8))
        finally:
            os.close(fd)
        (size,) = struct.unpack("=Q", raw)
        assert isinstance(size, int)
        return size

    def is_node(self, path: str, device: str) -> bool:
        try:
            there, ours = os.stat(path), os.stat(device)
        except OSError:
            return False
        return (
            stat.S_ISBLK(there.st_mode)
            and stat.S_ISBLK(ours.st_mode)
            and there.st_rdev == ours.st_rdev
        )
