"""Typed system errors on both kernels: the type comes from the errno, not a tool's words.

Typed system errors, on the fake and the real kernel alike: the type says what went wrong
(busy, not found, not permitted) from the kernel's errno, never from a tool's words."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from csi_hostpath.system.base import Holder, NotFound, NotPermitted, ResourceBusy
from tests.support.needs import skip_unless_tools

from .conftest import Env
from .system_limits import CAP_SYS_RESOURCE, EXT4_SIZE, has_capability


def test_mount_onto_a_missing_directory_is_not_found(env: Env) -> None:
    device = env.formatted("vol", EXT4_SIZE)
    missing = os.path.join(env.dir("parent"), "missing")
    with pytest.raises(NotFound) as absent:
        env.system.mounts.mount(device.path, missing, "ext4", [])
    assert absent.value.errno == errno.ENOENT


def test_bind_of_a_missing_source_is_not_found(env: Env) -> None:
    missing = os.path.join(env.dir("parent"), "missing")
    with pytest.raises(NotFound) as absent:
        env.system.mounts.bind(missing, env.dir("target"), read_only=False)
    assert absent.value.errno == errno.ENOENT


def test_online_ext4_grow_without_cap_sys_resource_is_not_permitted(env: Env) -> None:
    if env.real:
        skip_unless_tools("resize2fs")
        if has_capability(CAP_SYS_RESOURCE):
            pytest.skip("this process has CAP_SYS_RESOURCE: the kernel grows the ext4")
    else:
        assert env.kernel is not None
        env.kernel.cap_sys_resource = False
    device, target = env.mounted("vol", EXT4_SIZE)
    env.system.pool.grow(Path(device.backing_file), 2 * EXT4_SIZE)
    env.system.loop.refresh_capacity(device.path)
    with pytest.raises(NotPermitted) as refused:
        env.system.fs.grow(device.path, target, "ext4")
    assert refused.value.errno == errno.EPERM


# --- who holds it busy ---------------------------------------------------------------------------


class _Process:
    """A process that sits in a directory or keeps a file open: a real `sleep` (or python) on
    the real kernel, a pretended one on the fake."""

    def __init__(self, env: Env, *, cwd: str | None = None, opens: str | None = None) -> None:
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        if env.real:
            if opens is None:
                self.proc = subprocess.Popen(["sleep", "60"], cwd=cwd)
            else:
                code = (
                    "import sys, time; f = open(sys.argv[1], 'rb'); print(flush=True); "
                    "time.sleep(60)"
                )
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", code, opens], stdout=subprocess.PIPE
                )
                assert self.proc.stdout is not None
                self.proc.stdout.readline()  # the file is open
            self.pid = self.proc.pid
        else:
            assert env.kernel is not None
            self.pid = 4242
            how = "cwd" if opens is None else "open file"
            env.kernel.hold(cwd or opens or "", Holder(self.pid, "sleep", how))

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        else:
            assert self.env.kernel is not None
            self.env.kernel.let_go(self.pid)


def test_a_busy_unmount_names_the_process_in_the_mount(env: Env) -> None:
    _, target = env.mounted("vol", EXT4_SIZE)
    sitting = _Process(env, cwd=target)
    try:
        with pytest.raises(ResourceBusy) as busy:
            env.system.mounts.unmount(target)
        assert busy.value.errno == errno.EBUSY
        held = env.system.mounts.holders(target)
        assert Holder(sitting.pid, "sleep", "cwd") in held, held
        assert all(h.pid != os.getpid() for h in held)
    finally:
        sitting.stop()
    env.system.mounts.unmount(target)
    assert env.system.mounts.find(target) is None
    assert env.system.mounts.holders(target) == ()


def test_holders_of_a_device_name_who_has_it_open(env: Env) -> None:
    device = env.attach("vol", EXT4_SIZE)
    opener = _Process(env, opens=device.path)
    try:
        held = env.system.loop.holders(device.path)
        assert [h.pid for h in held] == [opener.pid], held
        assert held[0].how == "open file"
        # The detach only sets autoclear while the device is open: it stays, carrying its tag.
        env.system.loop.detach(device)
        assert env.system.loop.find(env.tag("vol")) is not None
    finally:
        opener.stop()
    deadline = time.monotonic() + 5
    while env.system.loop.find(env.tag("vol")) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert env.system.loop.find(env.tag("vol")) is None


def test_attach_takes_back_a_device_whose_detach_waits_on_a_holder(env: Env) -> None:
    """A volume unstaged while something else still held its device (a mount namespace another
    process made meanwhile keeps a copy of the mount, say), then staged again: attach hands out
    that same device, so the filesystem is never mounted twice through two devices. It must be
    the new user's from then on: when the old holder lets go, the detach still pending on it
    used to take the device away under the new stage ("can't read superblock" on its mount)."""
    device = env.attach("vol", EXT4_SIZE)
    opener = _Process(env, opens=device.path)
    try:
        env.system.loop.detach(device)  # only marks it: the opener still has it open
        again = env.attach("vol", EXT4_SIZE)
        assert again.path == device.path
    finally:
        opener.stop()
    assert env.system.loop.find(env.tag("vol")) == again
    assert env.system.devices.size(again.path) == EXT4_SIZE
    env.system.fs.mkfs(again.path, "ext4")
    assert env.system.fs.probe(again.path) == "ext4"


def test_a_busy_unmount_left_to_umount8_is_typed_by_the_kernels_errno(env: Env) -> None:
    """A mount libmount tracks in utab (a userspace option) is unmounted by umount(8), whose
    exit status says only "failed"; the kernel is asked why (EBUSY)."""
    if not env.real:
        pytest.skip("utab and umount(8) are the real layer's")
    target = env.dir("tracked")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "x-csihp-test", "csihp", target], check=True)
    from csi_hostpath.system.linux.linux_mounts import _in_utab

    if not _in_utab(target):
        subprocess.run(["umount", target], check=True)
        pytest.skip("this libmount keeps no utab entry for x- options")
    holder = subprocess.Popen(["sleep", "60"], cwd=target)
    try:
        with pytest.raises(ResourceBusy) as busy:
            env.system.mounts.unmount(target)
        assert busy.value.argv[0] == "umount" and busy.value.errno == errno.EBUSY
    finally:
        holder.kill()
        holder.wait()
    env.system.mounts.unmount(target)
    assert env.system.mounts.find(target) is None
