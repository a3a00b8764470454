"""The e2e suite's snapshot-controller is created once, in its final shape: no rollout follows.

tools/cluster/k8s-e2e.sh used to apply the upstream Deployment (two replicas of an image that is
neither loaded nor pullable here), then change its image, its replicas and its arguments, one
write each. On kind the deployment controller once left the first ReplicaSet as the new one and
never made one for the final template: the rollout waited on an image pull that could not
succeed. Rendered locally first (`kubectl patch --local`), the Deployment's first template is its
last, so there is nothing to roll out and no ReplicaSet of a missing image.
"""

from __future__ import annotations

import os
import subprocess

from tests.chart.chart_tool import ROOT

K8S_E2E = ROOT / "tools" / "cluster" / "k8s-e2e.sh"


def snapshot_controller_lines() -> list[str]:
    """The commands the dry run prints for the snapshot CRDs and controller step."""
    done = subprocess.run(
        ["bash", str(K8S_E2E), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
        env={**os.environ, "PY": str(ROOT / ".venv" / "bin" / "python")},
    )
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "snapshot-controller" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("==="))
    return lines[start + 1 : end]


def test_the_snapshot_controller_deployment_is_written_once() -> None:
    lines = snapshot_controller_lines()
    deployment_writes = [
        line
        for line in lines
        if "deploy/snapshot-controller" in line and " rollout status " not in line
    ]
    assert deployment_writes == []
    rendered = [line for line in lines if "patch --local" in line]
    assert len(rendered) == 1
    for change in (
        '"/spec/replicas", "value": 1',
        "snapshot-controller:v8.7.0",
        'imagePullPolicy", "value": "IfNotPresent"',
        "--feature-gates=CSIVolumeGroupSnapshot=true",
    ):
        assert change in rendered[0], change
    target = rendered[0].rsplit("> ", 1)[1]
    assert any(line.endswith(f"apply -f {target}") for line in lines)
