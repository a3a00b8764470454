"""The fault harness's checks on crafted samples, offline.

The fault harness's checks on crafted samples, offline: a volume read-write on two nodes is a
violation and on one is not, whichever loop device each node uses; the ledger's holds, its
agreement with the VolumeAttachments; a loop device, mount or pool file that nothing owns is a
leak; the sampler records each violation once; the partition cases' helpers; the manifests the
chaos run's lives apply are valid Kubernetes."""

from __future__ import annotations

from typing import Any

import pytest

from csi_hostpath.cli.operator import print_table
from csi_hostpath.core.naming import loop_tag
from csi_hostpath.system.base import MountEntry
from tests.chart.chart_tool import validate
from tests.k8s.faults import invariants as inv
from tests.k8s.faults.lifecycle import DEVICE, block_pod
from tests.k8s.faults.observe import host_loops
from tests.k8s.faults.partition import addresses, digest, reconnect_argv, started_after
from tests.k8s.faults.sampler import Sampler, nodes_using

V1 = "vol-" + "1" * 32
V2 = "vol-" + "2" * 32
LOOPS = inv.loop_volumes(
    [
        inv.HostLoop("loop3", "7:3", f"/var/lib/csi-hostpath/pool/volumes/{V1}.img"),
        # Another node's device on the same file, as the kernel names it after a restart.
        inv.HostLoop("loop4", "7:4", f"/volumes/{V1}.img (deleted)"),
        inv.HostLoop("loop5", "7:5", f"/volumes/{V2}.img"),
        inv.HostLoop("loop6", "7:6", "/some/other/program.img"),
        inv.HostLoop("loop7", "7:7", ""),
    ]
)
STAGING = "/var/lib/kubelet/plugins/kubernetes.io/csi/loop.hostpath.csi.dev/{}/globalmount"


def mount(point: str, dev: str, rw: bool = True, root: str = "/", fs: str = "ext4") -> MountEntry:
    opts = ("rw" if rw else "ro", "relatime")
    return MountEntry(point, f"/dev/{dev}", fs, dev, root, opts)


def test_the_volume_of_a_loop_device_is_its_backing_files_name() -> None:
    assert LOOPS == {"7:3": V1, "loop3": V1, "7:4": V1, "loop4": V1, "7:5": V2, "loop5": V2}
    assert inv.volume_of_backing(f"/x/{V1}.img") == V1
    assert inv.volume_of_backing("/x/vol-nothex.img") is None


def test_two_read_write_stagings_on_two_nodes_are_a_violation() -> None:
    staged = STAGING.format("s")
    use = inv.node_use({"a": [mount(staged, "7:3")], "b": [mount(staged, "7:4")]}, LOOPS)
    found = inv.double_writers(use, at=5.0)
    assert [(v.kind, v.at) for v in found] == [(inv.DOUBLE_WRITER, 5.0)]
    assert V1 in found[0].detail and "a, b" in found[0].detail


def test_one_writer_is_fine_however_many_mounts_and_readers() -> None:
    use = inv.node_use(
        {
            "a": [mount(STAGING.format("s"), "7:3"), mount("/var/lib/kubelet/pods/u/mount", "7:3")],
            "b": [mount(STAGING.format("s"), "7:4", rw=False)],
            "c": [mount("/", "0:30", fs="overlay"), mount("/x", "7:6")],
        },
        LOOPS,
    )
    assert use == {V1: {"a": True, "b": False}}
    assert inv.double_writers(use) == []
    assert inv.in_use(use) == {V1: {"a", "b"}}


def test_a_block_volumes_device_bound_on_two_nodes_counts_too() -> None:
    bind = "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-1/uid"
    dev = mount(bind, "0:5", root="/loop5", fs="devtmpfs")
    use = inv.node_use({"a": [dev], "b": [dev]}, LOOPS)
    assert [v.kind for v in inv.double_writers(use)] == [inv.DOUBLE_WRITER]
    assert inv.double_writers(use, exempt=[V2]) == []


def ledger_table(rows: list[list[str]], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    # The header `csi-hostpath ledger list` prints (cli/operator.py).
    headers = ["volume", "node", "mode", "readonly", "generation", "since", "heartbeat age", "name"]
    print_table(headers, rows)
    return capsys.readouterr().out


def test_the_ledgers_holds_and_two_writers_granted(capsys: pytest.CaptureFixture[str]) -> None:
    when = "2026-12-06 10:00:00"
    text = ledger_table([
        [V1, "a", "SINGLE_NODE_WRITER", "no", "3", when, "2s", "pvc-1"],
        [V1, "b", "SINGLE_NODE_WRITER", "no", "4", when, "never seen", "pvc-1"],
        [V2, "a", "MULTI_NODE_READER_ONLY", "yes", "1", when, "1s", "pvc-2"],
        [V2, "b", "MULTI_NODE_READER_ONLY", "yes", "2", when, "1s", "pvc-2"],
    ], capsys)  # fmt: skip
    holds = inv.parse_ledger_list(text)
    assert holds[1] == inv.Hold(V1, "b", "SINGLE_NODE_WRITER", False, 4)
    assert len(holds) == 4 and holds[2].readonly
    found = inv.double_holds(holds)
    assert [v.kind for v in found] == [inv.DOUBLE_HOLD] and V1 in found[0].detail
    assert inv.double_holds(holds[:1] + holds[2:]) == []
    multi = inv.Hold(V2, "c", "MULTI_NODE_MULTI_WRITER", False, 3)
    assert inv.double_holds([multi, inv.Hold(V2, "d", "MULTI_NODE_MULTI_WRITER", False, 4)]) == []
    assert inv.parse_ledger_list(ledger_table([], capsys)) == []


def va(pv: str, node: str, attached: bool = True, attacher: str = "d") -> dict[str, Any]:
    return {
        "spec": {"attacher": attacher, "nodeName": node, "source": {"persistentVolumeName": pv}},
        "status": {"attached": attached},
    }


def test_the_ledger_agrees_with_the_attachments_or_says_how_not() -> None:
    pvs = [
        {"metadata": {"name": "pvc-1"}, "spec": {"csi": {"driver": "d", "volumeHandle": V1}}},
        {"metadata": {"name": "pvc-2"}, "spec": {"csi": {"driver": "d", "volumeHandle": V2}}},
        {"metadata": {"name": "other"}, "spec": {"csi": {"driver": "x", "volumeHandle": "h"}}},
    ]
    handles = inv.pv_handles(pvs, "d")
    assert handles == {"pvc-1": V1, "pvc-2": V2}
    vas = [va("pvc-1", "a"), va("pvc-2", "b", attached=False), va("other", "a", attacher="x")]
    att = inv.attached(vas, handles, "d")
    assert att == {(V1, "a")}
    assert inv.ledger_disagreements([inv.Hold(V1, "a", "SINGLE_NODE_WRITER", False, 1)], att) == []
    found = inv.ledger_disagreements([inv.Hold(V2, "b", "SINGLE_NODE_WRITER", False, 1)], att)
    assert [v.detail for v in found] == [
        f"the ledger holds {V2} on b; no VolumeAttachment is attached",
        f"{V1} is attached to a; the ledger holds nothing of it there",
    ]


def test_a_loop_device_without_its_mount_is_a_leak_and_other_peoples_are_not() -> None:
    tagged = [
        ("/dev/loop3", loop_tag("a", V1)),
        ("/dev/loop4", loop_tag("b", V1)),
        ("/dev/loop5", loop_tag("elsewhere", V2)),
        ("/dev/loop6", "some-other-program"),
    ]
    found = inv.leaked_loops(tagged, ["a", "b"], {V1: {"a"}})
    assert [v.detail for v in found] == [f"/dev/loop4 of {V1} tagged for b, not mounted there"]
    assert inv.leaked_loops(tagged, ["a", "b"], {V1: {"a", "b"}}) == []
    # At rest with no PV at all, every device of our nodes is left over.
    assert len(inv.leaked_loops(tagged, ["a", "b"], {})) == 2


def test_a_mount_of_a_gone_volume_is_a_leak() -> None:
    sha = inv.handle_sha(V1)
    targets = {
        "a": [STAGING.format(sha), "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-1/mount"],
        "b": [STAGING.format(inv.handle_sha(V2)),
              "/var/lib/kubelet/plugins/kubernetes.io/csi/pv/pvc-2/globalmount"],
    }  # fmt: skip
    found = inv.leaked_mounts(targets, ["pvc-1"], [V1])
    assert [v.detail.split()[1] for v in found] == targets["b"]
    assert inv.leaked_mounts(targets, ["pvc-1", "pvc-2"], [V1, V2]) == []
    entries = [mount(targets["a"][0], "7:3"), mount("/proc", "0:21", fs="proc")]
    assert inv.csi_targets(entries) == [targets["a"][0]]


def test_a_pool_file_without_an_owner_is_a_leak_unless_it_was_there_before() -> None:
    found = inv.orphan_files({V1, V2}, {V1}, set())
    assert [v.detail for v in found] == [f"pool volume file {V2} has no owner"]
    assert inv.orphan_files({V1, V2}, {V1}, {V2}) == []


def test_the_data_are_kept_only_when_both_checksums_are_there_and_equal() -> None:
    assert inv.data_kept("x", "abc", "abc") == []
    assert [v.kind for v in inv.data_kept("x", "abc", "abd")] == [inv.DATA]
    assert inv.data_kept("x", "", "")[0].detail == "x: checksum (none) after, (none) before"


class FakeObserver:
    def __init__(self, mounts: dict[str, list[MountEntry]], ledger_fails: bool) -> None:
        self.node_names = ["a", "b"]
        self.m, self.ledger_fails = mounts, ledger_fails

    def all_mounts(self, strict: bool = True) -> dict[str, list[MountEntry]]:
        return self.m

    def use(self, mounts: dict[str, list[MountEntry]]) -> dict[str, dict[str, bool]]:
        return inv.node_use(mounts, LOOPS)

    def holds(self) -> list[inv.Hold]:
        if self.ledger_fails:
            raise OSError("the controller pod is away")
        return [inv.Hold(V1, "a", "SINGLE_NODE_WRITER", False, 1)]


def test_the_sampler_records_each_violation_once_and_counts_what_it_could_not_read() -> None:
    both = {"a": [mount("/s", "7:3")], "b": [mount("/s", "7:4")]}
    s = Sampler(FakeObserver(both, ledger_fails=True), 0.01)  # type: ignore[arg-type]
    for _ in range(3):
        s.round()
    r = s.report
    assert r.rounds == 3 and r.ledger_unread == 3 and r.mounts_unread == 0
    assert len(r.violations) == 1 and list(r.repeats.values()) == [3]
    assert "the controller pod is away" in r.last_error
    assert nodes_using(r.history, V1, 0, 1e12) == {"a", "b"}
    assert nodes_using(r.history, V1, 0, 1) == set()
    away = Sampler(FakeObserver({"a": [mount("/s", "7:3")]}, False), 0.01)  # type: ignore[arg-type]
    with away:
        pass
    assert away.report.rounds >= 1 and away.report.violations == []
    assert away.report.mounts_unread == away.report.rounds  # b could not be read


def test_host_loops_are_read_from_sysfs(tmp_path: Any) -> None:
    (tmp_path / "loop0" / "loop").mkdir(parents=True)
    (tmp_path / "loop0" / "dev").write_text("7:0\n")
    (tmp_path / "loop0" / "loop" / "backing_file").write_text(f"/volumes/{V1}.img\n")
    (tmp_path / "loop1").mkdir()
    (tmp_path / "loop1" / "dev").write_text("7:1\n")
    (tmp_path / "sda").mkdir()
    assert host_loops(tmp_path) == [
        inv.HostLoop("loop0", "7:0", f"/volumes/{V1}.img"),
        inv.HostLoop("loop1", "7:1", ""),
    ]


def test_the_partition_helpers() -> None:
    nets = '{"kind": {"IPAddress": "172.18.0.3", "GlobalIPv6Address": "fc00:f853:ccd:e793::3"}}'
    assert addresses(nets) == ("172.18.0.3", "fc00:f853:ccd:e793::3")
    assert addresses("{}") == ("", "")
    assert reconnect_argv("w", "172.18.0.3", "") == [
        "network", "connect", "--ip", "172.18.0.3", "kind", "w"]  # fmt: skip
    assert started_after("2026-12-06T10:00:05Z", 1796551200.0)  # 10:00:00 UTC
    assert not started_after("2026-12-06T09:59:55Z", 1796551200.0)
    assert not started_after("", 0.0)
    assert digest(["line 1", "line 2"]) == digest(["line 1", "line 2"]) != digest(["line 1"])
    assert digest([]) == ""


def test_a_block_lifes_pod_is_valid_kubernetes() -> None:
    p = block_pod("w", "ns", "vol", "sleep 1", "n1")
    validate(p)
    c = p["spec"]["containers"][0]
    assert "volumeMounts" not in c and c["volumeDevices"] == [
        {"name": "data", "devicePath": DEVICE}
    ]
