"""Typed system errors, on the fake and the real kernel alike: the type says what went wrong
(busy, not found, not permitted) from the kernel's errno, never from a tool's words."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from csi_hostpath.system.base import NotFound, NotPermitted, ResourceBusy
from tests.needs import skip_unless_tools

from .conftest import Env
from .test_system_contract import CAP_SYS_RESOURCE, EXT4_SIZE, _has_capability


@pytest.mark.real
def test_unmount_held_by_a_process_is_busy_with_its_errno(env: Env) -> None:
    if not env.real:
        pytest.skip("the fake kernel has no processes")
    _, target = env.mounted("vol", EXT4_SIZE)
    holder = subprocess.Popen(["sleep", "60"], cwd=target)
    try:
        with pytest.raises(ResourceBusy) as busy:
            env.system.mounts.unmount(target)
        assert busy.value.errno == errno.EBUSY
        assert "busy" in str(busy.value).lower()
    finally:
        holder.kill()
        holder.wait()
    env.system.mounts.unmount(target)
    assert env.system.mounts.find(target) is None


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
        if _has_capability(CAP_SYS_RESOURCE):
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
