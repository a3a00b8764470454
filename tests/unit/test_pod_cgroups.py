"""Where the node finds a pod's block-I/O cgroups, on a tree shaped like the kernel's.

Where the node finds a pod's block-I/O cgroups (LinuxIoTuner.pod_cgroups), on a directory tree
shaped like the kernel's, no root needed. The real cluster's kubelet runs with a cgroupRoot of its
own (/chp-cluster-NAME/NODE), which puts kubepods/burstable/pod<uid> five levels below the blkio
root: the search stopped at four, found nothing and put the VolumeAttributesClass limits on the
root cgroup, where they throttle no pod."""

from __future__ import annotations

from pathlib import Path

import pytest

from csi_hostpath.system.iolimits import V1_FILES, LinuxIoTuner

UID = "573074cf-50b1-4a35-90a2-b102acd9c0fd"


def _v1_root(tmp_path: Path) -> Path:
    blkio = tmp_path / "blkio"
    blkio.mkdir()
    (blkio / V1_FILES["read_bps"]).write_text("")
    return blkio


@pytest.mark.parametrize(
    "where",
    [
        "kubepods/burstable/pod{uid}",
        "kubepods/pod{uid}",
        # A kubelet with a cgroupRoot two levels deep.
        "chp-cluster-exp/exp-worker2/kubepods/burstable/pod{uid}",
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice",
        "machine/kind-worker/kubelet.slice/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice",
    ],
)
def test_the_pods_cgroup_is_found_below_any_cgroup_root(tmp_path: Path, where: str) -> None:
    root = _v1_root(tmp_path)
    pod = root / where.format(uid=UID, uid_=UID.replace("-", "_"))
    (pod / "cri-containerd-abc").mkdir(parents=True)
    assert LinuxIoTuner(cgroup_root=tmp_path).pod_cgroups(UID) == [pod]


def test_other_pods_cgroups_are_not_entered_nor_returned(tmp_path: Path) -> None:
    root = _v1_root(tmp_path)
    other = root / "kubepods" / "burstable" / "pod11111111-2222-3333-4444-555555555555"
    # A directory named like ours inside another pod is no pod of ours.
    (other / f"pod{UID}").mkdir(parents=True)
    assert LinuxIoTuner(cgroup_root=tmp_path).pod_cgroups(UID) == []
