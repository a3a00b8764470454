"""The node's half of ModifyVolume: apply a volume's mutable parameters to its loop device.

Applied when the volume is staged, when a pod publishes it (its cgroup gets the limits), and on
every fence pass when the controller's record changed, so a change to a published volume lands
within one fence interval. Limits go to the cgroups of the pods that publish the volume
(podInfoOnMount gives their UIDs); where none is known or found, to the whole device (the root
of the block-I/O hierarchy). The pods a volume serves are kept in STATE/tuning/<vol>.json, so a
restart still knows where the limits belong."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from csi_hostpath.core.mutable import LIMIT_FIELDS, Tuning
from csi_hostpath.core.naming import is_volume_id
from csi_hostpath.service.node._log import log
from csi_hostpath.store.mutable_records import MutableRecords
from csi_hostpath.store.pool_layout import write_atomically
from csi_hostpath.system.iolimits import IoTuner


class NodeTuning:
    def __init__(self, records: MutableRecords, tuner: IoTuner, state_dir: Path) -> None:
        self.records = records
        self.tuner = tuner
        self.dir = state_dir / "tuning"
        self._applied: dict[str, bytes] = {}  # volume → the record version last applied
        self._lock = threading.Lock()

    # ----- the pods that publish each volume -----
    def _pods_file(self, volume_id: str) -> Path:
        if not is_volume_id(volume_id):
            raise ValueError(f"not a volume ID: {volume_id!r}")
        return self.dir / f"{volume_id}.json"

    def pods(self, volume_id: str) -> dict[str, str]:
        """target path → pod UID, for the volume's publications that named a pod."""
        try:
            data = json.loads(self._pods_file(volume_id).read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _save_pods(self, volume_id: str, pods: dict[str, str]) -> None:
        if not pods:
            self._pods_file(volume_id).unlink(missing_ok=True)
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomically(self._pods_file(volume_id), json.dumps(pods, sort_keys=True).encode())

    # ----- applying -----
    def _limited(self, volume_id: str) -> bool:
        tuning = self.records.read(volume_id)
        return any(getattr(tuning, name) is not None for name in LIMIT_FIELDS)

    def _cgroups(self, volume_id: str) -> list[Path]:
        found: list[Path] = []
        for uid in sorted(set(self.pods(volume_id).values())):
            found += self.tuner.pod_cgroups(uid)
        return found or [self.tuner.device_cgroup()]

    def apply(self, volume_id: str, device: str) -> None:
        """Apply the volume's record to its device. A tuning failure is logged, never fatal: the
        volume stays usable, and the next fence pass tries again."""
        with self._lock:
            version = self.records.version(volume_id)
            tuning = self.records.read(volume_id)
            try:
                self._apply(volume_id, device, tuning)
            except OSError as exc:
                log.error(
                    "volume %s: could not apply %s to %s: %s; retrying on the next fence pass",
                    volume_id,
                    tuning.as_parameters(),
                    device,
                    exc,
                )
                return
            self._applied[volume_id] = version

    def _apply(self, volume_id: str, device: str, tuning: Tuning) -> None:
        if tuning.read_ahead_kib is not None:
            self.tuner.set_read_ahead(device, tuning.read_ahead_kib)
        if tuning.direct_io is not None:
            self.tuner.set_direct_io(device, tuning.direct_io)
        # Every limit is written once any is set (0 = unlimited), so lifting one takes effect.
        if self._limited(volume_id):
            self.tuner.set_limits(device, self._cgroups(volume_id), tuning.limits())
        if tuning != Tuning():
            log.info("volume %s on %s tuned: %s", volume_id, device, tuning.as_parameters())

    def published(self, volume_id: str, device: str, target: str, pod_uid: str) -> None:
        if not pod_uid:
            return
        pods = self.pods(volume_id)
        if pods.get(target) != pod_uid:
            pods[target] = pod_uid
            self._save_pods(volume_id, pods)
        self.apply(volume_id, device)

    def unpublished(self, volume_id: str, device: str | None, target: str) -> None:
        pods = self.pods(volume_id)
        if target not in pods:
            return
        uid = pods.pop(target)
        if device and uid not in pods.values() and self._limited(volume_id):
            # The pod's cgroup keeps its rule otherwise; it may live on with other volumes.
            try:
                self.tuner.set_limits(device, self.tuner.pod_cgroups(uid), {})
            except OSError as exc:
                log.warning("volume %s: pod %s's I/O limits stay: %s", volume_id, uid, exc)
        self._save_pods(volume_id, pods)
        if device:
            self.apply(volume_id, device)

    def cleared(self, volume_id: str, device: str | None) -> None:
        """Before the device is detached: the loop number will serve another volume next."""
        with self._lock:
            self._applied.pop(volume_id, None)
        if device and self._limited(volume_id):
            try:
                self.tuner.set_limits(device, self._cgroups(volume_id), {})
            except OSError as exc:
                log.warning(
                    "volume %s: could not clear I/O limits on %s: %s", volume_id, device, exc
                )
        if is_volume_id(volume_id):
            self._pods_file(volume_id).unlink(missing_ok=True)

    def refresh(self, staged: dict[str, str]) -> None:
        """The fence pass: reapply where the controller's record changed (volume → device)."""
        for volume_id, device in staged.items():
            if self.records.version(volume_id) == self._applied.get(volume_id, -1):
                continue
            try:
                self.apply(volume_id, device)
            except OSError as exc:
                log.warning(
                    "volume %s: could not apply its tuning to %s: %s", volume_id, device, exc
                )
