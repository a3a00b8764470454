"""The cluster as the experiments see it: reads and waits through the official Python client (its
dynamic client, so the snapshot and group snapshot kinds work like the built-in ones), and kubectl
for what a person would type (apply, exec, logs, cordon, taint)."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import config, dynamic
from kubernetes.dynamic.exceptions import (
    NotFoundError,
    ResourceNotFoundError,
)

Obj = dict[str, Any]
T = TypeVar("T")


class Failed(Exception):
    """An experiment's check did not hold; the message says what was wanted and what was seen."""


def until(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
    """Poll probe until it returns something true (not None, False, an empty list or string); fail
    after timeout naming `what` and, when the probe raised, its last error."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        try:
            got = probe()
        except (Failed, subprocess.CalledProcessError) as e:
            got, last = None, _why(e)
        if got:
            return got
        if time.monotonic() >= deadline:
            raise Failed(
                f"timed out after {timeout:.0f} s waiting for {what}"
                + (f" ({last})" if last else "")
            )
        time.sleep(interval)


def holds(what: str, probe: Callable[[], bool], seconds: float, interval: float = 2.0) -> None:
    """Fail as soon as probe is false during the next `seconds`: something must stay so."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not probe():
            raise Failed(f"expected {what} to hold for {seconds:.0f} s; it stopped")
        time.sleep(interval)


def _why(e: Exception) -> str:
    if isinstance(e, subprocess.CalledProcessError):
        return (
            (e.stderr or e.stdout or str(e)).strip().splitlines()[-1:][0]
            if (e.stderr or e.stdout)
            else str(e)
        )
    return str(e)


def condition(obj: Obj | None, kind: str) -> Obj | None:
    """The status condition of that type, if the object has it."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def pod_ready(obj: Obj | None) -> bool:
    c = condition(obj, "Ready")
    return c is not None and c.get("status") == "True"


class Kube:
    def __init__(self, kubeconfig: Path, kubectl: str) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl_path = kubectl
        self._cache = tempfile.TemporaryDirectory(prefix="experiments-discovery-")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        self._client = dynamic.DynamicClient(
            api, cache_file=str(Path(self._cache.name) / "cache.json")
        )

    def close(self) -> None:
        self._cache.cleanup()

    # kubectl: what a person types.
    def kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 180, check: bool = True
    ) -> str:
        done = subprocess.run(
            [self.kubectl_path, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(
                done.returncode, ["kubectl", *args], done.stdout, done.stderr
            )
        return done.stdout

    def apply(self, objects: Sequence[Obj]) -> None:
        self.kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
        )

    def exec(
        self, namespace: str, pod: str, command: Sequence[str], container: str | None = None
    ) -> str:
        where = ["-c", container] if container else []
        return self.kubectl("-n", namespace, "exec", pod, *where, "--", *command)

    def logs(
        self, namespace: str, pod: str, container: str | None = None, previous: bool = False
    ) -> str:
        args = ["-n", namespace, "logs", pod]
        if container:
            args += ["-c", container]
        if previous:
            args.append("--previous")
        return self.kubectl(*args)

    # The client: reads.
    def _resource(self, api_version: str, kind: str) -> Any:
        try:
            return self._client.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            # A CRD installed after this client read the discovery documents.
            self._client.resources.invalidate_cache()
            return self._client.resources.get(api_version=api_version, kind=kind)

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        try:
            got = self._resource(api_version, kind).get(name=name, namespace=namespace)
        except NotFoundError:
            return None
        return dict(got.to_dict())

    def objects(
        self, api_version: str, kind: str, namespace: str | None = None, labels: str | None = None
    ) -> list[Obj]:
        got = self._resource(api_version, kind).get(namespace=namespace, label_selector=labels)
        return [dict(i) for i in got.to_dict().get("items") or []]

    def pod(self, namespace: str, name: str) -> Obj | None:
        return self.get("v1", "Pod", name, namespace)

    def pvc(self, namespace: str, name: str) -> Obj | None:
        return self.get("v1", "PersistentVolumeClaim", name, namespace)

    def events(self, namespace: str, name: str) -> list[Obj]:
        got = self._resource("v1", "Event").get(
            namespace=namespace, field_selector=f"involvedObject.name={name}"
        )
        return [dict(i) for i in got.to_dict().get("items") or []]

    def event_text(self, namespace: str, name: str) -> str:
        return "\n".join(
            f"{e.get('reason')}: {e.get('message')}" for e in self.events(namespace, name)
        )

    def wait_pod_ready(self, namespace: str, name: str, timeout: float = 180) -> Obj:
        def ready() -> Obj | None:
            p = self.pod(namespace, name)
            return p if pod_ready(p) else None

        try:
            return until(f"pod {namespace}/{name} Ready", ready, timeout)
        except Failed as e:
            raise Failed(f"{e}; events: {self.event_text(namespace, name)[-600:]}") from None

    def wait_gone(
        self, api_version: str, kind: str, name: str, namespace: str | None, timeout: float = 180
    ) -> None:
        until(
            f"{kind} {name} gone",
            lambda: self.get(api_version, kind, name, namespace) is None,
            timeout,
        )

    def volume_handle(self, namespace: str, claim: str) -> str:
        c = self.pvc(namespace, claim) or {}
        pv = self.get("v1", "PersistentVolume", (c.get("spec") or {}).get("volumeName") or "-")
        if pv is None:
            raise Failed(f"claim {namespace}/{claim} has no PersistentVolume")
        return str(pv["spec"]["csi"]["volumeHandle"])

    def delete_namespace(self, namespace: str, timeout: float = 300) -> None:
        self.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
        self.wait_gone("v1", "Namespace", namespace, None, timeout)
