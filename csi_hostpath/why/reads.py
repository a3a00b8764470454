"""The reads of `kubectl csi-hostpath why`: the Pod (or the claim), its claims, their
StorageClasses, PersistentVolumes (and any other naming the same volume), VolumeAttachments,
the nodes and CSINode involved, the pods that share the volumes, the events of each object, and
the driver's ledger view of each volume, gathered into why.rules.diagnosis.Observed.

Only GET and LIST, each answered as the API server's own JSON. The driver's view comes through
the API server's proxy, to the Service (or, in the local shape, the node plugin pod) that the
CSIDriver's annotation names (LEDGER_ANNOTATION, set by the chart), so a user needs no network
path to the driver and no right beyond `get` on that one proxy.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from csi_hostpath.why.kube_access import Access
from csi_hostpath.why.rules import kube_fields as kf
from csi_hostpath.why.rules.diagnosis import Observed
from csi_hostpath.why.rules.kube_fields import Obj

# On the CSIDriver: where its ledger view is served, as JSON: {"namespace", "service", "port",
# "controllerPod"} (a controller Service), or {"namespace", "pods", "port"} (a label selector
# of node plugin pods, each the ledger of its own node: the local shape).
LEDGER_ANNOTATION = "loop.hostpath.csi.dev/ledger-view"
LEDGER_PATH = "ledger/v1/volumes/"


class ObjectNotFound(Exception):
    """The pod or claim asked about does not exist."""


class ReadFailed(Exception):
    """A read the answer needs was refused or failed; the message says which and why."""


def ledger_route(csidriver: Obj | None, override: str = "") -> dict[str, Any] | None:
    """Where the driver serves its ledger view: the --ledger-service override (NS/NAME[:PORT]),
    else the CSIDriver's annotation; None when neither says."""
    if override:
        where, _, port = override.partition(":")
        namespace, _, service = where.partition("/")
        if not namespace or not service:
            raise ValueError(f"--ledger-service must be NAMESPACE/NAME[:PORT], not {override!r}")
        return {"namespace": namespace, "service": service, "port": port or "metrics"}
    text = kf.text(csidriver, "metadata", "annotations", LEDGER_ANNOTATION)
    if not text:
        return None
    try:
        route = json.loads(text)
    except ValueError:
        return None
    return route if isinstance(route, dict) and route.get("namespace") else None


class Reader:
    def __init__(self, access: Access) -> None:
        self.access = access
        self.core = client.CoreV1Api(access.api)
        self.storage = client.StorageV1Api(access.api)

    def _call(self, what: str, call: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            answer = call(*args, _preload_content=False, _request_timeout=self.access.timeout, **kw)
        except ApiException as e:
            if e.status == 404:
                return None
            raise ReadFailed(f"reading {what}: {e.status} {e.reason}{_said(e)}") from e
        except HTTPError as e:
            raise ReadFailed(f"reading {what}: the API server did not answer ({e})") from e
        return json.loads(answer.data)

    def get(self, what: str, call: Callable[..., Any], *args: Any) -> Obj | None:
        found = self._call(what, call, *args)
        return found if isinstance(found, dict) else None

    def items(self, what: str, call: Callable[..., Any], *args: Any, **kw: Any) -> list[Obj]:
        found = self._call(what, call, *args, **kw) or {}
        return [i for i in found.get("items") or [] if isinstance(i, dict)]

    def events(self, obj: Obj) -> list[Obj]:
        uid = kf.uid(obj)
        selector = f"involvedObject.uid={uid}"
        what = f"the events of {obj.get('kind', 'object')} {kf.name(obj)}"
        return self.items(what, self.core.list_event_for_all_namespaces, field_selector=selector)

    def ledger_view(self, route: dict[str, Any] | None, handle: str, node: str) -> Obj:
        """The driver's view of one volume, or {"error": why it could not be read}."""
        if route is None:
            return {
                "error": "its CSIDriver names no ledger view (the csi-hostpath chart names it "
                "when why.enabled and metrics.enabled are on; another driver has none)"
            }
        ns, port = str(route["namespace"]), str(route.get("port") or "metrics")
        try:
            if route.get("service"):
                target = f"{route['service']}:{port}"
                answer = self.core.connect_get_namespaced_service_proxy_with_path(
                    target,
                    ns,
                    LEDGER_PATH + handle,
                    _preload_content=False,
                    _request_timeout=self.access.timeout,
                )
            else:
                plugins = self.items(
                    "the driver's node plugin pods",
                    self.core.list_namespaced_pod,
                    ns,
                    label_selector=str(route.get("pods", "")),
                    field_selector=f"spec.nodeName={node}",
                )
                if not plugins:
                    return {"error": f"no node plugin pod of the driver on node {node!r}"}
                answer = self.core.connect_get_namespaced_pod_proxy_with_path(
                    f"{kf.name(plugins[0])}:{port}",
                    ns,
                    LEDGER_PATH + handle,
                    _preload_content=False,
                    _request_timeout=self.access.timeout,
                )
        except ApiException as e:
            return {"error": f"{e.status} {e.reason}{_said(e)}"}
        except (HTTPError, ReadFailed) as e:
            return {"error": str(e)}
        try:
            view = json.loads(answer.data)
        except ValueError:
            return {"error": "the driver's answer is not JSON"}
        return view if isinstance(view, dict) else {"error": "the driver's answer is not a view"}


def _said(e: ApiException) -> str:
    body = getattr(e, "body", None) or getattr(e, "data", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, AttributeError):
        message = None
    return f": {message}" if message else ""


def gather(
    access: Access,
    namespace: str,
    kind: str,
    name: str,
    ledger_service: str = "",
    now: float | None = None,
) -> Observed:
    """Read everything `why` needs about pod/NAME or pvc/NAME in the namespace."""
    r = Reader(access)
    core, storage = r.core, r.storage
    in_namespace = r.items(f"the pods of {namespace}", core.list_namespaced_pod, namespace)
    claim_asked = ""
    if kind == "pod":
        pod = r.get(f"pod {namespace}/{name}", core.read_namespaced_pod, name, namespace)
        if pod is None:
            raise ObjectNotFound(f"pod {name} not found in namespace {namespace}")
    else:
        claim_asked = name
        if r.get(f"claim {name}", core.read_namespaced_persistent_volume_claim, name, namespace):
            pod = kf.consumer_of(in_namespace, name)
        else:
            raise ObjectNotFound(f"claim {name} not found in namespace {namespace}")
    pairs = kf.claims_of(pod) if pod is not None else [("", name)]
    claims = _each(
        {c for _, c in pairs},
        lambda c: r.get(f"claim {c}", core.read_namespaced_persistent_volume_claim, c, namespace),
    )
    classes = _each(
        {kf.text(c, "spec", "storageClassName") for c in claims.values()},
        lambda sc: r.get(f"StorageClass {sc}", storage.read_storage_class, sc),
    )
    own = _each(
        {kf.text(c, "spec", "volumeName") for c in claims.values()},
        lambda pv: r.get(f"PersistentVolume {pv}", core.read_persistent_volume, pv),
    )
    handles = {kf.text(pv, "spec", "csi", "volumeHandle") for pv in own.values()} - {""}
    volumes = dict(own)
    if handles:  # other PersistentVolumes naming one of these volumes
        for pv in r.items("the PersistentVolumes", core.list_persistent_volume):
            if kf.text(pv, "spec", "csi", "volumeHandle") in handles:
                volumes.setdefault(kf.name(pv), pv)
    names = {kf.text(pv, "spec", "csi", "driver") for pv in own.values()} | {
        kf.text(sc, "provisioner") for sc in classes.values()
    }
    drivers = _each(names, lambda d: r.get(f"CSIDriver {d}", storage.read_csi_driver, d))
    attachments = [
        a
        for a in r.items("the VolumeAttachments", storage.list_volume_attachment)
        if kf.text(a, "spec", "source", "persistentVolumeName") in volumes
    ]
    node = kf.text(pod, "spec", "nodeName")
    ledger: dict[str, Obj] = {}
    route: dict[str, Any] | None = None
    for pv in own.values():
        handle = kf.text(pv, "spec", "csi", "volumeHandle")
        if handle:
            route = ledger_route(drivers.get(kf.text(pv, "spec", "csi", "driver")), ledger_service)
            ledger[handle] = r.ledger_view(route, handle, _volume_node(pv) or node)
    involved = {node} | {kf.text(a, "spec", "nodeName") for a in attachments}
    for view in ledger.values():
        involved |= {str(h.get("node")) for h in view.get("holders") or []}
    involved -= {""}
    nodes = _each(involved, lambda n: r.get(f"node {n}", core.read_node, n))
    csinodes = _each({node} - {""}, lambda n: r.get(f"CSINode {n}", storage.read_csi_node, n))
    pods = [p for p in in_namespace if kf.uid(p) != kf.uid(pod)]
    for other in sorted(involved - {node}):
        seen = {kf.uid(p) for p in pods}
        on_node = r.items(
            f"the pods on node {other}",
            core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={other}",
        )
        pods += [p for p in on_node if kf.uid(p) not in seen and kf.uid(p) != kf.uid(pod)]
    involved_objects = [
        *([pod] if pod else []),
        *claims.values(),
        *classes.values(),
        *own.values(),
        *attachments,
        *csinodes.values(),
    ]
    events = {kf.uid(o): r.events(o) for o in involved_objects}
    return Observed(
        namespace=namespace,
        pod=pod,
        claims=claims,
        storage_classes=classes,
        volumes=volumes,
        attachments=attachments,
        nodes=nodes,
        csinodes=csinodes,
        csidrivers=drivers,
        events=events,
        pods=pods,
        ledger=ledger,
        now=time.time() if now is None else now,
        claim_asked=claim_asked,
        driver_namespace=str((route or {}).get("namespace", "")),
        driver_pod=str((route or {}).get("controllerPod", "")),
    )


def _each(keys: Iterable[str], read: Callable[[str], Obj | None]) -> dict[str, Obj]:
    found = {}
    for key in sorted(set(keys) - {""}):
        obj = read(key)
        if obj is not None:
            found[key] = obj
    return found


def _volume_node(pv: Obj) -> str:
    """The one node a local-shape volume lives on (its node affinity), "" for others."""
    for term in kf.field(pv, "spec", "nodeAffinity", "required", "nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            values = expr.get("values") or []
            if str(expr.get("key", "")).endswith("/node") and len(values) == 1:
                return str(values[0])
    return ""
