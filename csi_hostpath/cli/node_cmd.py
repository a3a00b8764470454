"""`csi-hostpath node`: nodes as the pool's records see them, and what to do when one is gone.

- `node list`: every node with volumes or a heartbeat here, its heartbeat age, and whether it is
  lost (core/nodeloss.py) with how many volumes.
- `node forget N --reason TEXT`: an operator's decision that node N is gone for good. An audit
  row; from then on N's volumes are reported lost, and DeleteVolume of one succeeds even though N
  still holds it. Nothing is deleted here.
- `node cleanup N`: the Kubernetes side. Prints the kubectl steps that turn the claims pinned to
  removed node N (their PersistentVolume's nodeAffinity names it) into claims that can be
  provisioned again. With --kubeconfig it runs them.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shlex
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from csi_hostpath.cli.lookup import open_state
from csi_hostpath.daemon.config import DEFAULT_DRIVER_NAME
from csi_hostpath.service.lost_volumes import forget_node, forgotten_nodes, lost_volumes
from csi_hostpath.store.pool_layout import PoolLayout


def add_node_parser(
    sub: Any,
    add_state_args: Callable[[argparse.ArgumentParser], None],
    add_lost_after: Callable[[argparse.ArgumentParser], None],
) -> None:
    node = sub.add_parser("node", help="nodes this pool knows; forget a lost one; clean up")
    nsub = node.add_subparsers(dest="node_command", required=True)
    lst = nsub.add_parser("list", help="nodes, heartbeat ages, and which are lost")
    add_state_args(lst)
    add_lost_after(lst)
    forget = nsub.add_parser("forget", help="record that a node is gone for good (audited)")
    add_state_args(forget)
    forget.add_argument("node")
    forget.add_argument("--reason", required=True, help="why; recorded in the audit trail")
    cleanup = nsub.add_parser(
        "cleanup",
        help="print (or, with --kubeconfig, run) the kubectl steps that make claims pinned to "
        "a removed node provisionable again",
    )
    cleanup.add_argument("node")
    cleanup.add_argument(
        "--driver-name",
        default=DEFAULT_DRIVER_NAME,
        help="the CSI driver whose volumes are cleaned up (default %(default)s)",
    )
    cleanup.add_argument("--kubeconfig", default=None, help="run the steps against this cluster")


def run(args: argparse.Namespace, dirs: Callable[[argparse.Namespace], tuple[Path, Path]]) -> int:
    if args.node_command == "cleanup":
        script = cleanup_script(args.node, args.driver_name)
        if args.kubeconfig is None:
            print(script, end="")
            return 0
        env = {**os.environ, "KUBECONFIG": str(Path(args.kubeconfig).absolute())}
        return subprocess.run(["bash", "-c", script], env=env, check=False).returncode
    state_dir, pool_dir = dirs(args)
    layout = PoolLayout(pool_dir)
    store = open_state(state_dir, write=args.node_command == "forget")
    if isinstance(store, int):
        return store
    try:
        if args.node_command == "forget":
            actor = f"cli:{getpass.getuser()}@{socket.gethostname()}:pid{os.getpid()}"
            forget_node(store, args.node, args.reason, actor)
            mine = [v for v in store.all_volumes() if v.node_id == args.node]
            print(
                f"Forgot node {args.node!r} ({args.reason}). Its {len(mine)} volume(s) here are "
                "now reported lost; DeleteVolume of one succeeds even while the node holds it. "
                f"Next, in the cluster: csi-hostpath node cleanup {shlex.quote(args.node)}"
            )
            for v in mine:
                print(f"  lost: {v.volume_id} ({v.name})")
            return 0
        lost_after = args.node_lost_after
        lost = lost_volumes(store, layout, lost_after)
        forgotten = forgotten_nodes(store)
        nodes = sorted(
            {b.node_id for b in layout.heartbeats()}
            | {v.node_id for v in store.all_volumes() if v.node_id}
            | set(forgotten)
        )
        for node_id in nodes:
            beat = layout.heartbeat(node_id)
            age = f"{beat.age():.0f}s" if beat else "never"
            why = next((loss.why for _, loss in lost if loss.node_id == node_id), "")
            count = sum(1 for _, loss in lost if loss.node_id == node_id)
            state = f"LOST ({why}); {count} volume(s) lost" if why else "present"
            print(f"{node_id}  heartbeat {age}  {state}")
        return 0
    finally:
        store.close()


def cleanup_script(node: str, driver: str) -> str:
    """A bash script of kubectl steps, for node `node` and driver `driver`.

    Order matters: a claim can't be deleted while a pod uses it (pvc-protection), a pod on a
    removed node is never confirmed gone by its kubelet (so it is force-deleted), and a PV whose
    provisioner ran on the removed node is never deleted by anyone (external-provisioner in
    --node-deployment mode deletes only its own node's volumes), so its finalizers are dropped by
    hand. A claim that a StatefulSet owns comes back by itself; any other is re-created from a
    minimal copy (name, class, modes, size), without its dataSource."""
    n, d = shlex.quote(node), shlex.quote(driver)
    pv_rows = (
        "{{range .items}}{{if .spec.csi}}{{if eq .spec.csi.driver $driver}}"
        "{{.metadata.name}} {{with .spec.claimRef}}{{.namespace}} {{.name}}{{else}}- -{{end}} "
        "{{with .spec.nodeAffinity}}{{range .required.nodeSelectorTerms}}"
        "{{range .matchExpressions}}{{range .values}}{{.}},{{end}}{{end}}{{end}}{{end}}"
        '{{"\\n"}}{{end}}{{end}}{{end}}'
    )
    va_rows = (
        '{{range .items}}{{if eq .spec.nodeName "\'"$node"\'"}}'
        '{{if eq (or .spec.source.persistentVolumeName "") "\'"$pv"\'"}}'
        "{{.metadata.name}} {{end}}{{end}}{{end}}"
    )
    pod_rows = (
        "{{range .items}}{{$p := .metadata.name}}{{range .spec.volumes}}"
        '{{with .persistentVolumeClaim}}{{if eq .claimName "\'"$claim"\'"}}{{$p}} {{end}}'
        "{{end}}{{end}}{{end}}"
    )
    claim_copy = (
        '{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"{{.metadata.name}}",'
        '"namespace":"{{.metadata.namespace}}"},"spec":{"storageClassName":'
        '"{{.spec.storageClassName}}","volumeMode":"{{.spec.volumeMode}}","accessModes":['
        '{{range $i, $m := .spec.accessModes}}{{if $i}},{{end}}"{{$m}}"{{end}}],"resources":'
        '{"requests":{"storage":"{{index .spec.resources.requests "storage"}}"}}}}'
    )
    return f"""#!/bin/bash
# csi-hostpath node cleanup {n}: make the claims pinned to removed node {n} provisionable again.
# Run it after `kubectl delete node {n}` (or once the machine is gone for good), and after
# `csi-hostpath node forget {n} --reason ...` where that node's records are kept.
set -euo pipefail
node={n}
driver={d}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. PersistentVolumes of the driver whose nodeAffinity names the node, with their claims.
kubectl get pv -o go-template='{{{{$driver := "'"$driver"'"}}}}{pv_rows}' |
  awk -v n="$node," '$4 == n {{print $1, $2, $3}}' > "$work/pinned"
echo "pinned to $node: $(wc -l < "$work/pinned") volume(s)"

while read -r pv ns claim <&3; do
  # 2. VolumeAttachments of the PV on the node: its attacher will never detach them.
  for va in $(kubectl get volumeattachments -o go-template='{va_rows}' ); do
    kubectl patch volumeattachment "$va" --type=merge -p '{{"metadata":{{"finalizers":null}}}}'
    kubectl delete volumeattachment "$va" --wait=false --ignore-not-found
  done
  if [ "$ns" != "-" ]; then
    # 3. Pods on the node that use the claim: no kubelet will confirm they stopped.
    for pod in $(kubectl get pods -n "$ns" --field-selector "spec.nodeName=$node" \\
        -o go-template='{pod_rows}' ); do
      kubectl delete pod -n "$ns" "$pod" --force --grace-period=0 --ignore-not-found
    done
    # 4. A minimal copy of the claim, then the claim itself.
    kubectl get pvc -n "$ns" "$claim" -o go-template='{claim_copy}' > "$work/$ns.$claim.json"
    kubectl delete pvc -n "$ns" "$claim" --wait=false --ignore-not-found
  fi
  # 5. The PV: its provisioner ran on the node, so nobody else deletes it.
  kubectl patch pv "$pv" --type=merge -p '{{"metadata":{{"finalizers":null}}}}'
  kubectl delete pv "$pv" --wait=false --ignore-not-found
  if [ "$ns" != "-" ]; then
    # 6. The claim again, unbound: the scheduler places it on a node that has room.
    kubectl wait --for=delete pvc -n "$ns" "$claim" --timeout=120s
    if ! kubectl get pvc -n "$ns" "$claim" >/dev/null 2>&1; then
      kubectl create -f "$work/$ns.$claim.json"
    fi
    echo "re-created claim $ns/$claim (was on $pv)"
  fi
done 3< "$work/pinned"
"""
