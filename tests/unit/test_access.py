"""core/access.py rule by rule: capabilities, mount flags, filesystems, sizes.

csi_hostpath/core/access.py, rule by rule: which capabilities the driver serves, which mount
flags it refuses, how a volume's filesystem is chosen and how a capacity range becomes a size.

Each table row is one case of a rule, with the reason in its id, so this file reads as the
rules' documentation. Pure: no driver, no I/O."""

from __future__ import annotations

import pytest

from csi_hostpath.core import access
from csi_hostpath.core.access import (
    DEFAULT_VOLUME_SIZE,
    GiB,
    MiB,
    check_capability,
    check_source_fs,
    effective_readonly,
    round_capacity,
    source_changing_options,
    vfs_flags,
    volume_fs_type,
)
from csi_hostpath.core.errors import CapacityOutOfRange, DriverError, InvalidRequest, Unsupported
from csi_hostpath.core.model import AccessMode, AccessType, Capability

M = AccessMode
MOUNT, BLOCK = AccessType.MOUNT, AccessType.BLOCK


def mount(
    mode: AccessMode = M.SINGLE_NODE_WRITER, fs: str = "", flags: tuple[str, ...] = ()
) -> Capability:
    return Capability(MOUNT, mode, fs, flags)


def block(mode: AccessMode = M.SINGLE_NODE_WRITER) -> Capability:
    return Capability(BLOCK, mode)


# ---- Rule 1: which capabilities are served at all (check_capability) ----------------------------

SERVED = [
    pytest.param(mount(), id="a mount with no fs_type (the driver picks ext4)"),
    pytest.param(mount(fs="ext4"), id="ext4"),
    pytest.param(mount(fs="xfs"), id="xfs"),
    pytest.param(mount(flags=("noatime", "nodev,nosuid")), id="mount flags that only tune"),
    *[
        pytest.param(mount(mode), id=f"a mount, {mode.name}")
        for mode in access.SINGLE_NODE_MODES | {M.MULTI_NODE_READER_ONLY}
    ],
    *[
        pytest.param(block(mode), id=f"block, {mode.name}")
        for mode in AccessMode
        if mode != M.UNKNOWN
    ],
]


@pytest.mark.parametrize("cap", SERVED)
def test_served_capabilities(cap: Capability) -> None:
    check_capability(cap)


REFUSED: list[tuple[str, Capability, type[DriverError], str]] = [
    (
        "the access mode is required",
        mount(M.UNKNOWN),
        InvalidRequest,
        "access_mode is required",
    ),
    (
        "MULTI_NODE_MULTI_WRITER on a filesystem: two nodes writing one ext4 corrupt it",
        mount(M.MULTI_NODE_MULTI_WRITER),
        Unsupported,
        "volumeMode: Block",
    ),
    (
        "MULTI_NODE_SINGLE_WRITER on a filesystem: the readers' mounts corrupt it too",
        mount(M.MULTI_NODE_SINGLE_WRITER, fs="ext4"),
        Unsupported,
        "only served for block volumes",
    ),
    (
        "a filesystem the driver does not make",
        mount(fs="btrfs"),
        Unsupported,
        "use one of ext4, xfs",
    ),
    (
        "a block capability carries no fs_type",
        Capability(BLOCK, M.SINGLE_NODE_WRITER, "ext4"),
        InvalidRequest,
        "block capability",
    ),
    (
        "a block capability carries no mount flags",
        Capability(BLOCK, M.SINGLE_NODE_WRITER, "", ("noatime",)),
        InvalidRequest,
        "block capability",
    ),
    (
        "a flag that would mount another loop device over the volume's",
        mount(flags=("loop",)),
        InvalidRequest,
        "would change the mount source",
    ),
    (
        "a flag hidden in a comma-separated flag, in capitals",
        mount(flags=("noatime,OFFSET=4096",)),
        InvalidRequest,
        "OFFSET=4096",
    ),
]


@pytest.mark.parametrize(
    ("cap", "error", "says"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_refused_capabilities(cap: Capability, error: type[DriverError], says: str) -> None:
    with pytest.raises(error, match=says):
        check_capability(cap)


# ---- Rule 2: mount flags that change what is mounted are refused (source_changing_options) -----

SOURCE_CHANGING = [
    # (flags as the CO sends them, the options refused)
    (("loop",), ["loop"]),
    (("loop=/dev/loop9",), ["loop=/dev/loop9"]),
    (("offset=0", "sizelimit=1M"), ["offset=0", "sizelimit=1M"]),
    (("encryption=aes",), ["encryption=aes"]),
    (("bind",), ["bind"]),
    (("rbind",), ["rbind"]),
    (("move",), ["move"]),
    (("remount,ro",), ["remount"]),
    (("x-mount.mkdir",), ["x-mount.mkdir"]),
    (("noatime", " Bind "), ["Bind"]),  # trimmed, any case
    (("noatime", "nodev,nosuid", "ro", "discard"), []),  # tuning only: allowed
    ((), []),
]


@pytest.mark.parametrize(("flags", "refused"), SOURCE_CHANGING)
def test_source_changing_options(flags: tuple[str, ...], refused: list[str]) -> None:
    assert source_changing_options(flags) == refused


# ---- Rule 3: the per-mount flags compared with a live mount (vfs_flags) -------------------------

VFS = [
    # Only nodev, noexec and nosuid show in mountinfo's per-mount field as given.
    (("nodev", "noexec", "nosuid"), {"nodev", "noexec", "nosuid"}),
    (("nodev,noexec",), {"nodev", "noexec"}),
    # The later option wins, as in mount(8).
    (("nodev", "dev"), set()),
    (("dev", "nodev"), {"nodev"}),
    # Filesystem options and atime flags are not compared.
    (("noatime", "discard", "ro"), set()),
]


@pytest.mark.parametrize(("options", "expected"), VFS)
def test_vfs_flags(options: tuple[str, ...], expected: set[str]) -> None:
    assert vfs_flags(options) == frozenset(expected)


# ---- Rule 4: a clone or restore keeps its source's content (check_source_fs) --------------------


@pytest.mark.parametrize(
    ("source_fs", "fs_type"),
    [
        pytest.param("ext4", "ext4", id="ext4 from ext4"),
        pytest.param("", "", id="block from block"),
        pytest.param(None, "xfs", id="anything when the source is gone (unknown)"),
    ],
)
def test_source_fs_allowed(source_fs: str | None, fs_type: str) -> None:
    check_source_fs("snap-1", source_fs, fs_type)


@pytest.mark.parametrize(
    ("source_fs", "fs_type", "hint"),
    [
        pytest.param("ext4", "xfs", "ask for fs_type ext4", id="xfs from ext4"),
        pytest.param("ext4", "", "ask for fs_type ext4", id="block from ext4"),
        pytest.param("", "ext4", "ask for volumeMode: Block", id="ext4 from raw block"),
    ],
)
def test_source_fs_refused(source_fs: str, fs_type: str, hint: str) -> None:
    with pytest.raises(InvalidRequest, match=hint) as info:
        check_source_fs("snap-1", source_fs, fs_type)
    assert "snap-1" in str(info.value)


# ---- Rule 5: a volume's filesystem (volume_fs_type) ---------------------------------------------

FS_CHOICE = [
    pytest.param([mount()], "ext4", id="a mount with no fs_type gets the default, ext4"),
    pytest.param([mount(fs="xfs")], "xfs", id="the fs_type asked for"),
    pytest.param([mount(), mount(fs="xfs")], "xfs", id="one fs_type among blank ones"),
    pytest.param([block()], "", id="block only: no filesystem"),
    pytest.param([block(), mount(fs="xfs")], "xfs", id="block and a mount: the mount's"),
]


@pytest.mark.parametrize(("caps", "fs_type"), FS_CHOICE)
def test_volume_fs_type(caps: list[Capability], fs_type: str) -> None:
    assert volume_fs_type(caps) == fs_type


def test_capabilities_that_disagree_on_the_filesystem_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="different filesystems"):
        volume_fs_type([mount(fs="ext4"), mount(fs="xfs")])


# ---- Rule 6: reader-only modes are read-only whatever readonly says (effective_readonly) --------


@pytest.mark.parametrize("mode", list(AccessMode))
@pytest.mark.parametrize("readonly", [False, True])
def test_effective_readonly(mode: AccessMode, readonly: bool) -> None:
    reader_only = mode in (M.SINGLE_NODE_READER_ONLY, M.MULTI_NODE_READER_ONLY)
    assert effective_readonly(mode, readonly) is (readonly or reader_only)


# ---- Rule 7: a capacity range becomes a size (round_capacity) -----------------------------------
# CSI: 0 means unset; the size must be >= required_bytes and <= limit_bytes when they are set.

SIZES = [
    # (why, required, limit, fs_type, max_volume_size, size)
    ("nothing asked: the default, 1 GiB", 0, 0, "ext4", 0, DEFAULT_VOLUME_SIZE),
    ("only a limit below the default: the limit", 0, 256 * MiB, "ext4", 0, 256 * MiB),
    ("only a limit above the default: the default", 0, 4 * GiB, "ext4", 0, DEFAULT_VOLUME_SIZE),
    ("required rounds up to a whole MiB", 20 * MiB + 1, 0, "ext4", 0, 21 * MiB),
    ("required exactly", 64 * MiB, 64 * MiB, "ext4", 0, 64 * MiB),
    ("below the ext4 minimum: raised to 16 MiB", 1, 0, "ext4", 0, 16 * MiB),
    ("below the xfs minimum: raised to 300 MiB", 1, 0, "xfs", 0, 300 * MiB),
    ("block volumes go down to 1 MiB", 1, 0, "", 0, MiB),
    (
        "rounding would pass the limit: the limit, aligned to 4 KiB",
        20 * MiB + 1,
        20 * MiB + 8192 + 5,
        "ext4",
        0,
        20 * MiB + 8192,
    ),
    ("at --max-volume-size exactly", 32 * MiB, 0, "ext4", 32 * MiB, 32 * MiB),
]


@pytest.mark.parametrize(
    ("required", "limit", "fs_type", "max_size", "size"),
    [r[1:] for r in SIZES],
    ids=[r[0] for r in SIZES],
)
def test_round_capacity(required: int, limit: int, fs_type: str, max_size: int, size: int) -> None:
    assert round_capacity(required, limit, fs_type, max_size) == size


SIZE_REFUSED: list[tuple[str, int, int, str, int, type[DriverError], str]] = [
    ("negative bytes", -1, 0, "ext4", 0, InvalidRequest, "must not be negative"),
    ("a negative limit", 0, -1, "ext4", 0, InvalidRequest, "must not be negative"),
    ("required above the limit", 64 * MiB, 32 * MiB, "ext4", 0, CapacityOutOfRange, "exceeds"),
    ("a limit below the ext4 minimum", 0, MiB, "ext4", 0, CapacityOutOfRange, "minimum"),
    ("a limit below the xfs minimum", 0, 299 * MiB, "xfs", 0, CapacityOutOfRange, "minimum"),
    (
        "past --max-volume-size",
        33 * MiB,
        0,
        "ext4",
        32 * MiB,
        CapacityOutOfRange,
        "--max-volume-size",
    ),
    (
        "the default past --max-volume-size",
        0,
        0,
        "ext4",
        512 * MiB,
        CapacityOutOfRange,
        "--max-volume-size",
    ),
]


@pytest.mark.parametrize(
    ("required", "limit", "fs_type", "max_size", "error", "says"),
    [r[1:] for r in SIZE_REFUSED],
    ids=[r[0] for r in SIZE_REFUSED],
)
def test_round_capacity_refuses(
    required: int,
    limit: int,
    fs_type: str,
    max_size: int,
    error: type[DriverError],
    says: str,
) -> None:
    with pytest.raises(error, match=says):
        round_capacity(required, limit, fs_type, max_size)


@pytest.mark.parametrize("fs_type", ["ext4", "xfs", ""])
@pytest.mark.parametrize("required", [0, 1, MiB - 1, MiB, 17 * MiB + 3, 3 * GiB])
def test_a_rounded_size_is_whole_mib_and_at_least_what_was_asked(
    fs_type: str, required: int
) -> None:
    size = round_capacity(required, 0, fs_type, 0)
    assert size % MiB == 0
    assert size >= max(required, access.MIN_SIZE[fs_type])
