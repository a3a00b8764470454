"""The attach-detach controller, modelled on kubernetes/kubernetes
pkg/controller/volume/attachdetach: the desired state of the world (cache/desired_state_of_world.go,
filled from pods by util.DetermineVolumeAction / ProcessPodVolumes), the actual state
(cache/actual_state_of_world.go), and reconciler/reconciler.go's reconcile(). The CSI plugin's side
(pkg/volume/csi/csi_attacher.go Attach / Detach) is what turns an attach into a VolumeAttachment
object for external-attacher, and a detach into that object's deletion."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tests.e2e.k8s_models.clock import Backoff, SimClock, operation_backoff
from tests.e2e.k8s_models.objects import (
    OUT_OF_SERVICE,
    Api,
    VolumeAttachment,
    attachment_name,
    multi_attach_allowed,
)

# cmd/kube-controller-manager: the reconciler's maxWaitForUnmountDuration, not configurable.
MAX_WAIT_FOR_UNMOUNT = 6 * 60.0
Key = tuple[str, str]  # (PV name, node name)


@dataclass
class Attached:
    """An entry of the actual state of the world."""

    detach_requested_at: float | None = None


@dataclass
class AttachDetachController:
    api: Api
    clock: SimClock
    enqueue: Callable[[str], None]  # external-attacher's VolumeAttachment informer
    actual: dict[Key, Attached] = field(default_factory=dict)
    detaching: set[Key] = field(default_factory=set)
    multi_attach_reported: set[Key] = field(default_factory=set)
    backoff: Backoff = field(default_factory=operation_backoff)
    log: list[str] = field(default_factory=list)

    def desired(self) -> set[Key]:
        """DetermineVolumeAction: a volume is wanted on a node while a pod that uses it exists
        there and has not terminated. A pod on a dead node can't terminate: it stays wanted
        until its object is deleted (force-deleted, or by the pod GC under the out-of-service
        taint)."""
        return {(p.pv, p.node) for p in self.api.pods.values()}

    def sync(self) -> None:
        self._finish_operations()
        self.reconcile()

    def _finish_operations(self) -> None:
        """csiAttacher.Attach waits for status.attached (waitForVolumeAttachment); Detach waits
        for the object to be gone (waitForVolumeDetachment)."""
        for key in list(self.detaching):
            pv, node = key
            if attachment_name(self.api.pvs[pv].handle, node) not in self.api.vas:
                self.detaching.discard(key)
                self.actual.pop(key, None)
                self.log.append(f"{self.clock.now:.0f}s detached {pv} from {node}")

    def reconcile(self) -> None:
        """reconciler.reconcile: detaches first, then attaches, then the nodes' status."""
        now = self.clock.now
        desired = self.desired()
        for key, entry in sorted(self.actual.items()):
            if key in desired or key in self.detaching:
                continue
            pv, node_name = key
            node = self.api.nodes[node_name]
            if entry.detach_requested_at is None:  # SetDetachRequestTime
                entry.detach_requested_at = now
            timeout = now - entry.detach_requested_at > MAX_WAIT_FOR_UNMOUNT
            # Force-detach only an unhealthy node after the timeout (nodeIsHealthy), or any
            # node under the out-of-service taint (hasOutOfServiceTaint).
            force = (not node.ready) and timeout
            tainted = OUT_OF_SERVICE in node.taints
            mounted = pv in node.volumes_in_use  # MountedByNode, from status.volumesInUse
            if mounted and not force and not tainted:
                continue
            why = (
                "out-of-service taint" if tainted else "maxWaitForUnmountDuration" if force else ""
            )
            self.log.append(
                f"{now:.0f}s detach {pv} from {node_name}"
                + (f" (still mounted: force, {why})" if mounted else "")
            )
            node.volumes_attached.discard(pv)  # RemoveVolumeFromReportAsAttached
            self._detach(key)
        self._attach_desired(desired)
        for node in self.api.nodes.values():  # UpdateNodeStatuses
            node.volumes_attached = {pv for (pv, n) in self.actual if n == node.name} - {
                pv for (pv, n) in self.detaching if n == node.name
            }

    def _attach_desired(self, desired: set[Key]) -> None:
        """reconciler.attachDesiredVolumes, with its multi-attach check."""
        now = self.clock.now
        for key in sorted(desired):
            pv_name, node_name = key
            if key in self.actual:
                self.actual[key].detach_requested_at = None  # ResetDetachRequestTime
                continue
            pv = self.api.pvs[pv_name]
            elsewhere = [n for (p, n) in self.actual if p == pv_name and n != node_name]
            if not multi_attach_allowed(pv) and elsewhere:
                if key not in self.multi_attach_reported:  # reportMultiAttachError, once
                    self.multi_attach_reported.add(key)
                    self.api.event(
                        now,
                        "FailedAttachVolume",
                        f"Multi-Attach error for volume {pv_name}: Volume is already "
                        f"exclusively attached to one node ({', '.join(elsewhere)}) and can't be "
                        f"attached to another ({node_name})",
                    )
                continue
            name = f"attach/{pv_name}/{node_name}"
            if not self.backoff.allowed(name, now):
                continue
            va = self.api.vas.get(attachment_name(pv.handle, node_name))
            if va is None:
                va = VolumeAttachment(attachment_name(pv.handle, node_name), pv_name, node_name)
                self.api.vas[va.name] = va
                self.enqueue(va.name)
            if va.attached:
                self.actual[key] = Attached()
                self.multi_attach_reported.discard(key)
                self.backoff.forget(name)
            elif va.attach_error:  # the operation fails; the next one after a backoff
                self.backoff.failed(name, now)

    def _detach(self, key: Key) -> None:
        pv, node = key
        va = self.api.vas.get(attachment_name(self.api.pvs[pv].handle, node))
        if va is not None:
            va.deletion_requested = True  # csiAttacher.Detach deletes the VolumeAttachment
            self.enqueue(va.name)
        self.detaching.add(key)
