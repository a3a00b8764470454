"""Each role loads only its own modules: a node holds no controller, metrics, doctor or plugin code.

Each role loads only its own modules: a node plugin holds none of the controller's, the
metrics', the doctor's or the kubectl plugin's code, and a controller none of the node's.

A module a process never imports costs it no memory, so this is the memory-free proxy for the
node plugin's RSS (docs/benchmarks.md, "What each role holds"): a child process parses
`serve --mode ROLE` as the CLI does, builds and starts the driver on the fake system layer (and
imports the Linux one, which build_driver would make), then lists sys.modules.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from csi_hostpath.cli.main import main  # the entry point's own imports
from csi_hostpath.cli import build_parser, config_from_args
from csi_hostpath.daemon.server import build_driver, start
from csi_hostpath.system.fake import fake_system
import csi_hostpath.system.linux  # what build_driver imports for the real system

root, mode = sys.argv[1], sys.argv[2]
args = build_parser().parse_args([
    "serve", "--endpoint", f"unix://{root}/csi.sock", "--node-id", "roles",
    "--state-dir", f"{root}/state", "--pool-dir", f"{root}/pool", "--mode", mode,
    "--heartbeat-interval", "3600",
])
config = config_from_args(args)
driver = build_driver(config, system=fake_system(config.pool_dir, capacity_bytes=1 << 30))
start(driver)
try:
    print(json.dumps(sorted(sys.modules)))
finally:
    driver.stop(grace=0)
"""

# Never in a node plugin that serves no controller and no metrics address.
NOT_IN_A_NODE = (
    "csi_hostpath.service.controller",
    "csi_hostpath.daemon.controller_role",
    "csi_hostpath.api.controller",
    "csi_hostpath.api.group_controller",
    "csi_hostpath.api.snapshot_metadata",
    "csi_hostpath.api.runtime.copy_pool",
    "csi_hostpath.service.ledger_view",
    "csi_hostpath.service.metrics",
    "csi_hostpath.daemon.status_http",
    "csi_hostpath.cli.operator",
    "csi_hostpath.doctor",
    "csi_hostpath.why",
    "csi_hostpath.client",
    "prometheus_client",
    "psutil",
    "pyudev",
)
NOT_IN_A_CONTROLLER = (
    "csi_hostpath.service.node",
    "csi_hostpath.daemon.node_role",
    "csi_hostpath.api.node",
)


def loaded(tmp_path: Path, mode: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    modules: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return modules


def _matching(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p) for p in prefixes)]


@pytest.mark.parametrize(
    ("mode", "own", "others"),
    [
        ("node", "csi_hostpath.service.node.service", NOT_IN_A_NODE),
        ("controller", "csi_hostpath.service.controller.service", NOT_IN_A_CONTROLLER),
    ],
)
def test_a_role_imports_none_of_what_it_does_not_serve(
    tmp_path: Path, mode: str, own: str, others: tuple[str, ...]
) -> None:
    modules = loaded(tmp_path, mode)
    assert own in modules  # the child really built the role
    found = _matching(modules, others)
    assert found == [], f"a {mode} process imported: {', '.join(found)}"
