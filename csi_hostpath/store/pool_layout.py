"""The pool directory's layout, and the small files through which the controller and the node
plugins talk without a network: leases (who holds a volume under which fencing token) and node
heartbeats. In shared pool scope every node sees the same directory.

Each file is replaced atomically (unique temp file, fsync, rename, fsync of the directory), so a
reader sees the old or the new content, never a torn one.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from csi_hostpath.core.ledger_rules import Lease
from csi_hostpath.core.naming import is_snapshot_id, is_volume_id, node_key


def write_atomically(path: Path, data: bytes, *, durable: bool = True) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    node_id: str
    at: float
    pid: int
    # What the node reports it has staged: volume ID -> {"staging", "device", "access_type",
    # "generation", "targets"}. For operators (inspect), never for decisions.
    volumes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.at)


def _heartbeat(data: dict[str, Any]) -> Heartbeat:
    volumes = data.get("volumes")
    return Heartbeat(
        str(data["node_id"]),
        float(data["at"]),
        int(data.get("pid", 0)),
        volumes if isinstance(volumes, dict) else {},
    )


class PoolLayout:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.volumes = root / "volumes"
        self.snapshots = root / "snapshots"
        self.leases = root / "leases"
        self.nodes = root / "nodes"
        self.events = root / "events"

    def ensure(self) -> None:
        """The pool's directories, root's alone (several plugins and a controller share one
        pool, all as root). The pool directory itself is only made 0700 when the driver makes
        it: one given to it (a hostPath, a shared mount) keeps the mode its owner chose."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for d in (self.volumes, self.snapshots, self.leases, self.nodes, self.events):
            d.mkdir(mode=0o700, exist_ok=True)
            with contextlib.suppress(PermissionError):
                if d.stat().st_uid == os.geteuid() and d.stat().st_mode & 0o077:
                    d.chmod(0o700)

    def volume_file(self, volume_id: str) -> Path:
        # The ID check is the last line of defence: nothing unvalidated is joined into a path.
        if not is_volume_id(volume_id):
            raise ValueError(f"not a volume ID: {volume_id!r}")
        return self.volumes / f"{volume_id}.img"

    def snapshot_file(self, snapshot_id: str) -> Path:
        if not is_snapshot_id(snapshot_id):
            raise ValueError(f"not a snapshot ID: {snapshot_id!r}")
        return self.snapshots / f"{snapshot_id}.img"

    # ----- leases -----
    def write_lease(self, lease: Lease) -> None:
        # Not fsynced: a lease is a cache of the durable ledger (see service.controller.sync_lease).
        path = self.leases / f"{lease.volume_id}.json"
        body = {
            "volume_id": lease.volume_id,
            "generation": lease.generation,
            "holders": lease.holders,
            "written_at": time.time(),
        }
        write_atomically(path, json.dumps(body, sort_keys=True).encode(), durable=False)

    def read_lease(self, volume_id: str) -> Lease | None:
        if not is_volume_id(volume_id):
            return None
        data = _read_json(self.leases / f"{volume_id}.json")
        if data is None:
            return None
        holders = data.get("holders", {})
        return Lease(
            volume_id=volume_id,
            generation=int(data.get("generation", 0)),
            holders={str(k): int(v) for k, v in holders.items()},
        )

    def remove_lease(self, volume_id: str) -> None:
        if is_volume_id(volume_id):
            (self.leases / f"{volume_id}.json").unlink(missing_ok=True)

    # ----- heartbeats -----
    # A node's heartbeat is a small record, nodes/<key>.json ({node_id, at, pid}), rewritten on
    # a timer, plus one file per volume it reports, nodes/<key>/<volume>.json, written when that
    # volume's staging or targets change. So a beat costs the same with 10 volumes staged or
    # 500, and a reader asking about one volume reads one file per node. A record written by an
    # older version carries every volume inline ("volumes"); readers still take those.
    def _node_dir(self, node_id: str) -> Path:
        return self.nodes / node_key(node_id)

    def touch(self, node_id: str) -> None:
        """The node's record alone: it is alive now."""
        body = {"node_id": node_id, "at": time.time(), "pid": os.getpid()}
        # Not fsynced: a heartbeat lost in a crash is simply older, which is the truth.
        write_atomically(
            self.nodes / f"{node_key(node_id)}.json", json.dumps(body).encode(), durable=False
        )

    def beat_volume(
        self,
        node_id: str,
        volume_id: str,
        entry: dict[str, Any] | None,
        *,
        unless_same: bool = False,
    ) -> None:
        """What the node reports of one volume; None: it reports nothing of it any more.
        unless_same: leave the file alone when it already says exactly this (a read is much
        cheaper than a create and a rename, and at start nearly every entry is unchanged)."""
        if not is_volume_id(volume_id):
            return
        path = self._node_dir(node_id) / f"{volume_id}.json"
        if entry is None:
            path.unlink(missing_ok=True)
            return
        data = json.dumps(entry, sort_keys=True).encode()
        if unless_same:
            try:
                if path.read_bytes() == data:
                    return
            except OSError:
                pass
        try:
            write_atomically(path, data, durable=False)
        except FileNotFoundError:  # the node's directory, made on its first report
            path.parent.mkdir(exist_ok=True)
            write_atomically(path, data, durable=False)

    def beat(self, node_id: str, volumes: dict[str, dict[str, Any]] | None = None) -> None:
        """The whole heartbeat: the record, and exactly these volumes (at start, after repairs)."""
        volumes = volumes or {}
        directory = self._node_dir(node_id)
        directory.mkdir(exist_ok=True)
        for stale in set(self._volume_files(directory)) - set(volumes):
            self.beat_volume(node_id, stale, None)
        for volume_id, entry in volumes.items():
            self.beat_volume(node_id, volume_id, entry, unless_same=True)
        self.touch(node_id)

    def _volume_files(self, directory: Path) -> list[str]:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        return [n.removesuffix(".json") for n in names if n.endswith(".json") and n[0] != "."]

    def _record(self, path: Path) -> Heartbeat | None:
        data = _read_json(path)
        if data is None or "node_id" not in data:
            return None
        return _heartbeat(data)

    def node_record(self, node_id: str) -> Heartbeat | None:
        """The node's record without its volumes (beyond any an old record carries inline):
        does the node exist, and when did it last beat."""
        beat = self._record(self.nodes / f"{node_key(node_id)}.json")
        return beat if beat is not None and beat.node_id == node_id else None

    def _with_volumes(self, beat: Heartbeat, only: str | None = None) -> Heartbeat:
        directory = self._node_dir(beat.node_id)
        volumes = dict(beat.volumes)
        names = self._volume_files(directory) if only is None else [only]
        for volume_id in names:
            entry = _read_json(directory / f"{volume_id}.json")
            if entry is not None:
                volumes[volume_id] = entry
        if only is not None:
            volumes = {only: volumes[only]} if only in volumes else {}
        return replace(beat, volumes=volumes)

    def reported(self, node_id: str, volume_id: str) -> dict[str, Any] | None:
        """What the node last reported of one volume (one small file), or None."""
        if not is_volume_id(volume_id):
            return None
        return _read_json(self._node_dir(node_id) / f"{volume_id}.json")

    def last_report(self, node_id: str) -> float | None:
        """When the node last wrote anything of its heartbeat: its record (on the timer) or a
        volume's report (each rename in its directory moves the directory's mtime)."""
        beat = self.node_record(node_id)
        if beat is None:
            return None
        try:
            return max(beat.at, self._node_dir(node_id).stat().st_mtime)
        except OSError:
            return beat.at

    def heartbeat(self, node_id: str) -> Heartbeat | None:
        beat = self.node_record(node_id)
        return None if beat is None else self._with_volumes(beat)

    def heartbeats(self, volume_id: str | None = None) -> list[Heartbeat]:
        """Every node's heartbeat; with volume_id, each carries only that volume's entry (if
        it reports one), which reads one small file per node."""
        beats = []
        for path in sorted(self.nodes.glob("*.json")):
            beat = self._record(path)
            if beat is not None:
                beats.append(self._with_volumes(beat, volume_id))
        return beats

    # ----- events that nodes report to the controller's audit trail -----
    def record_event(
        self, action: str, volume_id: str, node_id: str, generation: int, reason: str
    ) -> str:
        """Report an event to the controller's audit trail; returns its id (unique, also the
        file's name), which makes recording it more than once harmless."""
        event_id = f"{time.time_ns()}-{node_key(node_id)}-{volume_id}"
        body = {
            "event_id": event_id,
            "action": action,
            "volume_id": volume_id,
            "node_id": node_id,
            "generation": generation,
            "reason": reason,
            "at": time.time(),
        }
        write_atomically(self.events / f"{event_id}.json", json.dumps(body).encode())
        return event_id

    def take_events(self) -> list[tuple[Path, dict[str, Any]]]:
        """Events not yet imported, oldest first; the caller deletes each once it is recorded."""
        found = []
        for path in sorted(self.events.glob("*.json")):
            data = _read_json(path)
            if data is not None:
                found.append((path, data))
        return found
