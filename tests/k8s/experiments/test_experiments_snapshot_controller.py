"""The experiments' installer creates the snapshot-controller Deployment once, as it will run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.k8s.experiments.chart import GROUP_GATE, Installer


def upstream() -> dict[str, Any]:
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "snapshot-controller", "namespace": "kube-system"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "snapshot-controller", "image": "upstream:v8.5.0", "args": []}
                    ]
                }
            }
        },
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sc"}}
    return {"apiVersion": "v1", "kind": "List", "items": [account, deploy]}


class Kube:
    kubeconfig = Path("/nonexistent")

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], str | None]] = []

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 180) -> str:
        self.calls.append((args, stdin))
        if "api-versions" in args:
            return "snapshot.storage.k8s.io/v1\ncbt.storage.k8s.io/v1beta1\n"
        if "--dry-run=client" in args:
            return json.dumps(upstream())
        return ""

    def get(self, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any]:
        return dict(upstream()["items"][1])


def test_the_deployment_is_applied_once_with_the_pinned_image_and_the_gate(tmp_path: Path) -> None:
    kube = Kube()
    installer = Installer(kube, "helm", tmp_path, "r", "ns", [])  # type: ignore[arg-type]
    installer.snapshot_support(tmp_path / "crds", tmp_path / "controller", tmp_path / "meta")
    verbs = [next(a for a in args if not a.startswith("-") and a != "kube-system")
             for args, _ in kube.calls]  # fmt: skip
    assert "patch" not in verbs and "set" not in verbs
    written = [
        json.loads(stdin)
        for args, stdin in kube.calls
        if "apply" in args and "--dry-run=client" not in args and stdin
    ]
    assert len(written) == 1
    deploys = [o for o in written[0]["items"] if o["kind"] == "Deployment"]
    assert len(deploys) == 1 and len(written[0]["items"]) == 2
    container = deploys[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == installer.snapshot_controller_image
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["args"] == [GROUP_GATE]
    assert verbs[-1] == "rollout"
