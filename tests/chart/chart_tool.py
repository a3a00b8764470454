"""Render and check charts/csi-hostpath offline, with Helm's own template engine.

Helm's engine comes from the PyPI package helm-python-sdk, which wraps Helm's Go SDK (v4) in a
shared library; the Kubernetes schemas come from kubernetes-validate, which bundles them. Neither
needs a cluster, a helm binary or the network, so the chart is checked the same way on a laptop and
in CI. The tests use this module, and `make chart-lint` runs it as a program:

    python -m tests.chart.chart_tool lint
    python -m tests.chart.chart_tool render --set-json '{"pool": {"scope": "local"}}'
    python -m tests.chart.chart_tool render --api-versions snapshot.storage.k8s.io/v1
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "csi-hostpath"
RELEASE = "csi-hostpath"
NAMESPACE = "csi-hostpath"
# The Kubernetes release the chart is checked against (kind v0.33 runs v1.35.1).
KUBE_VERSION = "1.35.0"
SNAPSHOT_API = "snapshot.storage.k8s.io/v1"
CBT_API = "cbt.storage.k8s.io/v1beta1"

# The component label of what templates/why.yaml renders for the plugin's user.
WHY_READER = "why-reader"

PIP_HINT = "pip install helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 (the dev extras)"


class ToolMissing(RuntimeError):
    """A package the chart checks need is not installed."""


def _import(module: str, package: str) -> ModuleType:
    try:
        return __import__(module)
    except ImportError as e:
        raise ToolMissing(
            f"{package} is not installed, so the chart cannot be checked offline: {PIP_HINT}"
        ) from e


def helm() -> ModuleType:
    return _import("helm_python", "helm-python-sdk")


def kubernetes_validate() -> ModuleType:
    return _import("kubernetes_validate", "kubernetes-validate")


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key twice in one mapping.

    PyYAML silently keeps the last duplicate, while the API server's decoder refuses it: a template
    that emits a label twice must fail here, not at install time.
    """


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def load_documents(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a manifest, as dicts."""
    docs = []
    try:
        loaded = list(yaml.load_all(text, Loader=_UniqueKeyLoader))  # a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ValueError(f"invalid YAML: {e}") from e
    for doc in loaded:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ValueError(f"a manifest document is not a mapping: {doc!r}")
        docs.append(doc)
    return docs


@dataclass(frozen=True)
class Rendered:
    """One render of the chart: the files Helm produced and the objects in them."""

    manifests: dict[str, str]
    objects: list[dict[str, Any]]
    values: dict[str, Any]

    @property
    def notes(self) -> str:
        return next((v for k, v in self.manifests.items() if k.endswith("NOTES.txt")), "")

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def drivers(self, kind: str) -> list[dict[str, Any]]:
        """The objects of that kind the driver itself runs with: all but those granting the
        kubectl plugin's user their reads (templates/why.yaml, component why-reader)."""
        return [
            o
            for o in self.of_kind(kind)
            if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") != WHY_READER
        ]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        if len(found) != 1:
            raise AssertionError(f"expected one {kind}, rendered {len(found)}")
        return found[0]


def render(
    values: Mapping[str, Any] | None = None,
    *,
    api_versions: Sequence[str] = (),
    kube_version: str = KUBE_VERSION,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> Rendered:
    """Render the chart like `helm template --kube-version V --api-versions A ...` would.

    helm-python-sdk 0.2.2 does not expose the capability options in Chart.render(), although its
    library (helm-c-sdk) accepts them in the render options. The library decodes those options
    strictly, so a release that dropped one fails loudly here instead of silently rendering
    without it. "strict" makes a template that reads a value missing from values.yaml an error,
    which catches typos in value paths.
    """
    h = helm()
    from helm_python import _native

    opts = {
        "name": release,
        "namespace": namespace,
        "kube_version": f"v{kube_version.lstrip('v')}",
        "api_versions": list(api_versions),
        "strict": True,
    }
    user_values = dict(values or {})
    with h.Chart.load(str(CHART_DIR)) as chart:
        # The values the templates see: the chart's defaults coalesced with ours. The render
        # below checks them against values.schema.json, as `helm template` does.
        merged: dict[str, Any] = chart.merge_values(user_values)
        payload = _native.call_string(
            "helm_render", chart._raw(), json.dumps(user_values), json.dumps(opts)
        )
    manifests: dict[str, str] = json.loads(payload)
    objects: list[dict[str, Any]] = []
    for name in sorted(manifests):
        if name.endswith((".yaml", ".yml")):
            try:
                objects.extend(load_documents(manifests[name]))
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from e
    return Rendered(manifests, objects, merged)


# kubernetes-validate carries the schemas of built-in kinds only. VolumeSnapshotClass is a CRD of
# the external-snapshotter project, so its shape is written out here from the fields of its v1 API.
_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    (SNAPSHOT_API, "VolumeSnapshotClass"): {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "driver", "deletionPolicy"],
        "properties": {
            "apiVersion": {"const": SNAPSHOT_API},
            "kind": {"const": "VolumeSnapshotClass"},
            "metadata": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "maxLength": 253, "pattern": _NAME},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
            "driver": {"type": "string", "minLength": 1, "maxLength": 63, "pattern": _NAME},
            "deletionPolicy": {"enum": ["Delete", "Retain"]},
            "parameters": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
}


# The SnapshotMetadataService of external-snapshot-metadata v1.x's CRD
# (client/config/crd/cbt.storage.k8s.io_snapshotmetadataservices.yaml): cluster-scoped, every
# field of its spec required, caCert a base64 string (format byte).
CRD_SCHEMAS[(CBT_API, "SnapshotMetadataService")] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": CBT_API},
        "kind": {"const": "SnapshotMetadataService"},
        "metadata": CRD_SCHEMAS[(SNAPSHOT_API, "VolumeSnapshotClass")]["properties"]["metadata"],
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["address", "audience", "caCert"],
            "properties": {
                "address": {"type": "string", "minLength": 1},
                "audience": {"type": "string", "minLength": 1},
                "caCert": {"type": "string", "pattern": "^[A-Za-z0-9+/]+={0,2}$"},
            },
        },
    },
}


def validate(obj: Mapping[str, Any], kube_version: str = KUBE_VERSION) -> str:
    """Validate one object strictly (unknown fields are errors); return the schema version used.

    Raises ValueError naming the object and the failing path.
    """
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    name = f"{key[1]}/{obj.get('metadata', {}).get('name', '?')}"
    if key in CRD_SCHEMAS:
        import jsonschema

        try:
            jsonschema.Draft202012Validator(CRD_SCHEMAS[key]).validate(dict(obj))
        except jsonschema.ValidationError as e:
            path = ".".join(str(p) for p in e.absolute_path)
            raise ValueError(f"{name}: {path}: {e.message}") from e
        return f"crd:{key[0]}"
    kv = kubernetes_validate()
    from kubernetes_validate import utils

    try:
        used: str = kv.validate(dict(obj), kube_version, strict=True)
    except utils.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        raise ValueError(f"{name} against Kubernetes {e.version}: {path}: {e.message}") from e
    except utils.SchemaNotFoundError as e:
        raise ValueError(f"{name}: {e.message}") from e
    return used


def lint(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`helm lint --strict --kube-version` on the chart directory."""
    report: dict[str, Any] = helm().lint(
        str(CHART_DIR), dict(values or {}), strict=True, kube_version=f"v{KUBE_VERSION}"
    )
    return report


def lint_problems(report: Mapping[str, Any]) -> list[str]:
    """Lint findings of warning severity or worse (severity 2 and 3), and lint errors."""
    found = [
        f"{m.get('path', '')}: {m.get('error', '')}"
        for m in report.get("messages", [])
        if int(m.get("severity", 0)) >= 2
    ]
    return found + [str(e) for e in report.get("errors", []) or []]


def _main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chart.chart_tool", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("lint", help="helm lint --strict, then validate the default render")
    rend = sub.add_parser("render", help="print the rendered manifests (like helm template)")
    rend.add_argument("--set-json", default="{}", help="values as one JSON object")
    rend.add_argument("--api-versions", action="append", default=[], help="e.g. " + SNAPSHOT_API)
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        if args.command == "lint":
            report = lint()
            for m in report.get("messages", []):
                print(f"[severity {m.get('severity')}] {m.get('path', '')}: {m.get('error', '')}")
            problems = lint_problems(report)
            rendered = render(api_versions=[SNAPSHOT_API])
            for obj in rendered.objects:
                validate(obj)
            print(
                f"{len(problems)} lint problem(s); {len(rendered.objects)} objects valid against "
                f"Kubernetes {KUBE_VERSION}"
            )
            return 1 if problems else 0
        rendered = render(json.loads(args.set_json), api_versions=args.api_versions)
        for name in sorted(rendered.manifests):
            if rendered.manifests[name].strip() and not name.endswith("NOTES.txt"):
                print(f"---\n# Source: {name}\n{rendered.manifests[name].strip()}")
        return 0
    except (ToolMissing, ValueError) as e:
        print(f"chart_tool: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_main())
