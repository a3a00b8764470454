"""Each backing file carries its own identity, so the pool can always be read without sqlite.

The identity (kind, ID, name, size, capabilities, filesystem, parameters, source, creation time)
is JSON in the extended attribute ``user.csi-hostpath.identity``; where the pool filesystem has
no user xattrs (older tmpfs, some network filesystems) or the value is too large, it is a sidecar
``<file>.meta.json`` instead. ``CSI_HOSTPATH_IDENTITY_STORE=sidecar`` forces the sidecar (tests).

A write follows the order that makes a crash tellable (see docs/design.md, "The pool is the
truth"): an intent ``<file>.pending.json`` first, then the file, then its identity, then the
sqlite record, and the intent is cleared last. At start, a file with an intent but no identity is
what a crash left in its window (never handed out); a file with an identity is adopted; anything
else is quarantined.
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path
from typing import Any

from csi_hostpath.core.model import ContentSource, Snapshot, Volume
from csi_hostpath.store.pool_layout import write_atomically
from csi_hostpath.store.rows import caps_from_json, caps_to_json

XATTR = "user.csi-hostpath.identity"
STORE_ENV = "CSI_HOSTPATH_IDENTITY_STORE"
SIDECAR_SUFFIX = ".meta.json"
INTENT_SUFFIX = ".pending.json"
FORMAT = 1
# ext4 keeps xattrs in the inode or one block, and answers ENOSPC (not E2BIG) for a larger value,
# which would read as a full pool: a large identity (many parameters) goes to the sidecar.
_XATTR_MAX_BYTES = 2048
# Filesystems without user xattrs, or a value too large for the inode: use the sidecar.
_NO_XATTR = {errno.ENOTSUP, errno.EOPNOTSUPP, errno.E2BIG, errno.ERANGE, errno.EPERM}


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def intent_path(path: Path) -> Path:
    return path.with_name(path.name + INTENT_SUFFIX)


def volume_identity(volume: Volume) -> dict[str, Any]:
    source = volume.content_source
    return {
        "format": FORMAT,
        "kind": "volume",
        "id": volume.volume_id,
        "name": volume.name,
        "size_bytes": volume.capacity_bytes,
        "capabilities": json.loads(caps_to_json(volume.capabilities)),
        "access_types": sorted({c.access_type.value for c in volume.capabilities}),
        "fs_type": volume.fs_type,
        "parameters": dict(volume.parameters),
        "source": {"kind": source.kind, "id": source.source_id} if source else None,
        "node_id": volume.node_id,
        "created_at": volume.created_at,
        "requested_bytes": volume.requested_bytes,
    }


def snapshot_identity(snapshot: Snapshot, fs_type: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "kind": "snapshot",
        "id": snapshot.snapshot_id,
        "name": snapshot.name,
        "size_bytes": snapshot.size_bytes,
        "source_volume_id": snapshot.source_volume_id,
        "fs_type": fs_type,
        "created_at": snapshot.created_at,
        "restore_bytes": snapshot.restore_bytes,
    }


def volume_from_identity(body: dict[str, Any], size_bytes: int) -> Volume:
    """The volume an identity describes; the file's own size wins over the recorded one (an
    expansion that crashed after the grow but before the identity was rewritten)."""
    source = body.get("source")
    return Volume(
        volume_id=str(body["id"]),
        name=str(body["name"]),
        capacity_bytes=max(int(body["size_bytes"]), size_bytes),
        capabilities=caps_from_json(json.dumps(body["capabilities"])),
        fs_type=str(body.get("fs_type", "")),
        parameters={str(k): str(v) for k, v in dict(body.get("parameters") or {}).items()},
        content_source=ContentSource(str(source["kind"]), str(source["id"])) if source else None,
        node_id=body.get("node_id"),
        created_at=float(body.get("created_at", 0.0)),
        requested_bytes=int(body.get("requested_bytes", 0)),
    )


def snapshot_from_identity(body: dict[str, Any], size_bytes: int) -> Snapshot:
    return Snapshot(
        snapshot_id=str(body["id"]),
        name=str(body["name"]),
        source_volume_id=str(body["source_volume_id"]),
        size_bytes=max(int(body["size_bytes"]), size_bytes),
        created_at=float(body.get("created_at", 0.0)),
        restore_bytes=int(body.get("restore_bytes", 0)),
    )


def _forced_sidecar() -> bool:
    return os.environ.get(STORE_ENV, "xattr") == "sidecar"


def write_identity(path: Path, body: dict[str, Any]) -> None:
    """Attach the identity to the file, durably, before anything uses the file."""
    data = json.dumps(body, sort_keys=True).encode()
    if not _forced_sidecar() and len(data) <= _XATTR_MAX_BYTES:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.setxattr(fd, XATTR, data)
            os.fsync(fd)  # the xattr is inode metadata: durable with the file's fsync
            sidecar_path(path).unlink(missing_ok=True)  # an older sidecar must not contradict
            return
        except OSError as exc:
            if exc.errno not in _NO_XATTR:
                raise
        finally:
            os.close(fd)
    write_atomically(sidecar_path(path), data)


def read_identity(path: Path) -> dict[str, Any] | None:
    """The identity the file carries (xattr first, then sidecar), or None if it has none."""
    raw: bytes | None = None
    try:
        raw = os.getxattr(path, XATTR)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not path.exists():
            return None
    if raw is None:
        try:
            raw = sidecar_path(path).read_bytes()
        except OSError:
            return None
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict) or "id" not in body or body.get("id") != path.stem:
        return None  # an identity that names another file is no identity for this one
    return body


def remove_identity(path: Path) -> None:
    """Drop what outlives the file itself: the sidecar and the intent (an xattr dies with it)."""
    sidecar_path(path).unlink(missing_ok=True)
    intent_path(path).unlink(missing_ok=True)


def begin(path: Path, body: dict[str, Any]) -> None:
    """Record the intent to create path, before the file exists."""
    intent = {"intent": "create", "at": time.time(), "identity": body}
    write_atomically(intent_path(path), json.dumps(intent, sort_keys=True).encode())


def finish(path: Path) -> None:
    """The record is committed: the intent is done."""
    intent_path(path).unlink(missing_ok=True)


def read_intent(intent: Path) -> dict[str, Any] | None:
    try:
        body = json.loads(intent.read_bytes())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None
