"""The real csi-sanity (kubernetes-csi/csi-test's cmd/csi-sanity) against real driver processes.

Three runs, as docs/conformance.md describes: mount and block against one `--mode all` process,
and a separate controller and node process. csi-sanity is found at $CSI_SANITY or on PATH
(`make test` installs the pinned one with tools/go-tools.sh and sets $CSI_SANITY); without it
these tests skip and say how to get it. The results are read from csi-sanity's JUnit report, so
a changed count names the specs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

GiB = 1 << 30
# csi-sanity's test volume is 10 GiB (sparse here); expansion must ask for more than that.
EXPAND_SIZE = 11 * GiB
ATTACH_LIMIT = 16
INSTALL_HINT = (
    "csi-sanity not found: run `bash tools/go-tools.sh install csi-sanity` (needs Go; "
    "`make test` does it), or set $CSI_SANITY to a csi-sanity binary"
)

# With a node-only endpoint csi-sanity stages without calling ControllerPublishVolume (it does so
# only when the node endpoint advertises CONTROLLER_SERVICE), so these node specs meet the
# ledger's refusal to stage a volume that no controller published to this node.
SPLIT_EXPECTED_FAILURES = frozenset(
    {
        "Node Service NodePublishVolume with single node multi writer capability should fail "
        "when volume with single node single writer access mode is already mounted at a "
        "different target path",
        "Node Service NodeUnpublishVolume should remove target path",
        "Node Service NodeGetVolumeStats should fail when volume does not exist on the "
        "specified path",
        "Node Service NodeExpandVolume should work if node-expand is called after node-publish",
        # v5.6.0's, CSI 1.13: it stages the same way before it asks for the volume's health.
        "Node Service NodeGetVolumeHealth should return health for a valid volume",
    }
)

# csi-test v5.6.0's snapshot-topology spec (controller.go) checks each returned topology with
# gomega's Equal, which is reflect.DeepEqual: it also compares the protobuf structs' internal
# size caches. The topology it expects was marshalled into two requests (cache set, 48), the one
# the driver returns was only unmarshalled (cache 0), so equal segments still fail. Any driver
# that reports a snapshot's accessible_topology (the field is optional; local scope reports it)
# fails this one spec. The conformance runs skip it by name, and a run of it alone checks that it
# still fails for that reason only, so the skip goes once a csi-test release compares segments.
UPSTREAM_BROKEN_RE = "creating a snapshot with accessibility requirements"
UPSTREAM_BROKEN = f"CreateSnapshot [Controller Server] should succeed when {UPSTREAM_BROKEN_RE}"


def csi_sanity() -> str | None:
    explicit = os.environ.get("CSI_SANITY")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("csi-sanity")


@dataclass
class Report:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"{len(self.passed)} passed, {len(self.failed)} failed, "
            f"{len(self.skipped)} skipped, {len(self.pending)} pending"
        ]
        lines += [f"FAILED {name}: {why[:400]}" for name, why in self.failed.items()]
        return "\n".join(lines)


def _spec_name(testcase: ET.Element) -> str:
    name = testcase.get("name", "")
    return name.removeprefix("[It] ").strip()


def read_junit(path: Path) -> Report:
    report = Report()
    for case in ET.parse(path).getroot().iter("testcase"):
        name, status = _spec_name(case), case.get("status", "")
        failure = case.find("failure")
        if failure is not None or status == "failed":
            message = failure.get("message", "") if failure is not None else status
            report.failed[name] = message
        elif status == "pending":
            report.pending.append(name)
        elif status == "skipped":
            report.skipped.append(name)
        else:
            report.passed.append(name)
    return report


def run_sanity(workdir: Path, run: str, endpoint: Path, *extra: str) -> Report:
    binary = csi_sanity()
    if binary is None:
        pytest.skip(INSTALL_HINT)
    mutable = workdir / "mutable.yaml"
    # The ModifyVolume specs' parameters; their name is the driver's read-ahead key.
    mutable.write_text('readAheadKiB: "256"\n')
    junit = workdir / f"{run}.xml"
    args = [
        binary,
        f"--csi.endpoint={endpoint}",
        f"--csi.mountdir={workdir / (run + '-mount')}",
        f"--csi.stagingdir={workdir / (run + '-staging')}",
        f"--csi.testvolumeexpandsize={EXPAND_SIZE}",
        "--csi.testnodevolumeattachlimit=true",
        f"--csi.testvolumemutableparameters={mutable}",
        f"--csi.junitfile={junit}",
        "--ginkgo.no-color",
        *extra,
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)
    (workdir / f"{run}.out").write_text(done.stdout + done.stderr)
    if not junit.exists():
        raise AssertionError(
            f"csi-sanity wrote no report ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return read_junit(junit)


Spawn = Callable[..., tuple[Any, Any]]
# The attach-limit spec makes ATTACH_LIMIT + 1 volumes of 10 GiB and never writes them: 170 GiB
# that a thin pool on a test machine's disk can promise only overcommitted (at the default
# ratio 1.0 the sizes of all volumes never exceed the pool).
ALL_FLAGS = ("--max-volumes-per-node", str(ATTACH_LIMIT), "--overcommit-ratio", "50")


@pytest.mark.parametrize("access_type", ["mount", "block"])
def test_csi_sanity_mode_all(spawn: Spawn, workdir: Path, access_type: str) -> None:
    if csi_sanity() is None:
        pytest.skip(INSTALL_HINT)
    spawn("all", *ALL_FLAGS)
    report = run_sanity(
        workdir,
        access_type,
        workdir / "all.sock",
        f"--csi.testvolumeaccesstype={access_type}",
        f"--ginkgo.skip={UPSTREAM_BROKEN_RE}",
    )
    print(report.summary())
    assert not report.failed, report.summary()
    assert report.skipped == [UPSTREAM_BROKEN], report.summary()
    # 101 of 103 at v5.6.0: the first release's 77, GetSnapshot's three, the attach limit,
    # ModifyVolume's eight, GroupController's six and the CSI 1.13 health specs' six; one is
    # pending in csi-sanity itself, one is UPSTREAM_BROKEN. See docs/conformance.md; a drop
    # here means a spec stopped passing.
    assert len(report.passed) >= 101, report.summary()


def test_csi_sanity_snapshot_topology_spec_fails_only_on_its_own_comparison(
    spawn: Spawn, workdir: Path
) -> None:
    """The one spec the conformance runs skip, run alone: it fails, and only because csi-test
    compares the protobuf structs' size caches; the segments it prints are the node's."""
    if csi_sanity() is None:
        pytest.skip(INSTALL_HINT)
    spawn("all", *ALL_FLAGS)
    report = run_sanity(
        workdir, "topology", workdir / "all.sock", f"--ginkgo.focus={UPSTREAM_BROKEN_RE}"
    )
    print(report.summary())
    assert list(report.failed) == [UPSTREAM_BROKEN], (
        f"{report.summary()}\nif it passes now, csi-test compares segments: drop UPSTREAM_BROKEN"
    )
    why = report.failed[UPSTREAM_BROKEN]
    assert "sizeCache" in why and why.count("hostpath.csi.dev/node") >= 1, why


def test_csi_sanity_split_controller_and_node(spawn: Spawn, workdir: Path) -> None:
    if csi_sanity() is None:
        pytest.skip(INSTALL_HINT)
    shared = ["--pool-scope", "shared", "--pool-dir", str(workdir / "pool")]
    spawn("ctrl", "--mode", "controller", *shared, *ALL_FLAGS, node_id="controller")
    spawn("node", "--mode", "node", *shared, *ALL_FLAGS, node_id="node-a")
    report = run_sanity(
        workdir, "split", workdir / "node.sock", f"--csi.controllerendpoint={workdir / 'ctrl.sock'}"
    )
    print(report.summary())
    assert set(report.failed) == SPLIT_EXPECTED_FAILURES, report.summary()
    assert len(report.passed) >= 83, report.summary()
