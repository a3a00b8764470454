"""The node's heartbeat: what this node holds, told to operators and to other nodes (each staged
volume's entry, heartbeat_entry), written by the RPC that changed it and by a thread of its own,
which on the same clock fences the volumes whose lease moved to another node."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from csi_hostpath.core import conditions, ledger_rules
from csi_hostpath.core.errors import Busy, ForeignMount, PathDiverted
from csi_hostpath.core.model import AccessType, NodePublication, NodeStaging
from csi_hostpath.core.naming import loop_tag
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.adopt import Unclaimed
from csi_hostpath.service.node.device_watch import DeviceWatch
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.service.node.node_mounts import NodeMounts


def heartbeat_entry(s: NodeStaging, publications: list[NodePublication]) -> dict[str, Any]:
    """What the heartbeat says of one staged volume: enough for operators, and enough to
    re-adopt the volume if this node's records are lost."""
    return {
        "staging": s.staging_path,
        "device": s.device,
        "access_type": s.access_type.value,
        "access_mode": s.access_mode.name,
        "fs_type": s.fs_type,
        "readonly": s.readonly,
        "generation": s.generation,
        # When the stage was done: how long the attach-to-stage step took, for a reader.
        "staged_at": s.staged_at,
        "targets": sorted(p.target_path for p in publications),
        "publications": [
            {"target": p.target_path, "readonly": p.readonly, "mount_flags": list(p.mount_flags)}
            for p in sorted(publications, key=lambda p: p.target_path)
        ],
    }


class NodeAgent:
    def __init__(self, ctx: NodeContext, mounts: NodeMounts, unclaimed: Unclaimed) -> None:
        self.ctx = ctx  # its flags: heartbeat_interval, fence_interval
        self.node_id = ctx.node_id
        self.store = ctx.store
        self.system = ctx.system
        self.layout = ctx.layout
        self.mounts = mounts
        self.inflight = ctx.inflight
        self._stop = threading.Event()
        # Node RPCs ask for a heartbeat (so inspect sees a stage at once) without paying for the
        # file write themselves; the background thread writes it, coalescing bursts.
        self._beat_soon = threading.Event()
        self._thread: threading.Thread | None = None
        # What repair left in place for lack of a record: the heartbeat reports it.
        self.unclaimed = unclaimed
        # The node's own jobs after each fence pass (start_background names them).
        self._after_fence_pass: Callable[[], None] = lambda: None
        # Volume ID -> the filesystem error count the heartbeat last reported.
        self._reported_errors: dict[str, int] = {}
        # Loop devices detached behind the driver's back, heard from the kernel's uevents.
        self.devices = DeviceWatch(ctx, self.volume_changed)

    def volume_changed(self, volume_id: str) -> None:
        """Report one volume as it is now (staged, targets, or gone): one small file, written
        by the RPC that changed it, so another node waiting for this one to let go sees it at
        once. Nothing else is read or rewritten, and no store lock is held while writing."""
        if self.mounts.forget_released():
            # Another volume's busy path is free now (this one was mounted beneath it): its
            # entry is rewritten before this RPC answers, so inspect right after agrees.
            try:
                self.beat()
            except OSError:
                self._beat_soon.set()
        staged = self.store.get_staging(volume_id)
        # Left in place for the CO's NodeUnstage, which has now taken it down: once its device
        # is gone nothing is left in place, and listing it would stop the next node's stage.
        if (
            staged is None
            and volume_id in self.unclaimed
            and self.system.loop.find(loop_tag(self.node_id, volume_id)) is None
        ):
            self.unclaimed.drop(volume_id)
        entry = self.unclaimed.get(volume_id)
        if staged is not None:
            entry = self._entry(staged, self.store.node_publications(volume_id))
        try:
            self.layout.beat_volume(self.node_id, volume_id, entry)
        except OSError:
            log.exception("heartbeat entry of %s not written; rewriting them all", volume_id)
            self._beat_soon.set()

    def _add_health(self, entry: dict[str, Any], s: NodeStaging) -> None:
        count = self.system.fs.error_count(s.device) if s.access_type == AccessType.MOUNT else 0
        # The controller's VolumeCondition reads it (service/controller/volume_condition.py).
        if count:
            entry[conditions.IO_ERRORS_KEY] = count

    def report_io_errors(self) -> None:
        """Write errors appear between RPCs (a thin pool runs out under a running pod), so each
        fence pass reports a volume whose filesystem error count changed, for its condition."""
        for s in self.store.stagings():
            if s.access_type != AccessType.MOUNT:
                continue
            count = self.system.fs.error_count(s.device)
            if count == self._reported_errors.get(s.volume_id, 0):
                continue
            entry = self._entry(s, self.store.node_publications(s.volume_id))
            try:
                self.layout.beat_volume(self.node_id, s.volume_id, entry)
            except OSError as e:  # a full pool: the next pass tries again
                log.warning("%d I/O error(s) on %s not reported yet: %s", count, s.volume_id, e)
                continue
            log.warning("volume %s: its filesystem recorded %d error(s)", s.volume_id, count)
            self._reported_errors[s.volume_id] = count

    def beat(self) -> None:
        """The whole heartbeat, carrying what this node has staged and published (for
        operators, and for the node a volume moves to): at start, after a fence pass that
        changed something, and when asked. The timer only touches the node's record."""
        publications: dict[str, list[NodePublication]] = {}
        for p in self.store.node_publications():
            publications.setdefault(p.volume_id, []).append(p)
        volumes: dict[str, dict[str, Any]] = self.unclaimed.entries()
        for s in self.store.stagings():
            volumes[s.volume_id] = self._entry(s, publications.get(s.volume_id, []))
        self.layout.beat(self.node_id, volumes)

    def _entry(self, staged: NodeStaging, publications: list[NodePublication]) -> dict[str, Any]:
        entry = heartbeat_entry(staged, publications)
        paths = [staged.staging_path, *entry["targets"]]
        busy = {p: self.mounts.busy[p] for p in paths if p in self.mounts.busy}
        if busy:
            entry["busy"] = busy  # inspect names who holds them
        if staged.volume_id in self.devices.abnormal:  # its loop device vanished (node_devices)
            entry["abnormal"] = self.devices.abnormal[staged.volume_id]
        self._add_health(entry, staged)
        return entry

    def fence_revoked(self) -> list[str]:
        fenced = []
        for seen in self.store.stagings():
            if seen.generation == 0:
                continue
            if not ledger_rules.is_revoked(
                self.layout.read_lease(seen.volume_id), self.node_id, seen.generation
            ):
                continue
            try:
                with self.inflight.hold(seen.volume_id, "fence"):
                    # Decide again under the in-flight guard: a NodeStage may have re-staged the
                    # volume under a newer grant since the first read.
                    current = self.store.get_staging(seen.volume_id)
                    lease = self.layout.read_lease(seen.volume_id)
                    if current is None or not ledger_rules.is_revoked(
                        lease, self.node_id, current.generation
                    ):
                        continue
                    self._fence(current, lease)
                fenced.append(seen.volume_id)
            except Busy:
                log.warning(
                    "volume %s is revoked but busy; fencing it on the next pass", seen.volume_id
                )
        for volume_id in fenced:
            self.volume_changed(volume_id)  # the next holder waits for it to be unlisted
        return fenced

    def _fence(self, s: NodeStaging, lease: ledger_rules.Lease | None) -> None:
        held = lease.holders if lease else {}
        log.warning(
            "FENCING volume %s: this node (%s) staged it under generation %d, but the ledger "
            "now grants it to %s. Cutting off all I/O now.",
            s.volume_id,
            self.node_id,
            s.generation,
            held or "nobody",
        )
        targets = self.store.node_publications(s.volume_id)
        if s.access_type == AccessType.MOUNT and self.system.mounts.find(s.staging_path):
            try:
                self.system.fs.shutdown(s.staging_path)
            except Exception:
                log.exception("filesystem shutdown of %s failed; unmounting anyway", s.staging_path)
        device = self.system.loop.find(loop_tag(self.node_id, s.volume_id))
        # Each mount is taken down only where it is the volume's own; one that can't be (a path
        # that now leads through a link, a foreign mount stacked there) is logged, and the rest
        # of the fence goes on: the filesystem is shut down already.
        for p in targets:
            try:
                self.mounts.take_down_target(s.volume_id, p.target_path, recorded=True, lazy=True)
            except (PathDiverted, ForeignMount) as e:
                log.error("fence of %s: %s", s.volume_id, e)
            self.store.delete_node_publication(p.target_path)
        if s.access_type == AccessType.MOUNT:
            try:
                self.mounts.unmount_staging(s.volume_id, s.staging_path, device, lazy=True)
            except (PathDiverted, ForeignMount) as e:
                log.error("fence of %s: %s", s.volume_id, e)
        if device is not None:
            self.system.loop.detach(device)
        self.store.delete_staging(s.volume_id)
        # The report first, then this node's own row under the same event id: in --mode all the
        # two land in one database, and the import of the report then adds nothing.
        reason = f"ledger holders now {held or 'none'}"
        event_id = self.layout.record_event(
            "fenced", s.volume_id, self.node_id, s.generation, reason
        )
        self.store.record(
            "node:" + self.node_id,
            "fenced",
            s.volume_id,
            self.node_id,
            s.generation,
            reason,
            event_id,
        )
        if s.access_type == AccessType.BLOCK:
            log.warning(
                "fenced block volume %s: bind mounts removed and loop detached, but a process "
                "that already holds the device open keeps its I/O until it closes it (no "
                "device-mapper here to cut it off)",
                s.volume_id,
            )

    def start_background(self, after_fence_pass: Callable[[], None]) -> None:
        """Beat and fence from a thread of its own; after_fence_pass runs after each fence pass
        (the node's retries, I/O error reports and tuning)."""
        self._after_fence_pass = after_fence_pass
        self._thread = threading.Thread(target=self._loop, name="node-heartbeat", daemon=True)
        self._thread.start()
        self.devices.start()

    def stop_background(self) -> None:
        self.devices.stop()
        self._stop.set()
        self._beat_soon.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        tick = min(self.ctx.heartbeat_interval, self.ctx.fence_interval)
        next_beat = next_fence = time.monotonic()
        while not self._stop.is_set():
            self._beat_soon.wait(max(0.0, min(next_beat, next_fence) - time.monotonic()))
            if self._stop.is_set():
                return
            try:
                now = time.monotonic()
                if self._beat_soon.is_set():
                    self._beat_soon.clear()
                    self.beat()
                    next_beat = now + tick
                elif now >= next_beat:
                    self.layout.touch(self.node_id)
                    next_beat = now + tick
                if now >= next_fence:
                    next_fence = now + self.ctx.fence_interval
                    self.fence_revoked()
                    self._after_fence_pass()
                    if self.mounts.forget_released():  # its holders exited
                        self.beat()
            except Exception:
                log.exception("heartbeat/fence pass failed; trying again next interval")
                self._stop.wait(tick)
