"""The fake system layer's mounts: records in the FakeKernel, over real target directories and
files. What the fake pretends: see __init__.py."""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

from csi_hostpath.system.base import (
    CommandError,
    Holder,
    MountEntry,
)
from csi_hostpath.system.fake.fake_kernel import (
    _ATIME_FLAGS,
    _DEVTMPFS_NUMBER,
    _LOOP_MAJOR,
    _MOUNT_EXIT,
    _MOUNT_FLAGS,
    FakeKernel,
    _Device,
    _is_under,
    _Mount,
)
from csi_hostpath.system.pinned import Pinned
from csi_hostpath.system.system_errors import command_error


def _per_mount_options(options: Sequence[str], read_only: bool) -> tuple[str, ...]:
    flags = ["ro" if read_only else "rw"]
    flags += [flag for flag in _MOUNT_FLAGS if flag in options]
    atime = next((flag for flag in _ATIME_FLAGS if flag in options), "relatime")
    if atime != "strictatime":  # the kernel prints nothing for strictatime
        flags.append(atime)
    return tuple(flags)


class FakeMounts:
    def __init__(self, kernel: FakeKernel) -> None:
        self._kernel = kernel

    def mount(self, device: str, target: str, fs_type: str, options: Sequence[str]) -> None:
        argv = ["mount", "-t", fs_type]
        if options:
            argv += ["-o", ",".join(options)]
        argv += [device, target]
        path = os.path.realpath(target)
        with self._kernel.lock:
            found = self._kernel.device(device)
            if found is None:
                message = f"mount: {target}: special device {device} does not exist."
                raise CommandError(argv, _MOUNT_EXIT, "", message)
            # The real layer tried mount(2) first and carries its errno (linux_mounts.py).
            if not os.path.isdir(path):
                message = f"mount: {target}: mount point does not exist."
                raise command_error(argv, _MOUNT_EXIT, "", message, errno=errno.ENOENT)
            header = self._kernel.read_fs(found)
            if header is None or header.fs_type != fs_type:
                message = f"mount: {target}: wrong fs type, bad option, bad superblock on {device}."
                raise command_error(argv, _MOUNT_EXIT, "", message, errno=errno.EINVAL)
            # mount(8) falls back to read-only by itself when the device is write-protected.
            read_only = "ro" in options or found.read_only
            entry = MountEntry(
                mount_point=path,
                source=device,
                fs_type=fs_type,
                device_number=f"{_LOOP_MAJOR}:{found.index}",
                root="/",
                options=_per_mount_options(options, read_only),
            )
            self._kernel.mounts.append(_Mount(entry=entry, holds=found.index))

    def bind(self, source: str, target: str, *, read_only: bool) -> None:
        argv = ["mount", "--bind", source, target]
        with self._kernel.lock:
            device = self._kernel.device(source)
            source_path = source if device is not None else os.path.realpath(source)
            if device is None and not os.path.exists(source_path):
                message = f"mount: {target}: special device {source} does not exist."
                raise command_error(argv, _MOUNT_EXIT, "", message, errno=errno.ENOENT)
            path = os.path.realpath(target)
            if not os.path.exists(path):
                message = f"mount: {target}: mount point does not exist."
                raise command_error(argv, _MOUNT_EXIT, "", message, errno=errno.ENOENT)
            if (device is None and os.path.isdir(source_path)) != os.path.isdir(path):
                # The kernel binds directories onto directories and files onto files only.
                message = f"mount: {target}: mount(2) system call failed: Not a directory."
                raise command_error(argv, _MOUNT_EXIT, "", message, errno=errno.ENOTDIR)
            self._kernel.mounts.append(self._bind_record(device, source_path, path, read_only))

    def _bind_record(
        self, device: _Device | None, source: str, target: str, read_only: bool
    ) -> _Mount:
        if device is not None:
            # A device node lives on devtmpfs; binding it does not open the device.
            entry = MountEntry(
                mount_point=target,
                source="devtmpfs",
                fs_type="devtmpfs",
                device_number=_DEVTMPFS_NUMBER,
                root="/" + posixpath.basename(device.path),
                options=_per_mount_options((), read_only),
            )
            return _Mount(entry=entry, holds=None)
        under = self._kernel.containing(source)
        if under is None:
            st = os.stat(source)
            entry = MountEntry(
                mount_point=target,
                source="none",
                fs_type="none",
                device_number=f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}",
                root=source,
                options=_per_mount_options((), read_only),
            )
            return _Mount(entry=entry, holds=None)
        relative = posixpath.relpath(source, under.entry.mount_point)
        root = posixpath.normpath(posixpath.join(under.entry.root, relative))
        inherited = under.entry.options
        entry = MountEntry(
            mount_point=target,
            source=under.entry.source,
            fs_type=under.entry.fs_type,
            device_number=under.entry.device_number,
            root=root,
            # A bind inherits the source mount's flags, read-only included.
            options=_per_mount_options(inherited, read_only or "ro" in inherited),
        )
        return _Mount(entry=entry, holds=under.holds)

    def unmount(self, target: str, *, lazy: bool = False) -> None:
        path = os.path.realpath(target)
        with self._kernel.lock:
            mounts = self._kernel.mounts
            position = next(
                (i for i in range(len(mounts) - 1, -1, -1) if mounts[i].entry.mount_point == path),
                None,
            )
            if position is None:
                return
            children = [
                mount
                for mount in mounts[position + 1 :]
                if mount.entry.mount_point != path and _is_under(mount.entry.mount_point, path)
            ]
            if self._kernel.mount_users(mounts[position]) and not lazy:
                raise command_error(["umount2", path], None, "", "", errno=errno.EBUSY)
            if children and not lazy:
                # What the real layer raises: umount2(2) refused with EBUSY.
                raise command_error(["umount2", path], None, "", "", errno=errno.EBUSY)
            # A lazy unmount detaches the whole subtree at once.
            gone = {id(mounts[position])} | {id(mount) for mount in children}
            self._kernel.mounts = [mount for mount in mounts if id(mount) not in gone]
            self._kernel.release()

    # The descriptor calls act where the object now is, as the kernel's magic link does.
    def mount_on(self, device: str, target: Pinned, fs_type: str, options: Sequence[str]) -> None:
        self.mount(device, target.where(), fs_type, options)

    def bind_on(self, source: Pinned, target: Pinned, *, read_only: bool) -> None:
        self.bind(source.where(), target.where(), read_only=read_only)

    def bind_device_on(self, device: str, target: Pinned, *, read_only: bool) -> None:
        self.bind(device, target.where(), read_only=read_only)

    def unmount_on(self, parent: Pinned, name: str, *, lazy: bool = False) -> None:
        path = os.path.join(parent.where(), name)
        if not os.path.islink(path):
            self.unmount(path, lazy=lazy)

    def find_on(self, target: Pinned) -> MountEntry | None:
        path = target.where()
        with self._kernel.lock:
            mount = self._kernel.topmost(path)
            if mount is None or mount.entry.mount_point != path:
                return None
            return mount.entry

    def find(self, target: str) -> MountEntry | None:
        with self._kernel.lock:
            mount = self._kernel.topmost(os.path.realpath(target))
            return None if mount is None else mount.entry

    def shared_lookups(self) -> AbstractContextManager[None]:
        return nullcontext()  # every fake lookup reads the fake's table: nothing to share

    def list(self) -> list[MountEntry]:
        with self._kernel.lock:
            return [mount.entry for mount in self._kernel.mounts]

    def holders(self, target: str) -> tuple[Holder, ...]:
        with self._kernel.lock:
            mount = self._kernel.topmost(os.path.realpath(target))
            if mount is None:
                return ()
            if mount.holds is not None:
                return tuple(self._kernel.device_users(mount.holds))
            device = self._kernel.device("/dev" + mount.entry.root)
            if mount.entry.fs_type == "devtmpfs" and device is not None:
                return tuple(self._kernel.device_users(device.index))
            return tuple(self._kernel.mount_users(mount))
