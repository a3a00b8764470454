"""Reaching the API server as kubectl does: --kubeconfig, else every file KUBECONFIG lists
(merged), else ~/.kube/config, else the pod's own service account when run inside a cluster;
--context, else the kubeconfig's current one; the context's namespace, else `default`.

Nothing is ever written back: a refreshed token stays in memory (persist_config off).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class NoCluster(Exception):
    """No kubeconfig to read, and not inside a cluster; or the one given can't be used."""

    def __init__(self, message: str, next_step: str = "") -> None:
        super().__init__(message)
        self.next_step = next_step or (
            "give --kubeconfig a kubeconfig file (`kubectl config view --raw > FILE` writes "
            "one), or set KUBECONFIG"
        )


@dataclass(frozen=True)
class Access:
    api: Any  # kubernetes.client.ApiClient
    namespace: str  # the context's, for commands given no -n
    where: str  # the context's name, or "in-cluster"
    timeout: float = 10.0  # seconds for each request


def kubeconfig_files(flag: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The kubeconfig kubectl would read, as the client library takes it (paths joined with
    os.pathsep are merged); None when there is none."""
    env = os.environ if environ is None else environ
    if flag:
        return flag
    listed = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    existing = [p for p in listed if Path(p).expanduser().is_file()]
    if listed:
        return os.pathsep.join(existing) if existing else None
    home = Path(env.get("HOME") or Path.home()) / ".kube" / "config"
    return str(home) if home.is_file() else None


def connect(
    kubeconfig: str | None,
    context: str | None,
    environ: Mapping[str, str] | None = None,
    request_timeout: float = 10.0,
) -> Access:
    env = os.environ if environ is None else environ
    files = kubeconfig_files(kubeconfig, env)
    if files is None:
        if not env.get("KUBERNETES_SERVICE_HOST"):
            raise NoCluster(
                "no kubeconfig (give --kubeconfig, set KUBECONFIG, or write ~/.kube/config) "
                "and not inside a cluster"
            )
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        namespace = "default"
        if IN_CLUSTER_NAMESPACE.is_file():
            namespace = IN_CLUSTER_NAMESPACE.read_text().strip() or namespace
        return Access(_api(cfg), namespace, "in-cluster", request_timeout)
    try:
        contexts, current = config.list_kube_config_contexts(config_file=files)
        chosen = current
        if context:
            chosen = next((c for c in contexts if c.get("name") == context), None)
        if context and chosen is None:
            raise NoCluster(f"context {context!r} is not in {files}")
        cfg = client.Configuration()
        config.load_kube_config(
            config_file=files, context=context, client_configuration=cfg, persist_config=False
        )
    except config.ConfigException as e:
        raise NoCluster(f"{files}: {e}") from e
    except IsADirectoryError as e:
        raise NoCluster(f"{e.filename}: a directory, not a kubeconfig file") from e
    except OSError as e:
        raise NoCluster(f"{e.filename or files}: can't be read ({e.strerror})") from e
    except (yaml.YAMLError, TypeError, AttributeError, KeyError, ValueError) as e:
        # The client reads any YAML and fails on a shape it did not expect with whatever
        # Python raised (a plain string: TypeError); all of them mean "not a kubeconfig".
        raise NoCluster(
            f"{files}: not a kubeconfig (kind: Config with clusters, users and contexts): "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
        ) from e
    namespace = str(((chosen or {}).get("context") or {}).get("namespace") or "default")
    where = str((chosen or {}).get("name", ""))
    return Access(_api(cfg), namespace, where, request_timeout)


def _api(cfg: Any) -> Any:
    # A proxy's path names NAME:PORT and carries slashes (services/NAME:PORT/proxy/ledger/v1/
    # volumes/ID): sent as they are, as kubectl sends them, not as %3A and %2F.
    cfg.safe_chars_for_path_param = "/:"
    api = client.ApiClient(cfg)
    api.user_agent = "kubectl-csi_hostpath"
    return api
