"""The system layer's loop contract (attach, find, detach, read-only, threads), fake and real.

Whatever passes here on "fake" must pass on "real": that is what lets the service tests trust the
fake. Assertions only the real kernel can make (sysfs) are guarded by ``env.real``.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from csi_hostpath.system.base import CommandError

from .conftest import Env
from .system_limits import EXT4_SIZE, MAX_TAG_BYTES, MiB


def _sysfs_ro(device: str) -> str:
    return Path(f"/sys/block/{os.path.basename(device)}/ro").read_text().strip()


def test_attach_is_idempotent_by_tag(env: Env) -> None:
    backing = env.file("vol", 32 * MiB)
    device = env.system.loop.attach(backing, env.tag("vol"))
    assert device.tag == env.tag("vol")
    assert device.backing_file == str(backing)
    assert device.size_bytes == 32 * MiB
    assert not device.read_only

    assert env.system.loop.attach(backing, env.tag("vol")) == device
    assert env.system.loop.find(env.tag("vol")) == device
    assert env.system.loop.list(env.tag_prefix) == [device]
    assert env.system.devices.size(device.path) == 32 * MiB


def test_list_by_prefix_and_detach(env: Env) -> None:
    loop = env.system.loop
    one = env.attach("one", 8 * MiB)
    two = env.attach("two", 8 * MiB)
    assert one.path != two.path
    assert {d.tag for d in loop.list(env.tag_prefix)} == {env.tag("one"), env.tag("two")}
    assert loop.list(env.tag("tw")) == [two]
    assert loop.list(env.tag_prefix + "nothing") == []
    assert loop.find(env.tag("three")) is None

    loop.detach(one)
    assert loop.find(env.tag("one")) is None
    assert loop.list(env.tag_prefix) == [two]
    loop.detach(one)  # already detached: fine
    loop.detach(two)
    assert loop.list(env.tag_prefix) == []


def test_a_late_detach_leaves_the_device_that_took_the_number_alone(env: Env) -> None:
    """A detach that comes after its device was released (a holder let go between the find and
    the detach) names a number that may serve another attach by now, of any process on the
    kernel: only a device with the detached one's tag and backing file is released."""
    loop = env.system.loop
    one = env.attach("one", 8 * MiB)
    two = env.attach("two", 8 * MiB)
    for stale in (
        dataclasses.replace(one, path=two.path),  # another tag and file on that number
        dataclasses.replace(two, backing_inode=one.backing_inode),  # the tag, another file
        dataclasses.replace(two, tag=one.tag),  # the file, another tag
    ):
        loop.detach(stale)
        assert loop.find(env.tag("two")) == two, stale
    loop.detach(two)  # the teardown checks that both go
    loop.detach(one)


def test_attach_read_only(env: Env) -> None:
    device = env.attach("ro", 8 * MiB, read_only=True)
    assert device.read_only
    with pytest.raises(CommandError):
        env.system.fs.mkfs(device.path, "ext4")
    env.system.loop.detach(device)
    again = env.attach("rw", 8 * MiB)
    assert not again.read_only


def test_detach_clears_read_only_flag(env: Env) -> None:
    loop = env.system.loop
    device = env.attach("vol", 8 * MiB)
    loop.set_read_only(device.path, True)
    found = loop.find(env.tag("vol"))
    assert found is not None
    assert found.read_only
    loop.set_read_only(device.path, False)
    assert not loop.find(env.tag("vol")).read_only  # type: ignore[union-attr]

    loop.set_read_only(device.path, True)
    loop.detach(device)
    if env.real:
        assert _sysfs_ro(device.path) == "0"
    following = env.attach("next", 8 * MiB)
    assert not following.read_only
    env.system.fs.mkfs(following.path, "ext4")  # the flag would make this fail


def test_refresh_capacity(env: Env) -> None:
    backing = env.file("vol", 16 * MiB)
    device = env.system.loop.attach(backing, env.tag("vol"))
    env.system.pool.grow(backing, 48 * MiB)
    assert env.system.devices.size(device.path) == 16 * MiB  # not until told
    env.system.loop.refresh_capacity(device.path)
    assert env.system.devices.size(device.path) == 48 * MiB
    assert env.system.loop.find(env.tag("vol")).size_bytes == 48 * MiB  # type: ignore[union-attr]


def test_tag_rules(env: Env) -> None:
    backing = env.file("vol", 8 * MiB)
    longest = env.tag("x" * (MAX_TAG_BYTES - len(env.tag_prefix)))
    assert len(longest) == MAX_TAG_BYTES
    with pytest.raises(ValueError):
        env.system.loop.attach(backing, longest + "x")
    with pytest.raises(ValueError):
        env.system.loop.attach(backing, "")
    assert env.system.loop.list(env.tag_prefix) == []
    device = env.system.loop.attach(backing, longest)
    assert env.system.loop.find(longest) == device


def test_attach_missing_backing_file(env: Env) -> None:
    with pytest.raises(FileNotFoundError):
        env.system.loop.attach(env.pool_dir / "missing", env.tag("missing"))


def test_removed_backing_file_keeps_device(env: Env) -> None:
    device = env.attach("vol", 8 * MiB)
    env.system.pool.remove(Path(device.backing_file))
    found = env.system.loop.find(env.tag("vol"))
    assert found is not None
    assert found.backing_file == device.backing_file + " (deleted)"


def test_detach_while_mounted_waits_for_unmount(env: Env) -> None:
    device, target = env.mounted("vol", EXT4_SIZE)
    env.system.loop.detach(device)
    assert env.system.loop.find(env.tag("vol")) is not None  # still in use
    env.system.mounts.unmount(target)
    assert env.system.loop.find(env.tag("vol")) is None


def test_threads_attaching_one_tag_share_one_device(env: Env) -> None:
    backing = env.file("vol", 8 * MiB)
    with ThreadPoolExecutor(max_workers=8) as pool:
        devices = list(
            pool.map(lambda _: env.system.loop.attach(backing, env.tag("vol")), range(8))
        )
    assert len({device.path for device in devices}) == 1
    assert len(env.system.loop.list(env.tag_prefix)) == 1


def test_threads_attaching_many_tags_get_distinct_devices(env: Env) -> None:
    files = [env.file(f"vol-{i}", 8 * MiB) for i in range(6)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        devices = list(
            pool.map(lambda i: env.system.loop.attach(files[i], env.tag(f"vol-{i}")), range(6))
        )
    assert len({device.path for device in devices}) == len(files)
    for i, device in enumerate(devices):
        assert device.backing_file == str(files[i])
