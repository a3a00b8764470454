#!/usr/bin/env bash
# make k8s-e2e: Kubernetes' external storage e2e suite (e2e.test of k8s.io/kubernetes/test/e2e,
# focus External.Storage) against the driver, on a kind cluster (tools/kind/up.sh and down.sh,
# KIND_CLUSTER honoured; the images loaded with kind load image-archive).
#
#   tools/cluster/k8s-e2e.sh [--dry-run] [--bench]
#
# Brings the cluster up, installs the snapshot CRDs and the
# snapshot-controller from the pinned external-snapshotter module, then the chart twice with
# helm: the default shared shape (tests/k8s/storage_e2e/values.yaml, test-driver.yaml) and the local
# shape under its own driver name (values-local.yaml, test-driver-local.yaml, topology and
# capacity suites only). Runs the suite with ginkgo over e2e.test, writes into K8S_E2E_OUT a
# junit report (junit.xml), ginkgo's JSON report (report.json), the summary (summary.md: passed,
# failed and skipped counts, every skipped spec with its reason) and the driver pods' logs; then
# brings the cluster down, on failure too. Exits with ginkgo's status. Needs root.
#
# Settings, from the environment (mk/k8s-e2e.mk passes its own):
#   K8S_E2E_PROCS=3          ginkgo processes ([Serial] specs run alone at the end)
#   K8S_E2E_TIMEOUT=150m     ginkgo's --timeout for the whole run
#   K8S_E2E_FOCUS=RE         replace the default focus (both drivers' selections)
#   K8S_E2E_SKIP=RE          replace the default skip ([Disruptive], [Feature:SELinux], and the
#                            any-volume-data-source spec, whose images can't be built here)
#   K8S_E2E_DISRUPTIVE=1     run the [Disruptive] specs instead, one process, with an sshd in
#                            each node (tools/kind/node-ssh.sh) for their kubelet restarts
#   K8S_E2E_LOCAL=0          leave out the local shape's release and specs
#   K8S_E2E_KEEP=1           leave the cluster up at the end
#   K8S_E2E_OUT=DIR          default .run/kind-<name>-k8s-e2e
#   KUBERNETES_VERSION=V     the cluster's and e2e.test's Kubernetes: a release or minor with pins
#                            (tools/cluster/pins.sh; v1.35.4 by default, v1.34.4)
# --dry-run prints each step and runs nothing. --bench sets the cluster up the same way, then runs
# bench/cluster_latency.py (claim -> pod Running, snapshot -> restored claim Bound) instead of the
# suite, into K8S_E2E_OUT/latency.json (make k8s-bench; docs/benchmarks.md).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
# The Kubernetes release and its pins (KUBERNETES_VERSION); an unknown minor stops here.
# shellcheck source=tools/cluster/pins.sh
. tools/cluster/pins.sh

DRY_RUN=0 BENCH=0
for arg in "$@"; do
  case $arg in
    --dry-run) DRY_RUN=1 ;;
    --bench) BENCH=1 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "k8s-e2e: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

export KIND_CLUSTER=${KIND_CLUSTER:-csi-hostpath}
PROCS=${K8S_E2E_PROCS:-3}
TIMEOUT=${K8S_E2E_TIMEOUT:-150m}
DISRUPTIVE=${K8S_E2E_DISRUPTIVE:-0}
LOCAL=${K8S_E2E_LOCAL:-1}
KEEP=${K8S_E2E_KEEP:-0}
OUT=${K8S_E2E_OUT:-$repo/.run/kind-$KIND_CLUSTER-k8s-e2e}
PY=${PY:-$repo/.venv/bin/python}
SUITE=tests/k8s/storage_e2e
SHARED_DRIVER=loop.hostpath.csi.dev
LOCAL_DRIVER=local.hostpath.csi.dev
WAIT=300s

# What the run leaves out, each part with its reason (the summary groups the specs by it).
# The reference (csi-driver-host-path's CI) leaves out the first two as well.
left_out=()
leave_out() { left_out+=(--left-out "$1" "$2"); SKIP=${SKIP:+$SKIP|}$2; }
SKIP=
if [ -n "${K8S_E2E_SKIP:-}" ]; then
  leave_out "K8S_E2E_SKIP" "$K8S_E2E_SKIP"
else
  [ "$DISRUPTIVE" = 1 ] ||
    leave_out "[Disruptive]: they restart the kubelet; run with K8S_E2E_DISRUPTIVE=1, serially" '\[Disruptive\]'
  leave_out "[Feature:SELinux]: the nodes have no SELinux" '\[Feature:SELinux\]'
  leave_out "its two images (hello-populator, volume-data-source-validator) can't be built here: the Go module proxy answers 403 for github.com/kubernetes-csi/lib-volume-populator and volume-data-source-validator" \
    'should provision storage with any volume data source'
fi
[ "$DISRUPTIVE" = 1 ] && PROCS=1

# Ginkgo ORs its --focus flags: every spec of the shared driver, and the local driver's topology
# and capacity suites (the rest of the local shape runs the same code as the shared one).
focus=()
if [ -n "${K8S_E2E_FOCUS:-}" ]; then
  focus=(--focus="$K8S_E2E_FOCUS")
elif [ "$DISRUPTIVE" = 1 ]; then
  focus=(--focus="External.Storage.*\[Disruptive\]")
else
  focus=(--focus="External.Storage \[Driver: ${SHARED_DRIVER//./\\.}\]")
  [ "$LOCAL" = 1 ] &&
    focus+=(--focus="External.Storage \[Driver: ${LOCAL_DRIVER//./\\.}\].*(topology|capacity)")
fi
drivers=(-storage.testdriver="$repo/$SUITE/test-driver.yaml")
[ "$LOCAL" = 1 ] && drivers+=(-storage.testdriver="$repo/$SUITE/test-driver-local.yaml")

step() { printf '\n=== %s %s\n' "$(date -u +%H:%M:%S)" "$*"; }
run() {
  printf '+ %s\n' "$*"
  [ "$DRY_RUN" = 1 ] || "$@"
}

path_of() { bash tools/cluster/build.sh path "$1"; }
E2E_TEST=$(path_of e2e.test)
GINKGO=$(path_of ginkgo)
KUBECTL=$(path_of kubectl)
HELM=$(path_of helm)
CRDS=$(path_of snapshot-crds)
SNAP_CONTROLLER=$(path_of snapshot-controller-manifests)
KUBECONFIG=$repo/.run/kind/$KIND_CLUSTER/kubeconfig
export KUBECONFIG

# Whatever happened, the driver's logs are kept and the cluster goes down (unless K8S_E2E_KEEP).
# shellcheck disable=SC2329 # called by finish, the EXIT trap
collect_logs() {
  local ns pod
  mkdir -p "$OUT/logs"
  for ns in csi-hostpath local-hostpath kube-system; do
    for pod in $("$KUBECTL" -n "$ns" get pods -o name 2>/dev/null); do
      "$KUBECTL" -n "$ns" logs "$pod" --all-containers --prefix --timestamps \
        >"$OUT/logs/$ns.${pod#pod/}.log" 2>&1 || true
    done
  done
}
# shellcheck disable=SC2329 # the EXIT trap
finish() {
  local rc=$?
  trap - EXIT
  if [ "$DRY_RUN" = 0 ] && [ -f "$KUBECONFIG" ]; then
    step "driver logs into $OUT/logs"
    collect_logs
  fi
  if [ "$KEEP" = 1 ]; then
    echo "k8s-e2e: the cluster stays up (K8S_E2E_KEEP=1): make kind-down removes it"
  else
    step "cluster down"
    run bash tools/kind/down.sh || rc=1
  fi
  exit "$rc"
}

step "programs: e2e.test, ginkgo, the cluster's (built once, cached), Kubernetes $KUBERNETES_VERSION (pins: $PINS_FILES)"
run bash tools/cluster/build.sh kind e2e >/dev/null
step "images (cached; the suite's and the driver's)"
run bash tools/cluster/images.sh build
# Read whole (grep -q would end the listing early, and pipefail would call that a failure).
built=$(bash tools/cluster/images.sh list)
for image in registry.k8s.io/e2e-test-images/agnhost:"$AGNHOST_VERSION" registry.k8s.io/e2e-test-images/busybox:1.37.0-1 \
  registry.k8s.io/e2e-test-images/nginx:1.14-4 registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7; do
  [ "$DRY_RUN" = 1 ] || [[ $'\n'$built == *$'\n'"$image "* ]] ||
    { echo "k8s-e2e: image $image is not built (tools/cluster/images.sh build $image)" >&2; exit 1; }
done

mkdir -p "$OUT"
trap finish EXIT
step "cluster up (kind $KIND_CLUSTER)"
run bash tools/kind/up.sh

if [ "$DISRUPTIVE" = 1 ]; then
  # The [Disruptive] specs stop and start a node's kubelet over SSH (tools/kind/node-ssh.sh, whose
  # sessions run in the node, under its systemd).
  step "an SSH server in each node, for the suite's kubelet restarts"
  if [ "$DRY_RUN" = 0 ]; then
    KUBE_SSH_KEY_PATH=$(bash tools/kind/node-ssh.sh up)
    export KUBE_SSH_KEY_PATH KUBE_SSH_USER=root
  fi
fi

step "snapshot CRDs and snapshot-controller"
# The CRDs one file each (the directory's kustomization.yaml is no object); the group snapshot
# ones among them, which the chart looks for before it serves groups.
for crd in "$CRDS"/*.storage.k8s.io_*.yaml; do run "$KUBECTL" apply -f "$crd"; done
run "$KUBECTL" wait --for condition=established --timeout=60s crd --all
run "$KUBECTL" -n kube-system apply -f "$SNAP_CONTROLLER"/rbac-snapshot-controller.yaml
# The Deployment is rendered in its final shape before it is created, so its first template is its
# last: one replica on two cores, the image built here (the module's v8.7.0 manifest still names
# v8.6.0, which is neither loaded nor pullable), never pulled, and group snapshots on (said
# explicitly: off by default before v8.7.0, GA and on since). Changed after creation, one write at a time, the rollout once
# stayed on the first ReplicaSet, whose image no node has.
SNAP_DEPLOY=$OUT/snapshot-controller.yaml
snap_container=/spec/template/spec/containers/0
snap_patch='[{"op": "replace", "path": "/spec/replicas", "value": 1}, '\
'{"op": "replace", "path": "'$snap_container'/image", "value": "registry.k8s.io/sig-storage/snapshot-controller:v8.7.0"}, '\
'{"op": "add", "path": "'$snap_container'/imagePullPolicy", "value": "IfNotPresent"}, '\
'{"op": "add", "path": "'$snap_container'/args/-", "value": "--feature-gates=CSIVolumeGroupSnapshot=true"}]'
printf '+ %s > %s\n' "$KUBECTL patch --local -f $SNAP_CONTROLLER/setup-snapshot-controller.yaml --type=json -p '$snap_patch' -o yaml" "$SNAP_DEPLOY"
[ "$DRY_RUN" = 1 ] || "$KUBECTL" patch --local -f "$SNAP_CONTROLLER"/setup-snapshot-controller.yaml \
  --type=json -p "$snap_patch" -o yaml >"$SNAP_DEPLOY"
run "$KUBECTL" -n kube-system apply -f "$SNAP_DEPLOY"
run "$KUBECTL" -n kube-system rollout status deploy/snapshot-controller --timeout="$WAIT"

step "the chart, shared shape ($SHARED_DRIVER)"
run "$HELM" upgrade --install csi-hostpath charts/csi-hostpath -n csi-hostpath --create-namespace \
  -f "$SUITE/values.yaml" --wait --timeout "$WAIT"
if [ "$LOCAL" = 1 ]; then
  step "the chart, local shape ($LOCAL_DRIVER)"
  run "$HELM" upgrade --install local-hostpath charts/csi-hostpath -n local-hostpath \
    --create-namespace -f "$SUITE/values-local.yaml" --wait --timeout "$WAIT"
fi
step "every node's CSINode lists the drivers"
want=$SHARED_DRIVER
[ "$LOCAL" = 1 ] && want="$want $LOCAL_DRIVER"
if [ "$DRY_RUN" = 0 ]; then
  for _ in $(seq 120); do
    missing=0
    for node in $("$KUBECTL" get nodes -o name); do
      got=$("$KUBECTL" get csinode "${node#node/}" -o jsonpath='{.spec.drivers[*].name}' 2>/dev/null) || got=
      for d in $want; do [[ " $got " == *" $d "* ]] || missing=1; done
    done
    [ "$missing" = 0 ] && break
    sleep 1
  done
  [ "$missing" = 0 ] || { echo "k8s-e2e: a CSINode lacks $want" >&2; "$KUBECTL" get csinode -o yaml >&2; exit 1; }
fi

if [ "$BENCH" = 1 ]; then
  step "in-cluster latency: $OUT/latency.json"
  run "$PY" -m bench.cluster_latency --kubeconfig "$KUBECONFIG" --rounds "${K8S_BENCH_ROUNDS:-1}" \
    --out "$OUT/latency.json"
  exit 0
fi

step "e2e.test: ${focus[*]} --skip=$SKIP, $PROCS processes, timeout $TIMEOUT"
rc=0
echo "ginkgo's output: $OUT/ginkgo.log"
run "$GINKGO" --procs="$PROCS" --timeout="$TIMEOUT" --no-color --silence-skips \
  --output-dir="$OUT" --junit-report=junit.xml --json-report=report.json \
  "${focus[@]}" --skip="$SKIP" "$E2E_TEST" -- \
  -kubeconfig="$KUBECONFIG" -repo-root="$repo" -report-dir="$OUT/artifacts" \
  "${drivers[@]}" >"$OUT/ginkgo.log" 2>&1 || rc=$?
[ "$DRY_RUN" = 1 ] || tail -n 40 "$OUT/ginkgo.log"

step "summary: $OUT/summary.md"
run "$PY" -m tests.k8s.storage_e2e.summary "$OUT/report.json" "${left_out[@]}" \
  --out "$OUT/summary.md" --json "$OUT/summary.json"
[ "$DRY_RUN" = 1 ] || cat "$OUT/summary.md"
exit "$rc"
