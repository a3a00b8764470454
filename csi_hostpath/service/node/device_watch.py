"""A loop device detached behind the driver's back shows as abnormal at once: the node hears the
kernel's uevent (Loop.watch), finds which staged volume used the device, and marks it abnormal,
in the log, the heartbeat (so `inspect`'s health row) and NodeGetVolumeStats, which also checks
on demand. Before, only NodeGetVolumeStats noticed, when the CO asked.

The driver's own detaches send the same uevent: each check runs under the volume's in-flight
guard, so an unstage in progress is left alone, and one that has finished has removed the staging
record the check looks for."""

from __future__ import annotations

import time
from collections.abc import Callable

from csi_hostpath.core.errors import Busy
from csi_hostpath.core.naming import loop_tag
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.node_context import NodeContext


class DeviceWatch:
    def __init__(self, ctx: NodeContext, changed: Callable[[str], None]) -> None:
        self.node_id = ctx.node_id
        self.store = ctx.store
        self.system = ctx.system
        self.inflight = ctx.inflight
        self.changed = changed  # writes the volume's heartbeat entry
        # Volume ID -> why it is abnormal; the heartbeat carries it.
        self.abnormal: dict[str, str] = {}
        self._stop: Callable[[], None] | None = None

    def start(self) -> None:
        self._stop = self.system.loop.watch(self.device_changed)

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def device_changed(self, device: str) -> None:
        # A uevent comes for every attach and detach on the host, other plugins' and this
        # node's own NodeStage and NodeUnstage included: only the volumes staged on that device
        # (and those already abnormal) are looked at, never every staging: the cost of a uevent
        # does not grow with what the node holds.
        candidates = dict.fromkeys(s.volume_id for s in self.store.stagings_on_device(device))
        for volume_id in [*candidates, *self.abnormal]:
            self.check(volume_id)

    def _fine(self, volume_id: str) -> bool:
        """Nothing to report: not staged, or its device is there. Asked without the in-flight
        guard."""
        if volume_id in self.abnormal:
            return False
        staged = self.store.get_staging(volume_id)
        return (
            staged is None or self.system.loop.find(loop_tag(self.node_id, volume_id)) is not None
        )

    def check(self, volume_id: str) -> None:
        # The common answer, "its device is there", is found without taking the in-flight guard:
        # a CO call arriving while a check held it would be refused ABORTED for nothing.
        if self._fine(volume_id):
            return
        try:
            with self.inflight.hold(volume_id, "device check"):
                staged = self.store.get_staging(volume_id)
                gone = staged is not None and (
                    self.system.loop.find(loop_tag(self.node_id, volume_id)) is None
                )
                if not gone:
                    if self.abnormal.pop(volume_id, None) is not None:
                        self.changed(volume_id)
                    return
                assert staged is not None
                why = (
                    f"its loop device {staged.device} was detached behind the driver's back at "
                    f"{time.strftime('%H:%M:%S')}: I/O to it fails"
                )
                if self.abnormal.get(volume_id) is None:
                    log.error("volume %s is ABNORMAL: %s", volume_id, why)
                    self.abnormal[volume_id] = why
                    self.changed(volume_id)
        except Busy:
            return  # an operation of the driver's own is changing it; it knows
