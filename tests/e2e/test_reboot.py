"""A node reboot: every mount and loop device gone, and every volume brought back healthy.

A node reboot: every mount and loop device on the node vanishes behind the driver's back and
the node plugin starts again. The kubelet's retries (and the plugin's own reconcile) bring every
volume back, and NodeGetVolumeStats reports each one healthy."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from csi_hostpath._pb import csi_pb2 as pb
from tests.e2e.harness import PV, Cluster, Kubelet, Pod
from tests.support import helpers as h
from tests.support.kernel import loops_backed_under
from tests.support.needs import needs_fs
from tests.support.processes import wait_for

Mode = pb.VolumeCapability.AccessMode
MiB = h.MiB


def _healthy(kubelet: Kubelet, pv: PV, path: Path) -> None:
    stats = kubelet.stats(pv, path)
    assert not stats.volume_condition.abnormal, stats.volume_condition.message
    total = stats.usage[0].total
    assert total > 0 and stats.usage[0].unit == pb.VolumeUsage.BYTES, stats


@needs_fs("xfs")
def test_reboot_then_kubelet_retries_bring_every_volume_back(
    make_cluster: Callable[..., Cluster], workdir: Path
) -> None:
    cluster = make_cluster(nodes=("node-a",))
    node = cluster.nodes["node-a"]
    kubelet = node.kubelet
    provision = cluster.provisioner.provision
    volumes = [
        provision("pvc-ext4", h.mount_cap("ext4", Mode.SINGLE_NODE_MULTI_WRITER), 32 * MiB),
        provision("pvc-xfs", h.mount_cap("xfs"), 300 * MiB),
        provision("pvc-block", h.block_cap(), 16 * MiB),
    ]
    ext4, _xfs, block = volumes
    # pvc-ext4 is used by two pods, the others by one each.
    pods: list[tuple[Pod, PV]] = [
        (Pod("web-1"), ext4),
        (Pod("web-2"), ext4),
        (Pod("db"), volumes[1]),
        (Pod("raw"), block),
    ]
    contexts = {pv.handle: cluster.attacher.attach(pv, "node-a") for pv in volumes}
    written: dict[tuple[str, str], bytes] = {}
    for pv in volumes:
        kubelet.mount_device(pv, contexts[pv.handle])
    for pod, pv in pods:
        kubelet.setup(pod, pv, contexts[pv.handle])
        data = os.urandom(256 * 1024)
        name = "" if pv is block else f"{pod.uid}.bin"
        kubelet.write(pod, pv, name, data)
        written[(pod.uid, pv.handle)] = data
    for pod, pv in pods:
        _healthy(kubelet, pv, kubelet.target_path(pod, pv))

    # The condition is a real check: a target unmounted behind the driver's back is abnormal.
    lost_pod, lost_pv = pods[0]
    node.ns.run("umount", str(kubelet.target_path(lost_pod, lost_pv)))
    stats = kubelet.stats(lost_pv, kubelet.target_path(lost_pod, lost_pv))
    assert stats.volume_condition.abnormal, stats

    # The reboot: the node (plugin included) goes down, and the kernel forgets every mount and
    # loop device of it.
    node.plugin.kill(signal.SIGKILL)
    for point in sorted(kubelet.stale_mounts(), key=len, reverse=True):
        node.ns.run("umount", point)
    for device in loops_backed_under(workdir):
        # check=False: a device can go between the listing and this call (ENXIO), which is the
        # outcome we want anyway; the assertion below is what counts.
        subprocess.run(["losetup", "-d", device], capture_output=True, check=False)
    assert not kubelet.stale_mounts()
    wait_for(lambda: not loops_backed_under(workdir), 10, "every loop device to be detached")

    # The node is back: its plugin starts, and the kubelet runs MountDevice and SetUp again for
    # every pod it has, retrying while the plugin is busy or not yet serving.
    node.plugin.ensure_running()
    for pv in volumes:
        kubelet.mount_device(pv, contexts[pv.handle])
    for pod, pv in pods:
        kubelet.setup(pod, pv, contexts[pv.handle])
    log = node.plugin.log()
    assert "repair: re-attached" in log and "repair: re-mounted" in log

    assert len(loops_backed_under(workdir)) == len(volumes)
    assert len(kubelet.stale_mounts()) == len(volumes) - 1 + len(pods), kubelet.stale_mounts()
    for pod, pv in pods:
        data = written[(pod.uid, pv.handle)]
        name = "" if pv is block else f"{pod.uid}.bin"
        assert kubelet.read(pod, pv, name, size=len(data)) == data, f"{pod.uid} lost its data"
        _healthy(kubelet, pv, kubelet.target_path(pod, pv))
    for pv in volumes:
        if pv is not block:
            _healthy(kubelet, pv, kubelet.staging_path(pv))

    for pod, pv in reversed(pods):
        kubelet.teardown(pod, pv)
    for pv in volumes:
        kubelet.unmount_device(pv)
        cluster.attacher.detach(pv, "node-a")
        cluster.provisioner.delete(pv)
    assert not kubelet.stale_mounts()
    assert not loops_backed_under(workdir)
