"""Rebuild the sqlite index from the pool: the files are the truth, the database is an index.

Run by the controller at start, before it serves, and by `csi-hostpath state rebuild`. For each
backing file that no record claims:

- it carries an identity (store/backing/file_identity.py): its record is re-adopted, so ListVolumes
  lists it and a restore from it works again;
- it is what a crash left in its window (a ``*.tmp`` copy; a file without identity younger than
  its own unfinished intent, which was never handed out): it is removed;
- anything else is moved to POOL/quarantine/ with a ``.why.json`` beside it, and reported.

Nothing is unlinked because a record is missing. Fencing tokens never go backwards: a volume's
generation is raised to the newest one its lease file or a node's heartbeat has seen, and the
holders a newer lease lists are restored, so no node is fenced and no token is issued twice.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from csi_hostpath.core.access import effective_readonly
from csi_hostpath.core.model import AccessType, Publication, Volume
from csi_hostpath.core.naming import is_snapshot_id, is_volume_id
from csi_hostpath.store._log import log
from csi_hostpath.store.backing import file_identity
from csi_hostpath.store.db import Store
from csi_hostpath.store.ledger_store import GenerationFloor
from csi_hostpath.store.pool_layout import PoolLayout, write_atomically

QUARANTINE = "quarantine"
# An intent's time and its file's mtime come from the same clock, but a filesystem may round.
_CLOCK_SLACK_SECONDS = 2.0


@dataclass
class AdoptReport:
    adopted: list[str] = field(default_factory=list)
    quarantined: list[tuple[str, str]] = field(default_factory=list)  # (file, why)
    removed: list[str] = field(default_factory=list)  # crash leftovers inside their window
    stamped: list[str] = field(default_factory=list)  # recorded files given their identity
    raised: list[str] = field(default_factory=list)  # volumes whose generation was raised

    def summary(self) -> str:
        return (
            f"{len(self.adopted)} re-adopted, {len(self.quarantined)} quarantined, "
            f"{len(self.removed)} crash leftovers removed, {len(self.stamped)} identities "
            f"written, {len(self.raised)} generations raised"
        )


def quarantine_dir(layout: PoolLayout) -> Path:
    return layout.root / QUARANTINE


def quarantined_files(layout: PoolLayout) -> list[Path]:
    """Files waiting in quarantine for an operator (not their .why.json or sidecars)."""
    directory = quarantine_dir(layout)
    if not directory.is_dir():
        return []
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and not p.name.endswith((".why.json", file_identity.SIDECAR_SUFFIX))
    )


# What the driver keeps beside a volume's or snapshot's file: its identity sidecar, the intent of
# a create in flight, a copy being written.
_COMPANIONS = (file_identity.SIDECAR_SUFFIX, file_identity.INTENT_SUFFIX, ".tmp")


def _is_pool_file(name: str, is_id: Callable[[str], bool]) -> bool:
    for suffix in _COMPANIONS:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name.endswith(".img") and is_id(name[: -len(".img")])


def strays(layout: PoolLayout) -> list[Path]:
    """Entries of volumes/ and snapshots/ that are no volume's or snapshot's file (vol-<id>.img,
    snap-<id>.img) nor kept beside one: adopt_pool never takes them, and nothing deletes them."""
    found: list[Path] = []
    for directory, is_id in ((layout.volumes, is_volume_id), (layout.snapshots, is_snapshot_id)):
        if directory.is_dir():
            found += sorted(p for p in directory.iterdir() if not _is_pool_file(p.name, is_id))
    return found


def adopt_pool(store: Store, layout: PoolLayout) -> AdoptReport:
    report = AdoptReport()
    _sweep_tmp(layout, report)
    volumes = {v.volume_id: v for v in store.all_volumes()}
    snapshots = {s.snapshot_id for s in store.list_snapshots("", 0)[0]}
    known = set(volumes) | snapshots
    _settle_intents(layout, known, report)
    for path in sorted(layout.volumes.glob("vol-*.img")):
        if path.stem not in known and is_volume_id(path.stem):
            _adopt_file(store, layout, path, "volume", report)
    for path in sorted(layout.snapshots.glob("snap-*.img")):
        if path.stem not in known and is_snapshot_id(path.stem):
            _adopt_file(store, layout, path, "snapshot", report)
    _stamp_recorded(store, layout, report)
    beats = _staged_generations(layout)
    for volume in store.all_volumes():
        if _keep_generations_ahead(store, layout, volume, beats.get(volume.volume_id, {})):
            report.raised.append(volume.volume_id)
    for path_name, why in report.quarantined:
        log.warning("pool: quarantined %s: %s", path_name, why)
    if report.adopted or report.quarantined or report.removed or report.raised:
        log.warning("pool: rebuilt the index from %s: %s", layout.root, report.summary())
    return report


def _sweep_tmp(layout: PoolLayout, report: AdoptReport) -> None:
    for leftover in [*layout.volumes.glob("*.tmp"), *layout.snapshots.glob("*.tmp")]:
        # A copy (clone, restore, snapshot) interrupted by a crash; it is renamed into place
        # only when complete, so a *.tmp was never anyone's data.
        log.warning("repair: removing %s, an interrupted copy", leftover)
        leftover.unlink(missing_ok=True)
        report.removed.append(str(leftover))


def _settle_intents(layout: PoolLayout, known: set[str], report: AdoptReport) -> None:
    for intent in [
        *layout.volumes.glob("*" + file_identity.INTENT_SUFFIX),
        *layout.snapshots.glob("*" + file_identity.INTENT_SUFFIX),
    ]:
        path = intent.with_name(intent.name[: -len(file_identity.INTENT_SUFFIX)])
        body = file_identity.read_intent(intent) or {}
        if path.stem in known or not path.exists():
            intent.unlink(missing_ok=True)  # committed, or the file was never made
            continue
        if file_identity.read_identity(path) is not None:
            continue  # complete up to the commit: adopted below, which clears the intent
        started = float(body.get("at", 0.0))
        if path.stat().st_mtime + _CLOCK_SLACK_SECONDS >= started:
            log.warning(
                "repair: removing %s, made by a create that crashed before its identity was "
                "written (never handed out)",
                path,
            )
            path.unlink(missing_ok=True)
            file_identity.remove_identity(path)
            report.removed.append(str(path))
        # An older file is not what this intent made: it stays, to be quarantined below.


def _adopt_file(
    store: Store, layout: PoolLayout, path: Path, kind: str, report: AdoptReport
) -> None:
    body = file_identity.read_identity(path)
    if body is None:
        quarantine(layout, path, "no record and no identity: not a file this driver made", report)
        return
    if body.get("kind") != kind:
        quarantine(layout, path, f"its identity says {body.get('kind')!r}, not {kind}", report)
        return
    size = path.stat().st_size
    try:
        if kind == "volume":
            raced: object = store.insert_volume_unless_named(
                file_identity.volume_from_identity(body, size)
            )
        else:
            raced = store.insert_snapshot_unless_named(
                file_identity.snapshot_from_identity(body, size)
            )
    except (KeyError, TypeError, ValueError) as exc:
        quarantine(layout, path, f"its identity can't be read: {exc!r}", report)
        return
    if raced is not None:
        # A retried create made another file under the same name after this one's commit
        # failed; the record that won is the one the CO knows.
        quarantine(layout, path, f"its name {body.get('name')!r} belongs to another {kind}", report)
        return
    file_identity.finish(path)
    store.record("pool", "adopt", path.stem if kind == "volume" else "", "", 0, str(path))
    log.warning("pool: re-adopted %s %s (name %r) from its identity", kind, path.stem, body["name"])
    report.adopted.append(path.stem)


def quarantine(layout: PoolLayout, path: Path, why: str, report: AdoptReport) -> None:
    """Move path (and its sidecar) out of the pool's namespace, never deleting it."""
    directory = quarantine_dir(layout)
    directory.mkdir(exist_ok=True)
    dest = directory / path.name
    if dest.exists():
        dest = directory / f"{path.name}.{time.time_ns()}"
    os.rename(path, dest)
    sidecar = file_identity.sidecar_path(path)
    if sidecar.exists():
        os.rename(sidecar, file_identity.sidecar_path(dest))
    file_identity.intent_path(path).unlink(missing_ok=True)
    body = {"file": str(path), "now": str(dest), "why": why, "at": time.time()}
    write_atomically(dest.with_name(dest.name + ".why.json"), json.dumps(body).encode())
    report.quarantined.append((str(dest), why))


def _stamp_recorded(store: Store, layout: PoolLayout, report: AdoptReport) -> None:
    """Files whose record predates identities get one now, so a later state loss loses nothing."""
    fs_types: dict[str, str] = {}
    for volume in store.all_volumes():
        fs_types[volume.volume_id] = volume.fs_type
        path = layout.volume_file(volume.volume_id)
        if path.exists() and file_identity.read_identity(path) is None:
            file_identity.write_identity(path, file_identity.volume_identity(volume))
            report.stamped.append(volume.volume_id)
    for snap in store.list_snapshots("", 0)[0]:
        path = layout.snapshot_file(snap.snapshot_id)
        if path.exists() and file_identity.read_identity(path) is None:
            fs_type = fs_types.get(snap.source_volume_id, "")
            file_identity.write_identity(path, file_identity.snapshot_identity(snap, fs_type))
            report.stamped.append(snap.snapshot_id)


def _staged_generations(layout: PoolLayout) -> dict[str, dict[str, tuple[int, str]]]:
    """volume ID -> node ID -> (generation it staged under, access type), from heartbeats."""
    found: dict[str, dict[str, tuple[int, str]]] = {}
    for beat in layout.heartbeats():
        for volume_id, staged in beat.volumes.items():
            try:
                generation = int(staged.get("generation", 0))
            except (TypeError, ValueError):
                continue
            access = str(staged.get("access_type", ""))
            found.setdefault(volume_id, {})[beat.node_id] = (generation, access)
    return found


def _keep_generations_ahead(
    store: Store, layout: PoolLayout, volume: Volume, staged: dict[str, tuple[int, str]]
) -> bool:
    """Raise the volume's generation to every generation already issued, and restore the holders a
    lease newer than the database lists. Returns whether anything changed."""
    lease = layout.read_lease(volume.volume_id)

    def plan(current: int, held: set[str]) -> GenerationFloor:
        seen = [current, *(g for g, _ in staged.values())]
        holders: dict[str, int] = {}
        if lease is not None:
            seen += [lease.generation, *lease.holders.values()]
            if lease.generation > current:
                holders = lease.holders  # the lease is newer than this database's ledger
        elif not held:
            holders = {node: g for node, (g, _) in staged.items() if g > current}
        restored = tuple(
            _restored_holder(volume, node_id, generation, staged.get(node_id))
            for node_id, generation in holders.items()
            if node_id not in held
        )
        return GenerationFloor(max(seen), restored)

    return store.keep_generations_ahead(volume.volume_id, plan)


def _restored_holder(
    volume: Volume, node_id: str, generation: int, staged: tuple[int, str] | None
) -> Publication:
    # The lease keeps who holds which token, not the mode: the volume's first capability stands
    # in for it (what the attacher asked at create time in almost every case).
    cap = volume.capabilities[0]
    access = AccessType(staged[1]) if staged and staged[1] in ("mount", "block") else None
    log.warning(
        "pool: restoring %s's hold on %s under generation %d (mode %s assumed)",
        node_id,
        volume.volume_id,
        generation,
        cap.access_mode.name,
    )
    return Publication(
        volume_id=volume.volume_id,
        node_id=node_id,
        access_mode=cap.access_mode,
        access_type=access or cap.access_type,
        readonly=effective_readonly(cap.access_mode, False),
        generation=generation,
        published_at=time.time(),
    )
