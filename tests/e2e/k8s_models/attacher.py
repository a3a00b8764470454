"""external-attacher, modelled on kubernetes-csi/external-attacher pkg/controller/csi_handler.go
(and the workqueue in pkg/controller/controller.go that feeds it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from tests.e2e.k8s_models.clock import Backoff, SimClock, workqueue_backoff
from tests.e2e.k8s_models.objects import Api, VolumeAttachment
from tests.e2e.node_runtime import Plugin

# cmd/csi-attacher/main.go: --reconcile-sync (1 minute) and --timeout (15 s) for each call.
RECONCILE_SYNC = 60.0
RPC_TIMEOUT = 15.0


@dataclass
class ExternalAttacher:
    api: Api
    clock: SimClock
    controller: Plugin
    queue: set[str] = field(default_factory=set)
    force_sync: set[str] = field(default_factory=set)
    backoff: Backoff = field(default_factory=workqueue_backoff)
    last_reconcile: float = 0.0
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (method, volume, node)

    def enqueue(self, va_name: str) -> None:
        """The VolumeAttachment informer: every add or update queues the object."""
        self.queue.add(va_name)

    def sync(self) -> None:
        now = self.clock.now
        if now - self.last_reconcile >= RECONCILE_SYNC:
            self.last_reconcile = now
            self.reconcile_va()
        for name in sorted(self.queue):
            if not self.backoff.allowed(name, now):
                continue
            self.queue.discard(name)
            va = self.api.vas.get(name)
            if va is None:
                continue
            ok = self._sync_va(va)
            if ok:
                self.backoff.forget(name)
            else:  # AddRateLimited: the same object again after the backoff
                self.backoff.failed(name, now)
                self.queue.add(name)

    def reconcile_va(self) -> None:
        """csiHandler.ReconcileVA: ListVolumes, and every VolumeAttachment whose Attached
        status differs from what the driver reports is queued with forceSync."""
        published: dict[str, list[str]] = {}
        token = ""
        while True:
            page = self.controller.client.controller.ListVolumes(
                pb.ListVolumesRequest(max_entries=100, starting_token=token), timeout=RPC_TIMEOUT
            )
            for e in page.entries:
                published[e.volume.volume_id] = list(e.status.published_node_ids)
            token = page.next_token
            if not token:
                break
        for va in self.api.vas.values():
            node_id = self.api.nodes[va.node].node_id
            found = node_id in published.get(self.api.pvs[va.pv].handle, [])
            if va.attached != found:
                self.force_sync.add(va.name)
                self.queue.add(va.name)

    def _consume_force_sync(self, name: str) -> bool:
        """csiHandler.consumeForceSync: a forced sync is used once."""
        forced = name in self.force_sync
        self.force_sync.discard(name)
        return forced

    def _sync_va(self, va: VolumeAttachment) -> bool:
        """csiHandler.SyncNewOrUpdatedVolumeAttachment: syncAttach, or syncDetach once the
        object is being deleted. False means requeue with backoff."""
        if not va.deletion_requested:
            return self._sync_attach(va)
        return self._sync_detach(va)

    def _sync_attach(self, va: VolumeAttachment) -> bool:
        if not self._consume_force_sync(va.name) and va.attached:
            return True  # already attached, and no forceSync: nothing to do
        pv = self.api.pvs[va.pv]
        node_id = self.api.nodes[va.node].node_id
        va.finalizer = True  # prepareVAFinalizer, before the call
        self.calls.append(("ControllerPublishVolume", pv.handle, va.node))
        try:
            response = self.controller.client.controller.ControllerPublishVolume(
                rq.controller_publish(pv.handle, node_id, pv.cap, False, pv.volume.volume_context),
                timeout=RPC_TIMEOUT,
            )
        except grpc.RpcError as e:
            # saveAttachError: the error is recorded; status.attached is left as it was.
            va.attach_error = f"{e.code().name}: {e.details()}"
            return False
        va.attached = True  # markAsAttached
        va.attachment_metadata = dict(response.publish_context)
        va.attach_error = ""
        return True

    def _sync_detach(self, va: VolumeAttachment) -> bool:
        if not self._consume_force_sync(va.name) and not va.finalizer:
            self.api.vas.pop(va.name, None)
            return True
        pv = self.api.pvs[va.pv]
        node_id = self.api.nodes[va.node].node_id
        self.calls.append(("ControllerUnpublishVolume", pv.handle, va.node))
        try:
            self.controller.client.controller.ControllerUnpublishVolume(
                rq.controller_unpublish(pv.handle, node_id), timeout=RPC_TIMEOUT
            )
        except grpc.RpcError as e:
            va.detach_error = f"{e.code().name}: {e.details()}"  # saveDetachError
            return False
        # markAsDetached: attached false and the finalizer removed; the object then goes.
        va.attached = False
        va.finalizer = False
        self.api.vas.pop(va.name, None)
        return True
