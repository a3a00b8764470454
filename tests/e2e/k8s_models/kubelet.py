"""The kubelet's volume manager, modelled on kubernetes/kubernetes pkg/kubelet/volumemanager:
reconciler/reconciler_common.go (unmountVolumes, mountOrAttachVolumes with waitForVolumeAttach,
unmountDetachDevices), reconciler/reconstruct_new.go (reconstructVolumes after a restart: every
volume found on disk goes into the actual state as *uncertain*), and the CSI plugin's calls in
pkg/volume/csi (csi_attacher.go MountDevice → NodeStageVolume with the VolumeAttachment's
attachment metadata; csi_mounter.go SetUpAt → NodePublishVolume, saving vol_data.json beside the
mount; TearDownAt → NodeUnpublishVolume; UnmountDevice → NodeUnstageVolume). Every operation
retries under pkg/util/goroutinemap/exponentialbackoff."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from csi_hostpath.client import csi_requests as rq
from tests.e2e.harness import DRIVER_NAME, PV, Node
from tests.e2e.harness import Pod as PodPaths
from tests.e2e.k8s_models.clock import Backoff, SimClock, operation_backoff
from tests.e2e.k8s_models.objects import Api, attachment_name

RPC_TIMEOUT = 60.0  # a NodeStage may run mkfs
CSI_DIR = "volumes/kubernetes.io~csi"


@dataclass
class VolumeManager:
    api: Api
    clock: SimClock
    node: Node  # the node's plugin, mount namespace and kubelet paths
    devices: dict[str, bool] = field(default_factory=dict)  # PV -> uncertain (globally mounted)
    mounts: dict[tuple[str, str], bool] = field(default_factory=dict)  # (pod UID, PV) -> uncertain
    frozen: bool = False
    backoff: Backoff = field(default_factory=operation_backoff)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (method, PV)
    errors: dict[str, str] = field(default_factory=dict)  # operation -> last error
    failures: list[tuple[float, str, str]] = field(default_factory=list)  # (when, op, error)

    @property
    def name(self) -> str:
        return self.node.name

    def desired(self) -> set[tuple[str, str]]:
        """The desired state of the world (desired_state_of_world_populator.go): the volumes of
        this node's pods that are not being deleted."""
        return {
            (p.uid, p.pv)
            for p in self.api.pods.values()
            if p.node == self.name and not p.deletion_requested
        }

    def sync(self) -> None:
        if self.frozen:
            return
        node = self.api.nodes[self.name]
        node.last_status = self.clock.now  # the kubelet's node status update
        desired = self.desired()
        self.unmount_volumes(desired)
        self.mount_or_attach_volumes(desired)
        self.unmount_detach_devices(desired)
        # GetVolumesInUse: volumes wanted here, or still mounted in any way.
        node.volumes_in_use = {pv for _, pv in desired} | set(self.devices)
        mounted_pods = {uid for uid, _ in self.mounts}
        for pod in list(self.api.pods.values()):  # a deleted pod's object goes once torn down
            if pod.node == self.name and pod.deletion_requested and pod.uid not in mounted_pods:
                self.api.pods.pop(pod.uid, None)

    # ----- the reconciler's three passes -----
    def unmount_volumes(self, desired: set[tuple[str, str]]) -> None:
        for key in sorted(self.mounts):
            if key in desired:
                continue
            uid, pv_name = key
            pv = self.api.pvs[pv_name]
            target = self.node.kubelet.target_path(PodPaths(uid), pv)
            if self._call(f"unmount/{uid}/{pv_name}", "NodeUnpublishVolume", pv_name,
                          rq.node_unpublish(pv.handle, target)):  # fmt: skip
                # csi_mounter.go TearDownAt: removeMountDir takes vol_data.json with it.
                shutil.rmtree(target.parent, ignore_errors=True)
                del self.mounts[key]

    def mount_or_attach_volumes(self, desired: set[tuple[str, str]]) -> None:
        node = self.api.nodes[self.name]
        for key in sorted(desired):
            uid, pv_name = key
            if key in self.mounts and not self.mounts[key]:
                continue  # mounted, and certain of it
            if pv_name not in node.volumes_in_use:
                continue  # not reported in use yet: the attach-detach controller won't attach
            if pv_name not in node.volumes_attached:  # VerifyControllerAttachedVolume
                self.errors[f"attach/{pv_name}"] = "volume not attached according to node status"
                continue
            self.errors.pop(f"attach/{pv_name}", None)
            self._mount_volume(uid, self.api.pvs[pv_name])

    def _mount_volume(self, uid: str, pv: PV) -> None:
        """operation_generator.go GenerateMountVolumeFunc: MountDevice when the device is not
        (certainly) mounted, then SetUp."""
        kubelet = self.node.kubelet
        if self.devices.get(pv.name, True):
            va = self.api.vas.get(attachment_name(pv.handle, self.name))
            if va is None or not va.attached:
                self.errors[f"mountdevice/{pv.name}"] = "no attached VolumeAttachment"
                return
            staging = kubelet.staging_path(pv)
            staging.mkdir(parents=True, exist_ok=True)
            request = rq.node_stage(
                pv.handle, staging, pv.cap, va.attachment_metadata, pv.volume.volume_context
            )
            if not self._call(f"mountdevice/{pv.name}", "NodeStageVolume", pv.name, request):
                return
            self.devices[pv.name] = False
        target = kubelet.target_path(PodPaths(uid), pv)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._save_volume_data(target.parent, pv)
        va = self.api.vas.get(attachment_name(pv.handle, self.name))
        publish = rq.node_publish(
            pv.handle,
            kubelet.staging_path(pv),
            target,
            pv.cap,
            False,
            va.attachment_metadata if va else {},
            pv.volume.volume_context,
        )
        if self._call(f"mount/{uid}/{pv.name}", "NodePublishVolume", pv.name, publish):
            self.mounts[(uid, pv.name)] = False

    def unmount_detach_devices(self, desired: set[tuple[str, str]]) -> None:
        wanted = {pv for _, pv in desired}
        for pv_name in sorted(self.devices):
            if pv_name in wanted or any(pv == pv_name for _, pv in self.mounts):
                continue
            pv = self.api.pvs[pv_name]
            staging = self.node.kubelet.staging_path(pv)
            if self._call(f"unmountdevice/{pv_name}", "NodeUnstageVolume", pv_name,
                          rq.node_unstage(pv.handle, staging)):  # fmt: skip
                del self.devices[pv_name]
                for d in (staging, staging.parent):  # the kubelet removes what it made
                    try:
                        d.rmdir()
                    except OSError:
                        break

    # ----- a kubelet restart -----
    def restart(self) -> None:
        """The in-memory state is lost; reconstructVolumes rebuilds it from the pods' volume
        directories, every volume as uncertain, so that the reconciler either mounts it again
        (idempotent calls) or tears it down."""
        self.devices.clear()
        self.mounts.clear()
        self.backoff = operation_backoff()
        pods_dir = self.node.kubelet.root / "pods"
        for data in sorted(pods_dir.glob(f"*/{CSI_DIR}/*/vol_data.json")):
            info = json.loads(data.read_text())
            uid = data.parents[3].name
            self.mounts[(uid, info["specVolID"])] = True
            self.devices[info["specVolID"]] = True

    def _save_volume_data(self, volume_dir: Path, pv: PV) -> None:
        """csi_mounter.go saveVolumeData: what reconstruction reads back."""
        (volume_dir / "vol_data.json").write_text(
            json.dumps(
                {
                    "specVolID": pv.name,
                    "volumeHandle": pv.handle,
                    "driverName": DRIVER_NAME,
                    "nodeName": self.name,
                    "attachmentID": attachment_name(pv.handle, self.name),
                    "volumeLifecycleMode": "Persistent",
                }
            )
        )

    def _call(self, op: str, method: str, pv_name: str, request: object) -> bool:
        now = self.clock.now
        if not self.backoff.allowed(op, now):
            return False
        self.calls.append((method, pv_name))
        try:
            getattr(self.node.plugin.client.node, method)(request, timeout=RPC_TIMEOUT)
        except grpc.RpcError as e:
            self.errors[op] = f"{e.code().name}: {e.details()}"
            self.failures.append((now, op, self.errors[op]))
            self.backoff.failed(op, now)
            return False
        self.errors.pop(op, None)
        self.backoff.forget(op)
        return True
