"""Node loss: a lost node's volumes are reported, deletable, and its claims cleaned up.

A local volume's node that is forgotten by an operator, or silent past --node-lost-after, is lost:
inspect, doctor and csi_hostpath_lost_volumes say so; DeleteVolume of a lost volume succeeds
(audited) even while the lost node holds it; `node cleanup` prints the kubectl steps for the claims
pinned to it, and runs them with --kubeconfig.

A local-scope controller for node-c (--mode controller: its node plugin is another process that
has gone away), over a real gRPC server and the fake system layer."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from csi_hostpath import cli
from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from tests.conftest import Client, in_process
from tests.support import helpers as h
from tests.support.processes import free_port, metric

C = grpc.StatusCode
MiB = 1 << 20


@pytest.fixture
def controller(workdir: Path) -> Iterator[tuple[Client, int]]:
    from csi_hostpath.system.fake import fake_system

    port = free_port()
    with in_process(
        workdir,
        "c",
        "--mode",
        "controller",
        "--node-id",
        "node-c",
        "--node-lost-after",
        "30",
        "--metrics-address",
        f"127.0.0.1:{port}",
        system=lambda pool: fake_system(pool, capacity_bytes=128 << 20),
    ) as client:
        yield client, port


def _dirs(workdir: Path) -> list[str]:
    return ["--state-dir", str(workdir / "c-state")]


def _beat(workdir: Path, node: str, age: float) -> None:
    layout = PoolLayout(workdir / "c-state" / "pool")
    layout.beat(node)
    path = next(
        p for p in layout.nodes.glob("*.json") if json.loads(p.read_text())["node_id"] == node
    )
    body = json.loads(path.read_text())
    body["at"] = time.time() - age
    path.write_text(json.dumps(body))


def _held_volume(client: Client, name: str) -> pb.Volume:
    cap = h.mount_cap("ext4")
    vol = h.create(client, name, cap, 8 * MiB)
    h.publish(client, vol.volume_id, "node-c", cap)
    return vol


def _delete(client: Client, volume_id: str) -> None:
    client.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=volume_id))


def test_a_forgotten_nodes_volumes_are_lost_and_can_be_deleted(
    controller: tuple[Client, int], workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Failed on the old code: there was no `node forget`, and DeleteVolume of a volume its
    (gone) node still held answered FAILED_PRECONDITION for ever."""
    client, port = controller
    _beat(workdir, "node-c", 0)
    kept = _held_volume(client, "kept")
    gone = _held_volume(client, "gone")
    h.expect_code(C.FAILED_PRECONDITION, _delete, client, gone.volume_id)
    assert metric(port, "csi_hostpath_lost_volumes") == 0

    assert (
        cli.main(["node", "forget", "node-c", "--reason", "machine retired", *_dirs(workdir)]) == 0
    )
    out = capsys.readouterr().out
    assert "machine retired" in out and gone.volume_id in out and "node cleanup node-c" in out
    assert metric(port, "csi_hostpath_lost_volumes") == 2

    assert cli.main(["inspect", kept.volume_id, "--json", *_dirs(workdir)]) == 0
    phases = {p["phase"]: p for p in json.loads(capsys.readouterr().out)["phases"]}
    assert phases["node"]["state"] == "abnormal" and "machine retired" in phases["node"]["reason"]
    assert cli.main(["doctor", *_dirs(workdir)]) in (0, 1, 2)
    doctor = capsys.readouterr().out
    assert "lost-volumes" in doctor and "node-c" in doctor and gone.volume_id in doctor
    assert cli.main(["node", "list", *_dirs(workdir)]) == 0
    assert "LOST (forgotten by an operator: machine retired); 2 volume(s) lost" in (
        capsys.readouterr().out
    )

    _delete(client, gone.volume_id)
    _delete(client, gone.volume_id)  # idempotent
    assert metric(port, "csi_hostpath_lost_volumes") == 1
    store = Store(workdir / "c-state" / "state.db")
    try:
        rows = [a for a in store.audit(gone.volume_id) if a.action == "delete-lost"]
        assert store.publications(volume_id=gone.volume_id) == []
    finally:
        store.close()
    # One row for the revoked hold (with its generation), one for the deletion itself.
    assert len(rows) == 2 and all("machine retired" in r.reason for r in rows)
    assert {r.node_id for r in rows} == {"node-c"}


def test_a_node_silent_past_the_threshold_is_lost(
    controller: tuple[Client, int], workdir: Path
) -> None:
    client, port = controller
    _beat(workdir, "node-c", 0)
    vol = _held_volume(client, "quiet")
    _beat(workdir, "node-c", 10)  # silent, but within --node-lost-after 30
    h.expect_code(C.FAILED_PRECONDITION, _delete, client, vol.volume_id)
    assert metric(port, "csi_hostpath_lost_volumes") == 0
    _beat(workdir, "node-c", 45)
    assert metric(port, "csi_hostpath_lost_volumes") == 1
    _delete(client, vol.volume_id)
    assert metric(port, "csi_hostpath_lost_volumes") == 0


def test_shared_pool_volumes_are_never_lost_with_a_node(workdir: Path) -> None:
    from csi_hostpath.system.fake import fake_system

    with in_process(
        workdir,
        "s",
        "--mode",
        "controller",
        "--pool-scope",
        "shared",
        "--node-lost-after",
        "1",
        system=lambda pool: fake_system(pool, capacity_bytes=64 << 20),
    ) as client:
        layout = PoolLayout(workdir / "s-state" / "pool")
        layout.beat("node-x")
        cap = h.mount_cap("ext4")
        vol = h.create(client, "v", cap, 8 * MiB)
        h.publish(client, vol.volume_id, "node-x", cap)
        time.sleep(1.5)  # node-x is silent past the threshold; its hold still stands
        h.expect_code(C.FAILED_PRECONDITION, _delete, client, vol.volume_id)


FAKE_KUBECTL = r"""#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["KUBECTL_LOG"], "a") as log:
    log.write(" ".join(args) + "\n")
joined = " ".join(args)
if args[:2] == ["get", "pv"]:
    print("pv-1 apps data-0 node-c,")
    print("pv-2 apps data-1 node-b,")
    print("pv-3 - - node-c,")
elif args[:2] == ["get", "volumeattachments"]:
    print("va-1 " if "pv-1" in joined else "", end="")
elif args[:2] == ["get", "pods"]:
    print("web-0 ", end="")
elif args[:2] == ["get", "pvc"] and "go-template" in joined:
    print(json.dumps({"kind": "PersistentVolumeClaim", "metadata": {"name": args[4]}}))
elif args[:2] == ["get", "pvc"]:
    sys.exit(1)  # gone: not re-created by a StatefulSet
"""


def test_cleanup_prints_the_kubectl_steps_and_runs_them_with_a_kubeconfig(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["node", "cleanup", "node-c"]) == 0
    script = capsys.readouterr().out
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    order = [
        "kubectl get pv",
        "kubectl patch volumeattachment",
        "kubectl delete pod",
        "kubectl delete pvc",
        'kubectl patch pv "$pv"',
        'kubectl delete pv "$pv"',
        "kubectl create -f",
    ]
    positions = [script.index(step) for step in order]
    assert positions == sorted(positions)

    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    log = workdir / "kubectl.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KUBECTL_LOG": str(log)}
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text("{}")
    done = subprocess.run(
        [
            "python3",
            "-m",
            "csi_hostpath",
            "node",
            "cleanup",
            "node-c",
            "--kubeconfig",
            str(kubeconfig),
        ],
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    touched = [c for c in calls if c.startswith(("patch", "delete", "create"))]
    assert touched[0].startswith("patch volumeattachment va-1")
    assert "delete pod -n apps web-0 --force --grace-period=0 --ignore-not-found" in touched
    assert any(c.startswith("delete pvc -n apps data-0") for c in touched)
    assert any(c.startswith("delete pv pv-1") for c in touched)
    assert any(c.startswith("delete pv pv-3") for c in touched)  # a PV with no claim
    assert any(c.startswith("create -f") and "apps.data-0.json" in c for c in touched)
    assert not any("pv-2" in c or "data-1" in c for c in touched), "node-b's volume untouched"
    assert "re-created claim apps/data-0 (was on pv-1)" in done.stdout
