"""The driver's own behaviour as the rendered chart shapes it, offline.

The chart's items that are the driver's behaviour in the chart's shape, checked against the
rendered chart (offline; the real-device tests are named in each docstring):

- Probe answers ready=false while the driver starts, and copies never take every RPC worker;
- the controller and the node plugins share the pool the freeze requests travel through;
- docs/kind.md's loop-device cleanup matches what the host shows.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.api.identity import IdentityServicer
from csi_hostpath.api.runtime.copy_pool import CopyPool
from csi_hostpath.cli import build_parser, config_from_args
from csi_hostpath.daemon.config import Config
from csi_hostpath.service.readiness import Readiness
from csi_hostpath.store.db import Store
from tests.chart.chart_objects import container, controller_pod, flag, node_pod
from tests.chart.chart_tool import Rendered

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]


def driver_config(spec: Obj) -> Config:
    args = container(spec, "csi-hostpath")["args"]
    return config_from_args(
        build_parser().parse_args([a.replace("$(NODE_ID)", "n1") for a in args])
    )


def test_probe_is_ready_false_until_the_driver_has_started(
    rendered: Rendered, tmp_path: Path
) -> None:
    """csi-lib-utils' ProbeForever (connection/connection.go), run by every sidecar at start, waits
    on ready=false and exits on an error; tests/real/test_liveness.py checks it on a live server."""
    config = driver_config(controller_pod(rendered))
    store = Store(tmp_path / "state.db")
    started = threading.Event()
    try:
        readiness = Readiness(store.path, config.state_dir, config.pool_dir, None)
        identity = IdentityServicer(
            config.driver_name, config.serves_controller, config.pool_scope, readiness, started
        )
        assert not identity.Probe(pb.ProbeRequest(), None).ready.value
    finally:
        store.close()


def test_copies_never_take_every_rpc_worker_under_the_charts_flags(rendered: Rendered) -> None:
    """api/runtime/copy_pool.py: copies run on their own pool, and the RPC workers that wait for
    them are bounded, so ControllerPublish and the other calls always find a worker
    (tests/real/test_copy_pool_real.py: six held copies on a 4-worker server)."""
    for spec in (controller_pod(rendered), node_pod(rendered)):
        workers = driver_config(spec).workers
        copies = CopyPool(workers)
        try:
            assert copies._waiters._value < workers, "a worker is always left for other calls"
        finally:
            copies.shutdown()


def _pool_mount(spec: Obj, pool_dir: str) -> str:
    driver = container(spec, "csi-hostpath")
    mounts = {m["mountPath"]: m["name"] for m in driver["volumeMounts"]}
    assert pool_dir in mounts, f"the driver does not mount its --pool-dir {pool_dir}"
    volumes = {v["name"]: v for v in spec["volumes"]}
    host: str = volumes[mounts[pool_dir]]["hostPath"]["path"]
    return host


def test_controller_and_nodes_share_the_pool_freeze_requests_travel_through(
    rendered: Rendered,
) -> None:
    """The controller runs apart from the nodes (--mode controller), so it asks a node to freeze
    a volume through POOL/freeze-requests/ (service/controller/remote_freeze.py); that works
    only if both see one pool (tests/real/test_freeze_remote.py: two processes on real devices)."""
    if rendered.values["pool"]["scope"] != "shared":
        return  # the local shape: each node pod is its pool's controller and freezes in-process
    controller, node = controller_pod(rendered), node_pod(rendered)
    assert flag(container(controller, "csi-hostpath"), "mode") == "controller"
    pool_dir = flag(container(controller, "csi-hostpath"), "pool-dir")
    assert flag(container(node, "csi-hostpath"), "pool-dir") == pool_dir
    assert _pool_mount(controller, pool_dir) == _pool_mount(node, pool_dir)


def test_loop_cleanup_commands_match_what_the_host_shows() -> None:
    """The kernel names a loop device's backing file as the node plugin's container saw it, or
    "/volumes/<id>.img" once that container is gone, never by the host's pool directory
    (tests/real/test_loop_container_view.py); the inode identifies it."""
    guide = (ROOT / "docs" / "kind.md").read_text()
    cleanup = guide[guide.index("## Cleaning up") :]
    assert "grep /var/lib/csi-hostpath-kind" not in cleanup
    assert "BACK-INO" in cleanup and "ls -i /var/lib/csi-hostpath-kind/pool/volumes" in cleanup
    assert "/volumes/<id>.img" in cleanup
