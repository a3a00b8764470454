"""The kubectl plugin end to end against a small API server, through the real client.

The kubectl plugin end to end, against a small API server answering each case's objects
(tests/unit/fake_apiserver.py) through the real Kubernetes client: the reason line of each of
the eight cases, the `-o json` document, that it only reads (GET, with the kubeconfig's token)
and reaches the driver only through the service proxy the CSIDriver names, how it finds its
kubeconfig and namespace as kubectl does, and its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from csi_hostpath.why.command import NOT_FOUND, READ_FAILED, USAGE, parse_target, run
from csi_hostpath.why.kube_access import NoCluster, connect, kubeconfig_files
from tests.unit.fake_apiserver import TOKEN, FakeCluster, serving
from tests.unit.why_cases import CASES, Case


def _why(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(["why", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _reason(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("reason: "))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_case_prints_its_reason_line(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = FakeCluster(case.objects, case.ledger)
    with serving(cluster, tmp_path) as kubeconfig:
        code, out, err = _why(capsys, case.ask, "--kubeconfig", str(kubeconfig))
        assert code == 0, err
        reason = _reason(out)
        for words in case.words:
            assert words in reason, (words, out)
        code, out, _ = _why(capsys, case.ask, "--kubeconfig", str(kubeconfig), "-o", "json")
    doc = json.loads(out)
    assert doc["schema"] == "csi-hostpath.why/v1" and doc["blocking"]["code"] == case.code
    assert "reason: " + doc["blocking"]["reason"] == reason
    # It only read, each time with the kubeconfig's token.
    assert {m for m, _, _ in cluster.requests} == {"GET"}
    assert {a for _, _, a in cluster.requests} == {f"Bearer {TOKEN}"}


def test_the_driver_is_reached_through_the_service_proxy_the_csidriver_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = next(c for c in CASES if c.name == "holder-gone")
    cluster = FakeCluster(case.objects, case.ledger)
    with serving(cluster, tmp_path) as kubeconfig:
        assert _why(capsys, case.ask, "--kubeconfig", str(kubeconfig))[0] == 0
    [handle] = case.ledger
    proxied = [p for _, p, _ in cluster.requests if "/proxy/" in p]
    assert proxied == [
        "/api/v1/namespaces/csi-hostpath/services/csi-hostpath-ledger:metrics/proxy/ledger/v1/"
        f"volumes/{handle}"
    ]


def test_a_refused_proxy_leaves_the_kubernetes_answer_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = next(c for c in CASES if c.name == "healthy")
    refused = "/api/v1/namespaces/csi-hostpath/services/"
    with serving(FakeCluster(case.objects, case.ledger, (refused,)), tmp_path) as kubeconfig:
        code, out, _ = _why(capsys, case.ask, "--kubeconfig", str(kubeconfig))
    assert code == 0 and _reason(out).startswith("reason: nothing blocks")
    assert "the driver's view of vol-" in out and "403 Forbidden" in out


def test_a_refused_read_of_kubernetes_exits_1_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = next(c for c in CASES if c.name == "healthy")
    cluster = FakeCluster(case.objects, case.ledger, ("/apis/storage.k8s.io/v1/volumeattachments",))
    with serving(cluster, tmp_path) as kubeconfig:
        code, _, err = _why(capsys, case.ask, "--kubeconfig", str(kubeconfig))
    assert code == READ_FAILED
    assert "reading the VolumeAttachments: 403" in err


def test_what_does_not_exist_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in CASES if c.name == "healthy")
    with serving(FakeCluster(case.objects, case.ledger), tmp_path) as kubeconfig:
        code, _, err = _why(capsys, "pod/nope", "--kubeconfig", str(kubeconfig))
        assert code == NOT_FOUND and "pod nope not found in namespace shop" in err
        code, _, err = _why(capsys, "pvc/nope", "--kubeconfig", str(kubeconfig), "-n", "other")
        assert code == NOT_FOUND and "claim nope not found in namespace other" in err


@pytest.mark.parametrize("target", ["nope", "deployment/web", "pod/", "/web"])
def test_a_target_must_be_a_pod_or_a_claim(target: str) -> None:
    with pytest.raises(ValueError, match="pod/NAME or pvc/NAME"):
        parse_target(target)
    assert run(["why", target]) == USAGE


def test_kinds_are_spelt_as_kubectl_spells_them() -> None:
    assert parse_target("pods/a") == parse_target("po/a") == ("pod", "a")
    assert parse_target("persistentvolumeclaim/b") == parse_target("PVC/b") == ("pvc", "b")


def test_the_kubeconfig_is_found_as_kubectl_finds_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    default = home / ".kube" / "config"
    one, two = tmp_path / "one", tmp_path / "two"
    for f in (default, one, two):
        f.write_text("{}")
    env = {"HOME": str(home)}
    assert kubeconfig_files(None, env) == str(default)
    assert kubeconfig_files("/given", env) == "/given"
    listed = os.pathsep.join([str(one), str(tmp_path / "missing"), str(two)])
    assert kubeconfig_files(None, {**env, "KUBECONFIG": listed}) == f"{one}{os.pathsep}{two}"
    default.unlink()
    assert kubeconfig_files(None, env) is None
    with pytest.raises(NoCluster, match="not inside a cluster"):
        connect(None, None, env)


def test_contexts_and_their_namespaces_as_kubectl_takes_them(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "healthy")
    with serving(FakeCluster(case.objects, case.ledger), tmp_path) as kubeconfig:
        doc = json.loads(kubeconfig.read_text())
        doc["contexts"].append({"name": "other", "context": {"cluster": "fake", "user": "reader"}})
        second = tmp_path / "second"
        second.write_text(json.dumps({**doc, "current-context": "other"}))
        env = {"KUBECONFIG": str(second), "HOME": str(tmp_path)}
        assert connect(None, None, env).namespace == "default"  # a context without one
        assert connect(None, "fake", env).namespace == "shop"
        with pytest.raises(NoCluster, match="context 'gone'"):
            connect(None, "gone", env)


def test_the_installed_executable_is_the_plugin(tmp_path: Path) -> None:
    """kubectl runs `kubectl-csi_hostpath` from PATH for `kubectl csi-hostpath`."""
    exe = Path(sys.executable).parent / "kubectl-csi_hostpath"
    assert exe.is_file() and os.access(exe, os.X_OK), "make install puts it in the venv"
    case = next(c for c in CASES if c.name == "missing-secret")
    with serving(FakeCluster(case.objects, case.ledger), tmp_path) as kubeconfig:
        done = subprocess.run(
            [str(exe), "why", case.ask, "-o", "json"],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["blocking"]["code"] == "pod-waits-for-secret"


def test_the_readmes_example_says_what_the_plugin_says_for_its_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README quotes a real cluster's answer, whose names, times and paths are that cluster's;
    its shape (the phases and their states) and its words (the reason and the next step) are the
    plugin's own for the same case, so a change of wording shows here."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("$ kubectl csi-hostpath why pod/waits -n shop\n")
    shown = readme[start : readme.index("```\n", start)].splitlines()[1:]
    case = next(c for c in CASES if c.name == "missing-secret")
    with serving(FakeCluster(case.objects, case.ledger), tmp_path) as kubeconfig:
        code, out, _ = _why(capsys, case.ask, "-n", "shop", "--kubeconfig", str(kubeconfig))
    printed = out.splitlines()
    assert code == 0 and len(printed) == len(shown)

    def shape(lines: list[str]) -> list[list[str]]:
        return [line.split()[:2] for line in lines[:-2]]

    assert shape(shown) == shape(printed)
    assert shown[-2:] == printed[-2:]
