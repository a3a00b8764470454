"""Where the node puts a volume's mutable parameters (service/node/tuning.py), on the fake tuner."""

from __future__ import annotations

from pathlib import Path

from csi_hostpath.core.mutable import Tuning
from csi_hostpath.service.node.tuning import NodeTuning
from csi_hostpath.store.mutable_records import MutableRecords
from csi_hostpath.system.iolimits import FakeIoTuner

VOL = "vol-" + "a" * 32
DEV = "/dev/loop7"


def make(tmp_path: Path) -> tuple[NodeTuning, MutableRecords, FakeIoTuner]:
    records, tuner = MutableRecords(tmp_path / "pool"), FakeIoTuner()
    return NodeTuning(records, tuner, tmp_path / "state"), records, tuner


def test_without_a_pod_the_limit_goes_to_the_whole_device(tmp_path: Path) -> None:
    tuning, records, tuner = make(tmp_path)
    records.write(VOL, Tuning(read_bps=100, read_ahead_kib=512))
    tuning.apply(VOL, DEV)
    assert tuner.limits[(DEV, tuner.device_cgroup())]["read_bps"] == 100
    assert tuner.read_ahead == {DEV: 512}


def test_a_publishing_pods_cgroup_gets_the_limit_and_loses_it_on_unpublish(
    tmp_path: Path,
) -> None:
    tuning, records, tuner = make(tmp_path)
    pod = Path("/fake/kubepods/podU")
    tuner.pods["U"] = [pod]
    records.write(VOL, Tuning(write_iops=9))
    tuning.published(VOL, DEV, "/t1", "U")
    assert tuner.limits[(DEV, pod)]["write_iops"] == 9
    assert (DEV, tuner.device_cgroup()) not in tuner.limits
    tuning.unpublished(VOL, DEV, "/t1")
    assert tuner.limits[(DEV, pod)] == {}


def test_no_record_touches_no_cgroup(tmp_path: Path) -> None:
    tuning, _, tuner = make(tmp_path)
    tuning.apply(VOL, DEV)
    tuning.cleared(VOL, DEV)
    assert tuner.limits == {} and tuner.read_ahead == {} and tuner.direct_io == {}


def test_refresh_reapplies_only_a_changed_record(tmp_path: Path) -> None:
    tuning, records, tuner = make(tmp_path)
    records.write(VOL, Tuning(direct_io=True))
    tuning.refresh({VOL: DEV})
    tuner.direct_io.clear()
    tuning.refresh({VOL: DEV})
    assert tuner.direct_io == {}, "an unchanged record is not reapplied"
    records.write(VOL, Tuning(direct_io=False))
    tuning.refresh({VOL: DEV})
    assert tuner.direct_io == {DEV: False}


def test_unstage_clears_the_rule_before_the_loop_number_is_reused(tmp_path: Path) -> None:
    tuning, records, tuner = make(tmp_path)
    records.write(VOL, Tuning(read_bps=5))
    tuning.apply(VOL, DEV)
    tuning.cleared(VOL, DEV)
    assert tuner.limits[(DEV, tuner.device_cgroup())] == {}
