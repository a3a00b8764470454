"""The command's own index: which name is which volume or snapshot, and where each volume is
mounted (and staged). RUN_DIR/volume-cli/records.json, replaced atomically under an flock.

The driver is the truth; this file only maps the names a person typed to IDs. Losing it loses
no data: `create NAME` with the same name and size again gets the same volume back (CreateVolume
is idempotent on its name), and nothing here is ever deleted because a record is missing."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RECORDS_VERSION = 1
# A volume's CSI name is this and the name a person gave: the idempotency key of CreateVolume.
CSI_NAME_PREFIX = "volcli-"


@dataclass
class VolumeMount:
    path: str
    readonly: bool
    mounted_at: float = field(default_factory=time.time)
    # What `mount` made, so that `unmount` removes that and no more: the parent directories it
    # created (outermost first), and whether PATH was there before (the driver removes the
    # target it finds empty; one the user made is put back as it was).
    made_dirs: list[str] = field(default_factory=list)
    target_existed: bool = False
    target_mode: int = 0
    target_uid: int = -1
    target_gid: int = -1


@dataclass
class VolumeRecord:
    name: str
    volume_id: str
    fs: str  # ext4, xfs or block
    mode: str  # rwo, rwop or rox
    capacity_bytes: int
    source: str = ""  # "snapshot:NAME" or "volume:NAME" for a restore or a clone
    created_at: float = field(default_factory=time.time)
    volume_context: dict[str, str] = field(default_factory=dict)
    staging_path: str = ""  # set while staged (while at least one mount exists)
    publish_context: dict[str, str] = field(default_factory=dict)
    mounts: list[VolumeMount] = field(default_factory=list)
    # Grown while mounted, but the mounted filesystem could not grow (no CAP_SYS_RESOURCE):
    # df shows the old size until the next stage grows it; `list` says so.
    fs_behind: bool = False


@dataclass
class SnapshotRecord:
    name: str
    snapshot_id: str
    source_volume: str  # the volume's name when it was taken
    source_volume_id: str
    size_bytes: int
    fs: str  # the source's, so a restore needs no --fs
    created_at: float = field(default_factory=time.time)


@dataclass
class Records:
    volumes: dict[str, VolumeRecord] = field(default_factory=dict)
    snapshots: dict[str, SnapshotRecord] = field(default_factory=dict)

    def volume_by_id(self, volume_id: str) -> VolumeRecord | None:
        return next((v for v in self.volumes.values() if v.volume_id == volume_id), None)

    def mount_at(self, path: str) -> tuple[VolumeRecord, VolumeMount] | None:
        for vol in self.volumes.values():
            for m in vol.mounts:
                if m.path == path:
                    return vol, m
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": RECORDS_VERSION,
            "volumes": {k: asdict(v) for k, v in sorted(self.volumes.items())},
            "snapshots": {k: asdict(s) for k, s in sorted(self.snapshots.items())},
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Records:
        volumes = {}
        for name, raw in data.get("volumes", {}).items():
            mounts = [VolumeMount(**m) for m in raw.pop("mounts", [])]
            volumes[name] = VolumeRecord(**raw, mounts=mounts)
        snapshots = {n: SnapshotRecord(**s) for n, s in data.get("snapshots", {}).items()}
        return Records(volumes, snapshots)


class RecordsFile:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.path = base / "records.json"
        self.lock_path = base / "records.lock"

    def staging_path(self, volume_id: str) -> Path:
        return self.base / "staging" / volume_id

    def read(self) -> Records:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return Records()
        except (OSError, ValueError) as e:
            raise RecordsError(
                f"can't read {self.path}: {e}; move it aside and `create` each volume again "
                "with its name and size (the driver gives the same volume back)"
            ) from e
        if data.get("version") != RECORDS_VERSION:
            raise RecordsError(f"{self.path} has version {data.get('version')!r}, not 1")
        return Records.from_json(data)

    def write(self, records: Records) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".records-", suffix=".tmp", dir=self.base)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(records.to_json(), f, indent=2, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise

    @contextmanager
    def locked(self) -> Iterator[Records]:
        """Hold the lock for a whole command that changes things, so two commands never
        interleave their CSI calls for one name; write back what the block leaves."""
        self.base.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                records = self.read()
                try:
                    yield records
                finally:
                    # Written even when the block fails: a step that did happen stays recorded.
                    self.write(records)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


class RecordsError(Exception):
    pass
