"""The chart's changed-block tracking: the snapshot-metadata sidecar and its objects.

Changed-block tracking in the chart: the external-snapshot-metadata sidecar (v1.1.0) beside the
controller, its Service, its TLS Secret and the SnapshotMetadataService object, rendered only where
the cluster serves cbt.storage.k8s.io/v1beta1, in the shared shape, with snapshots on. The flags
are those of its pkg/sidecar/sidecar.go, the rules those its code uses."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chart import chart_tool
from tests.chart.chart_objects import container, controller_pod, flag, socket_path
from tests.chart.chart_tool import CBT_API, SNAPSHOT_API, Rendered
from tests.chart.conftest import Case, rendered_case

SIDECAR = "csi-snapshot-metadata"
KINDS = ("Secret", "Service", "SnapshotMetadataService")


def _with_cbt(values: dict[str, Any] | None = None) -> Rendered:
    return chart_tool.render(values or {}, api_versions=[SNAPSHOT_API, CBT_API])


def _sidecar_objects(r: Rendered) -> list[dict[str, Any]]:
    return [
        o
        for o in r.objects
        if o["kind"] == "SnapshotMetadataService" or "snapshot-metadata" in o["metadata"]["name"]
    ]


@pytest.fixture(scope="module")
def r() -> Rendered:
    return rendered_case(Case("snapshot-metadata", {}, (SNAPSHOT_API, CBT_API)))


def test_nothing_of_it_without_the_api_when_off_or_in_the_local_shape() -> None:
    for values, apis in (
        ({}, (SNAPSHOT_API,)),
        ({"snapshots": {"metadata": {"enabled": False}}}, (SNAPSHOT_API, CBT_API)),
        ({"snapshots": {"enabled": False}}, (SNAPSHOT_API, CBT_API)),
        ({"pool": {"scope": "local"}}, (SNAPSHOT_API, CBT_API)),
    ):
        r = chart_tool.render(values, api_versions=apis)
        assert _sidecar_objects(r) == [], values
        for w in r.of_kind("StatefulSet") + r.of_kind("DaemonSet"):
            names = {c["name"] for c in w["spec"]["template"]["spec"]["containers"]}
            assert SIDECAR not in names, values


def test_the_sidecar_shares_the_socket_and_serves_tls(r: Rendered) -> None:
    spec = controller_pod(r)
    c = container(spec, SIDECAR)
    assert c["image"] == "registry.k8s.io/sig-storage/csi-snapshot-metadata:v1.1.0"
    driver = container(spec, "csi-hostpath")
    endpoint = next(a for a in driver["args"] if a.startswith("--endpoint="))
    assert flag(c, "csi-address") == socket_path(endpoint.split("=", 1)[1])
    socket_mount = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert (
        socket_mount["socket-dir"]
        == {m["name"]: m["mountPath"] for m in driver["volumeMounts"]}["socket-dir"]
    )
    tls_dir = socket_mount["snapshot-metadata-tls"]
    assert flag(c, "tls-cert") == f"{tls_dir}/tls.crt"
    assert flag(c, "tls-key") == f"{tls_dir}/tls.key"
    volume = next(v for v in spec["volumes"] if v["name"] == "snapshot-metadata-tls")
    secret = r.one("Secret")
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    assert secret["type"] == "kubernetes.io/tls"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert int(flag(c, "port")) == ports["cbt-grpc"] == 50051
    # v1.x answers /health on its HTTP endpoint once its gRPC server is ready.
    assert int(flag(c, "http-endpoint").lstrip(":")) == ports["cbt-metrics"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "cbt-metrics"}
    # The audience comes from the object, not a flag that could disagree with it.
    assert not any(a.startswith("--audience") for a in c["args"])


def test_every_port_name_is_a_valid_service_name(r: Rendered) -> None:
    # A port name is an IANA_SVC_NAME: at most 15 characters, which the API server enforces and
    # the published schemas do not.
    for w in r.of_kind("StatefulSet") + r.of_kind("DaemonSet"):
        for c in w["spec"]["template"]["spec"]["containers"]:
            for p in c.get("ports") or []:
                assert len(p["name"]) <= 15, (c["name"], p["name"])
    for svc in r.of_kind("Service"):
        for p in svc["spec"]["ports"]:
            assert len(p["name"]) <= 15 and len(str(p["targetPort"])) <= 15, p


def test_its_service_reaches_the_controller_pod(r: Rendered) -> None:
    svc = next(
        s for s in r.of_kind("Service") if s["metadata"]["name"].endswith("-snapshot-metadata")
    )
    assert svc["spec"].get("clusterIP") != "None"
    pod_labels = r.one("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"] == [
        {
            "name": "cbt-grpc",
            "port": 6443,
            "targetPort": "cbt-grpc",
            "protocol": "TCP",
        }
    ]


def test_the_object_names_the_driver_the_service_and_the_ca(r: Rendered) -> None:
    sms = r.one("SnapshotMetadataService")
    assert sms["apiVersion"] == CBT_API
    assert sms["metadata"]["name"] == r.values["driverName"]
    assert sms["spec"]["address"] == f"csi-hostpath-snapshot-metadata.{chart_tool.NAMESPACE}:6443"
    assert sms["spec"]["audience"] == r.values["driverName"]
    assert sms["spec"]["caCert"] == r.one("Secret")["data"]["ca.crt"]
    custom = _with_cbt(
        {"snapshots": {"metadata": {"audience": "backup.example.org", "servicePort": 7443}}}
    )
    assert custom.one("SnapshotMetadataService")["spec"]["audience"] == "backup.example.org"
    assert custom.one("SnapshotMetadataService")["spec"]["address"].endswith(":7443")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_the_certificate_is_the_services_and_signed_by_the_ca(r: Rendered, tmp_path: Path) -> None:
    data = r.one("Secret")["data"]
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_bytes(base64.b64decode(data[name]))
    ca, crt = str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")
    verified = subprocess.run(
        ["openssl", "verify", "-purpose", "sslserver", "-CAfile", ca, crt],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    sans = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", crt],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    host = r.one("SnapshotMetadataService")["spec"]["address"].rsplit(":", 1)[0]
    assert f"DNS:{host}" in sans
    assert f"DNS:{host}.svc" in sans
    key_of = ["openssl", "pkey", "-pubout", "-in"]
    pub = subprocess.run([*key_of, str(tmp_path / "tls.key")], capture_output=True, check=True)
    cert_pub = subprocess.run(
        ["openssl", "x509", "-noout", "-pubkey", "-in", crt], capture_output=True, check=True
    )
    assert pub.stdout == cert_pub.stdout


def test_the_sidecars_rights(r: Rendered) -> None:
    role = next(
        o for o in r.of_kind("ClusterRole") if o["metadata"]["name"].endswith("-snapshot-metadata")
    )
    granted = {
        (g, res, verb)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        ("cbt.storage.k8s.io", "snapshotmetadataservices", "get"),
        ("cbt.storage.k8s.io", "snapshotmetadataservices", "list"),
        ("cbt.storage.k8s.io", "snapshotmetadataservices", "watch"),
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        ("snapshot.storage.k8s.io", "volumesnapshots", "get"),
        ("snapshot.storage.k8s.io", "volumesnapshots", "list"),
        ("snapshot.storage.k8s.io", "volumesnapshotcontents", "get"),
        ("snapshot.storage.k8s.io", "volumesnapshotcontents", "list"),
        ("snapshot.storage.k8s.io", "volumesnapshotclasses", "get"),
        ("snapshot.storage.k8s.io", "volumesnapshotclasses", "list"),
    }
    binding = next(
        b
        for b in r.of_kind("ClusterRoleBinding")
        if b["roleRef"]["name"] == role["metadata"]["name"]
    )
    assert binding["subjects"][0]["name"] == controller_pod(r)["serviceAccountName"]
