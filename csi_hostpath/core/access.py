"""Which capabilities this driver serves, how sizes round, and when a CreateVolume repeated by
name asks for the volume that exists. Pure rules, no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from csi_hostpath.core.errors import CapacityOutOfRange, Incompatible, InvalidRequest, Unsupported
from csi_hostpath.core.model import AccessMode, AccessType, Capability, ContentSource, Volume
from csi_hostpath.core.sizes import describe_bytes

SUPPORTED_FS_TYPES = ("ext4", "xfs")
DEFAULT_FS_TYPE = "ext4"
MiB = 1 << 20
GiB = 1 << 30
DEFAULT_VOLUME_SIZE = 1 * GiB
# mkfs.xfs refuses filesystems below 300 MiB; ext4 and raw block are fine far lower, but a few
# MiB keeps the journal and metadata from eating the whole volume.
MIN_SIZE = {"ext4": 16 * MiB, "xfs": 300 * MiB, "": 1 * MiB}

SINGLE_NODE_MODES = frozenset(
    {
        AccessMode.SINGLE_NODE_WRITER,
        AccessMode.SINGLE_NODE_READER_ONLY,
        AccessMode.SINGLE_NODE_SINGLE_WRITER,
        AccessMode.SINGLE_NODE_MULTI_WRITER,
    }
)
READER_ONLY_MODES = frozenset(
    {AccessMode.SINGLE_NODE_READER_ONLY, AccessMode.MULTI_NODE_READER_ONLY}
)
# Two nodes writing one device is only safe when no filesystem sits on it: two ext4 or xfs mounts
# of one device corrupt it, whatever the application does.
BLOCK_ONLY_MODES = frozenset(
    {AccessMode.MULTI_NODE_SINGLE_WRITER, AccessMode.MULTI_NODE_MULTI_WRITER}
)


def check_capability(cap: Capability) -> None:
    """Raise unless this driver can serve cap at all."""
    if cap.access_mode == AccessMode.UNKNOWN:
        raise InvalidRequest("volume capability access_mode is required and must be known")
    if cap.access_type == AccessType.MOUNT:
        if cap.access_mode in BLOCK_ONLY_MODES:
            raise Unsupported(
                f"{cap.access_mode.name} is only served for block volumes: two nodes writing one "
                "filesystem would corrupt it; request volumeMode: Block"
            )
        if cap.fs_type and cap.fs_type not in SUPPORTED_FS_TYPES:
            raise Unsupported(
                f"fs_type {cap.fs_type!r} is not supported; "
                f"use one of {', '.join(SUPPORTED_FS_TYPES)}"
            )
        changing = source_changing_options(cap.mount_flags)
        if changing:
            raise InvalidRequest(
                f"mount_flags {changing} would change the mount source: this driver mounts the "
                "volume's own loop device; drop them (loop, offset=, sizelimit=, encryption=, "
                "bind, rbind, move, remount and x-mount.* are refused)"
            )
    elif cap.fs_type or cap.mount_flags:
        raise InvalidRequest("a block capability can't carry fs_type or mount_flags")


# Options that change what is mounted rather than how: mount(8) would set up a loop device of its
# own over the volume's (loop, offset=, sizelimit=, encryption=), or mount something else than
# the volume's device (bind, rbind, move, remount, the x-mount.* helpers). A second loop device
# is invisible to teardown, which then answers OK with the volume still mounted.
_SOURCE_OPTIONS = frozenset({"loop", "bind", "rbind", "move", "remount"})
_SOURCE_PREFIXES = ("loop=", "offset=", "sizelimit=", "encryption=", "x-mount.")


def _split(flags: Sequence[str]) -> list[str]:
    # One CSI mount flag may hold several options joined by commas, as mount -o takes them.
    return [o.strip() for flag in flags for o in flag.split(",") if o.strip()]


def source_changing_options(flags: Sequence[str]) -> list[str]:
    """The options among flags that change the mount source (refused)."""
    return [
        o
        for o in _split(flags)
        if o.lower() in _SOURCE_OPTIONS or o.lower().startswith(_SOURCE_PREFIXES)
    ]


# Per-mount flags the kernel shows for a mount (mountinfo field 6) exactly as mount -o takes them,
# so a second NodeStage can be compared with the live mount. Filesystem options are not shown
# there, "ro" also comes from the grant, and the atime flags override each other.
_VFS_PAIRS = {"nodev": "dev", "noexec": "exec", "nosuid": "suid"}


def vfs_flags(options: Sequence[str]) -> frozenset[str]:
    found: set[str] = set()
    for o in _split(options):
        if o in _VFS_PAIRS:
            found.add(o)
        elif "no" + o in _VFS_PAIRS:
            found.discard("no" + o)  # the later option wins, as in mount(8)
    return frozenset(found)


def check_source_fs(source_id: str, source_fs: str | None, fs_type: str) -> None:
    """A clone or restore keeps its source's content: an ext4 source can't become xfs, and block
    data can't become a filesystem or back (the first stage would format it away, or fail every
    time). source_fs is "" for a block volume and None when unknown (the source was deleted)."""
    if source_fs is not None and source_fs != fs_type:
        raise InvalidRequest(
            f"the source {source_id} holds {source_fs or 'raw block data'}; a volume made from "
            f"it must be {source_fs or 'a block volume'} too, not {fs_type or 'block'}: ask for "
            f"{'fs_type ' + source_fs if source_fs else 'volumeMode: Block'}"
        )


def volume_fs_type(caps: Sequence[Capability]) -> str:
    """The filesystem a volume gets: the one its mount capabilities agree on, or the default."""
    wanted = {c.fs_type for c in caps if c.access_type == AccessType.MOUNT and c.fs_type}
    if len(wanted) > 1:
        raise InvalidRequest(f"capabilities ask for different filesystems: {sorted(wanted)}")
    if wanted:
        return wanted.pop()
    if any(c.access_type == AccessType.MOUNT for c in caps):
        return DEFAULT_FS_TYPE
    return ""


def effective_readonly(mode: AccessMode, readonly: bool) -> bool:
    return readonly or mode in READER_ONLY_MODES


def round_capacity(required: int, limit: int, fs_type: str, max_volume_size: int) -> int:
    """The size a volume really gets for a capacity range (0 means unset in CSI)."""
    if required < 0 or limit < 0:
        raise InvalidRequest("capacity_range bytes must not be negative")
    if limit and required > limit:
        raise CapacityOutOfRange(f"required_bytes {required} exceeds limit_bytes {limit}")
    minimum = MIN_SIZE.get(fs_type, MiB)
    wanted = (
        required
        if required
        else (min(DEFAULT_VOLUME_SIZE, limit) if limit else DEFAULT_VOLUME_SIZE)
    )
    size = max(minimum, -(-wanted // MiB) * MiB)
    if limit and size > limit:
        # Rounding up overshot the limit: fall back to the limit itself, aligned to 4 KiB.
        size = limit // 4096 * 4096
        if size < max(required, minimum):
            raise CapacityOutOfRange(
                f"the capacity range [{required}, {limit}] can't hold a {fs_type or 'block'} "
                f"volume: the minimum is {describe_bytes(minimum)}"
            )
    if max_volume_size and size > max_volume_size:
        raise CapacityOutOfRange(
            f"{describe_bytes(size)} exceeds this driver's --max-volume-size of "
            f"{describe_bytes(max_volume_size)}"
        )
    return size


def check_same_volume(
    existing: Volume,
    capabilities: Sequence[Capability],
    required_bytes: int,
    limit_bytes: int,
    parameters: Mapping[str, str],
    content_source: ContentSource | None,
) -> None:
    """Raise Incompatible (ALREADY_EXISTS) unless a CreateVolume of existing's name with these
    arguments asks for existing itself."""
    problems = []
    if required_bytes and existing.capacity_bytes < required_bytes:
        problems.append(f"capacity {existing.capacity_bytes} < required {required_bytes}")
    if limit_bytes and existing.capacity_bytes > limit_bytes:
        problems.append(f"capacity {existing.capacity_bytes} > limit {limit_bytes}")
    if set(capabilities) != set(existing.capabilities):
        problems.append("different volume capabilities")
    if dict(parameters) != dict(existing.parameters):
        problems.append("different parameters")
    if content_source != existing.content_source:
        problems.append("different content source")
    if problems:
        raise Incompatible(
            f"a volume named {existing.name!r} already exists ({existing.volume_id}) with "
            + "; ".join(problems)
        )
