"""doctor: mounts a node's plugin found without a record and left in place, as inspect says.

A node killed inside NodeStage (after the mount, before the record) restarts to find a device
of its own still mounted; it leaves it (service/node/adopt.py) and lists it as unclaimed in its
heartbeat. `inspect` calls that volume stuck, and another node's NodeStage of it is refused
until it is gone, so doctor fails on it too, with the same next step."""

from __future__ import annotations

from pathlib import Path

from csi_hostpath.doctor.finding import Finding
from csi_hostpath.service.inspect import unclaimed_phase
from csi_hostpath.store.pool_layout import PoolLayout


def check_unclaimed(pool_dir: Path) -> list[Finding]:
    layout = PoolLayout(pool_dir)
    if not layout.nodes.is_dir():
        return []  # no node has reported yet; the pool check says whether that is expected
    found = []
    for beat in sorted(layout.heartbeats(), key=lambda b: b.node_id):
        for volume_id, entry in sorted(beat.volumes.items()):
            if entry.get("unclaimed"):
                phase = unclaimed_phase(beat.node_id, entry)
                found.append(
                    Finding(
                        "unclaimed-mount",
                        "fail",
                        f"{volume_id} is stuck: {phase.detail}; {phase.reason}",
                        f"{phase.next_action}; `csi-hostpath inspect {volume_id}` shows it",
                    )
                )
    return found or [
        Finding("unclaimed-mount", "ok", "no node reports a mount it holds without a record")
    ]
