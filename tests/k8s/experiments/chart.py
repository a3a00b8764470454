"""The driver installed as a user installs it: the snapshot CRDs and snapshot-controller of the
pinned external-snapshotter, then `helm install` of charts/csi-hostpath with the real helm, in
either pool shape; and `helm uninstall`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.k8s.experiments.context import DRIVER, Ctx, log
from tests.k8s.experiments.kube import Failed, Kube, until
from tests.k8s.experiments.nodes import REPO

# The local shape's pool and state: directories of each node's own (/var/lib/csi-hostpath is the
# kind node's), beside the shared shape's, which the same run used before.
LOCAL_POOL = "/var/lib/csi-hostpath/local-pool"
LOCAL_STATE = "/var/lib/csi-hostpath/local-node"
SHAPE_VALUES = {
    "shared": [],
    "local": [
        "--set", "pool.scope=local",
        "--set", f"pool.hostPath={LOCAL_POOL}",
        "--set", f"node.stateHostPath={LOCAL_STATE}",
    ],
}  # fmt: skip
# The registrar and the liveness probe from the driver's own image: the chart's defaults are
# kubernetes-csi's images, which this project's clusters can neither pull nor build (the Go module
# proxy refuses both modules). The runner's own --set values come later, so they can override.
OWN_HELPERS = [
    "--set", "sidecars.nodeDriverRegistrar.implementation=csi-hostpath",
    "--set", "sidecars.livenessProbe.implementation=csi-hostpath",
]  # fmt: skip
# Group snapshots: off by default in external-snapshotter's snapshot-controller before v8.7.0, GA
# and on since; said explicitly, so a cluster of either serves them.
GROUP_GATE = "--feature-gates=CSIVolumeGroupSnapshot=true"


def chart_values(shape: str, extra: list[str]) -> list[str]:
    """The value flags of `helm install` for a pool shape, the runner's own last."""
    return [*OWN_HELPERS, *SHAPE_VALUES[shape], *extra]


def pinned(name: str) -> str:
    """A version of tools/cluster/versions.env (NAME=VALUE lines)."""
    for line in (REPO / "tools" / "cluster" / "versions.env").read_text().splitlines():
        key, _, value = line.partition("=")
        if key == name:
            return value.strip()
    raise Failed(f"tools/cluster/versions.env names no {name}")


def snapshot_controller_objects(rendered: str, image: str) -> list[dict[str, Any]]:
    """The upstream snapshot-controller manifests' objects (kubectl's client-side rendering, as
    JSON) with the Deployment in its final shape: the image loaded, never pulled (no registry;
    external-snapshotter v8.7.0's manifests still name the v8.6.0 image, and the controller is
    the pinned release's, which tools/cluster/images.sh makes), and the group snapshot gate."""
    parsed = json.loads(rendered)
    objects: list[dict[str, Any]] = (
        parsed.get("items", []) if parsed.get("kind") == "List" else [parsed]
    )
    deploys = [
        o
        for o in objects
        if o.get("kind") == "Deployment" and o["metadata"]["name"] == "snapshot-controller"
    ]
    if len(deploys) != 1:
        raise Failed("no snapshot-controller Deployment in the snapshot-controller manifests")
    container = deploys[0]["spec"]["template"]["spec"]["containers"][0]
    container["image"] = image
    container["imagePullPolicy"] = "IfNotPresent"
    args = container.setdefault("args", [])
    if GROUP_GATE not in args:
        args.append(GROUP_GATE)
    return objects


class Installer:
    def __init__(
        self, kube: Kube, helm: str, chart: Path, release: str, namespace: str, extra: list[str]
    ) -> None:
        self.kube = kube
        self.helm_path = helm
        self.chart = chart
        self.release = release
        self.namespace = namespace
        self.extra = extra
        self.shape = ""
        self.snapshot_controller_image = (
            f"registry.k8s.io/sig-storage/snapshot-controller:{pinned('CSI_SNAPSHOTTER_VERSION')}"
        )

    def helm(self, *args: str, timeout: float = 600) -> str:
        done = subprocess.run(
            [self.helm_path, "--kubeconfig", str(self.kube.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise Failed(f"helm {args[0]} failed: {(done.stderr or done.stdout).strip()[-500:]}")
        return done.stdout

    def snapshot_support(self, crds: Path, controller: Path, metadata_crds: Path) -> None:
        log(
            f"snapshot CRDs from {crds}, snapshot-controller from {controller},"
            f" the SnapshotMetadataService CRD from {metadata_crds}"
        )
        # Server-side: the CRDs are too big for the last-applied annotation.
        self.kube.kubectl("apply", "--server-side", "-f", str(crds))
        self.kube.kubectl("apply", "--server-side", "-f", str(metadata_crds))
        until(
            "the snapshot and snapshot metadata APIs served",
            lambda: all(
                api in self.kube.kubectl("api-versions")
                for api in ("snapshot.storage.k8s.io/v1", "cbt.storage.k8s.io/v1beta1")
            ),
            60,
        )
        how = "-k" if (controller / "kustomization.yaml").exists() else "-f"
        rendered = self.kube.kubectl(
            "-n", "kube-system", "apply", "--dry-run=client", "-o", "json", how, str(controller)
        )
        objects = snapshot_controller_objects(rendered, self.snapshot_controller_image)
        # One apply of the final template: an apply of the upstream one first would leave a
        # ReplicaSet of an image no node can pull beside the patched one.
        self.kube.kubectl(
            "-n", "kube-system", "apply", "-f", "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )  # fmt: skip
        self.kube.kubectl(
            "-n",
            "kube-system",
            "rollout",
            "status",
            "deployment/snapshot-controller",
            "--timeout=180s",
            timeout=200,
        )

    def install(self, shape: str, workers: list[str]) -> None:
        log(f"helm install {self.release} {self.chart} ({shape} pool)")
        self.helm(
            "install",
            self.release,
            str(self.chart),
            "--namespace",
            self.namespace,
            "--create-namespace",
            "--wait",
            "--timeout",
            "5m",
            *chart_values(shape, self.extra),
        )
        self.shape = shape

        def registered() -> bool:
            for w in workers:
                node = self.kube.get("storage.k8s.io/v1", "CSINode", w) or {}
                if DRIVER not in [
                    d.get("name") for d in (node.get("spec") or {}).get("drivers") or []
                ]:
                    return False
            return True

        until("every worker's CSINode lists the driver", registered, 120, 2)

    def uninstall(self, ctx: Ctx) -> None:
        log(f"helm uninstall {self.release}")
        self.helm(
            "uninstall", self.release, "--namespace", self.namespace, "--wait", "--timeout", "3m"
        )
        self.shape = ""
        until(
            "the release's pods gone",
            lambda: not ctx.driver_pods("controller") and not ctx.driver_pods("node"),
            180,
            2,
        )
