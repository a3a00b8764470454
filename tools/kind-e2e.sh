#!/usr/bin/env bash
# make kind-e2e: bring up kind, build and load the image, deploy the chart, run the experiments of
# docs/kind.md and check each outcome with kubectl. Needs docker, kind, kubectl and helm, a
# cgroup v2 host and free loop devices; it can't run where there is no container engine.
#
#   tools/kind-e2e.sh [--dry-run] [--keep] [--no-snapshots] [--no-node-loss]
#
# --dry-run prints every step (commands and the checks on their output) and runs nothing.
# --keep leaves the cluster up at the end (for a look around); by default it is deleted, on
# failure too, unless --keep is given.
# --no-snapshots skips the snapshot CRDs and snapshot-controller; --no-node-loss skips
# experiment 5, which stops a kind node for good.
# The settings come from the environment, with mk/deploy.mk's defaults (make passes them).
set -euo pipefail

DOCKER=${DOCKER:-docker}
KIND=${KIND:-kind}
KUBECTL=${KUBECTL:-kubectl}
HELM=${HELM:-helm}
KIND_CLUSTER=${KIND_CLUSTER:-csi-hostpath}
KIND_CONFIG=${KIND_CONFIG:-examples/kind-config.yaml}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.35.1}
KIND_SHARED_DIR=${KIND_SHARED_DIR:-/var/lib/csi-hostpath-kind}
IMAGE=${IMAGE:-csi-hostpath}
IMAGE_TAG=${IMAGE_TAG:-0.1.0}
IMAGE_ARCHIVE=${IMAGE_ARCHIVE:-.run/$IMAGE-$IMAGE_TAG.tar}
CHART_DIR=${CHART_DIR:-charts/csi-hostpath}
RELEASE=${RELEASE:-csi-hostpath}
NAMESPACE=${NAMESPACE:-csi-hostpath}
# The external-snapshotter release whose sidecar the chart pins (docs/kind.md, "Snapshots").
SNAPSHOTTER_REF=${SNAPSHOTTER_REF:-v8.6.0}
SNAP_REPO=https://github.com/kubernetes-csi/external-snapshotter
DEMO=csi-demo
WAIT=180s

DRY_RUN=0 KEEP=0 SNAPSHOTS=1 NODE_LOSS=1
for arg in "$@"; do
  case $arg in
    --dry-run) DRY_RUN=1 ;;
    --keep) KEEP=1 ;;
    --no-snapshots) SNAPSHOTS=0 ;;
    --no-node-loss) NODE_LOSS=0 ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "kind-e2e: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
# Root-owned host directories and losetup need root; sudo only when not already root.
SUDO=()
[ "$(id -u)" = 0 ] || SUDO=(sudo)

step() { printf '\n=== %s\n' "$*"; }

# run CMD...: print it, then run it (unless --dry-run).
run() {
  printf '+ %s\n' "$*"
  [ "$DRY_RUN" = 1 ] || "$@"
}

# pipeline 'A | B': a step that needs a shell pipe, printed as it is written.
pipeline() {
  printf '+ %s\n' "$1"
  [ "$DRY_RUN" = 1 ] || bash -o pipefail -c "$1"
}

# expect WHAT WANTED CMD...: run CMD and check that its output (trimmed) matches the extended
# regex WANTED. A miss stops the run, naming the experiment, the output and the expectation.
expect() {
  local what=$1 wanted=$2 got
  shift 2
  printf '? %s: %s  =~  /%s/\n' "$what" "$*" "$wanted"
  [ "$DRY_RUN" = 1 ] && return 0
  got=$("$@" 2>&1 | tr -s '[:space:]' ' ' | sed 's/^ //; s/ $//') || true
  if [[ $got =~ $wanted ]]; then
    printf '  ok: %s\n' "$got"
  else
    printf 'FAILED: %s\n  wanted /%s/\n  got    %s\n' "$what" "$wanted" "$got" >&2
    exit 1
  fi
}

ledger() {
  "$KUBECTL" -n "$NAMESPACE" exec "$RELEASE-controller-0" -c csi-hostpath -- \
    csi-hostpath ledger "$@" \
    --state-dir /var/lib/csi-hostpath/controller --pool-dir /var/lib/csi-hostpath/pool
}

cleanup() {
  local rc=$?
  if [ "$KEEP" = 1 ]; then
    echo "kind-e2e: the cluster $KIND_CLUSTER stays up (--keep); make kind-down removes it"
  elif [ "$DRY_RUN" = 0 ]; then
    "$KIND" delete cluster --name "$KIND_CLUSTER" || true
  fi
  if [ "$DRY_RUN" = 1 ]; then
    echo "kind-e2e: dry run; nothing was run"
  elif [ "$rc" = 0 ]; then
    echo "kind-e2e: every check passed"
  else
    echo "kind-e2e: FAILED (exit $rc)" >&2
  fi
}

step "0. preflight: tools, cgroup v2, loop devices"
echo "# ledger ARGS below runs: $KUBECTL -n $NAMESPACE exec $RELEASE-controller-0 -c csi-hostpath --" \
  "csi-hostpath ledger ARGS --state-dir /var/lib/csi-hostpath/controller --pool-dir /var/lib/csi-hostpath/pool"
for tool in "$DOCKER" "$KIND" "$KUBECTL" "$HELM"; do
  if [ "$DRY_RUN" = 0 ] && ! command -v "$tool" >/dev/null 2>&1; then
    echo "kind-e2e: $tool not found on PATH (docs/kind.md, 'What you need')" >&2
    exit 1
  fi
done
# A 1.35 kubelet refuses a cgroup v1 host: the nodes would never get Ready.
expect "the host runs cgroup v2" '^cgroup2fs$' stat -fc %T /sys/fs/cgroup
expect "a free loop device" '^/dev/loop[0-9]+$' "${SUDO[@]}" losetup -f
trap cleanup EXIT

step "1. the cluster (make kind-up)"
run "${SUDO[@]}" mkdir -p "$KIND_SHARED_DIR/pool" "$KIND_SHARED_DIR/controller"
run "$KIND" create cluster --name "$KIND_CLUSTER" --config "$KIND_CONFIG" \
  --image "$KIND_NODE_IMAGE" --wait "$WAIT"

step "2. the image, loaded as an archive (kind#3795)"
run "$DOCKER" build --build-arg "VERSION=$IMAGE_TAG" -t "$IMAGE:$IMAGE_TAG" .
run mkdir -p "$(dirname "$IMAGE_ARCHIVE")"
run "$DOCKER" save -o "$IMAGE_ARCHIVE" "$IMAGE:$IMAGE_TAG"
run "$KIND" load image-archive "$IMAGE_ARCHIVE" --name "$KIND_CLUSTER"

if [ "$SNAPSHOTS" = 1 ]; then
  step "3. snapshot CRDs and snapshot-controller ($SNAPSHOTTER_REF)"
  pipeline "$KUBECTL kustomize '$SNAP_REPO/client/config/crd?ref=$SNAPSHOTTER_REF' | $KUBECTL create -f -"
  pipeline "$KUBECTL -n kube-system kustomize '$SNAP_REPO/deploy/kubernetes/snapshot-controller?ref=$SNAPSHOTTER_REF' | $KUBECTL create -f -"
  run "$KUBECTL" -n kube-system rollout status deploy/snapshot-controller --timeout="$WAIT"
  expect "the snapshot API is served" 'snapshot.storage.k8s.io/v1' "$KUBECTL" api-versions
fi

step "4. the chart (make kind-deploy)"
# The registrar and the liveness probe from the driver's image: kubernetes-csi's can't be made here.
run "$HELM" upgrade --install "$RELEASE" "$CHART_DIR" --namespace "$NAMESPACE" \
  --create-namespace --set driver.image.repository="$IMAGE" \
  --set-string driver.image.tag="$IMAGE_TAG" --wait --timeout 5m \
  --set sidecars.nodeDriverRegistrar.implementation=csi-hostpath --set sidecars.livenessProbe.implementation=csi-hostpath
run "$KUBECTL" -n "$NAMESPACE" rollout status statefulset/"$RELEASE-controller" --timeout="$WAIT"
run "$KUBECTL" -n "$NAMESPACE" rollout status daemonset/"$RELEASE-node" --timeout="$WAIT"
expect "both workers registered the driver" \
  "$KIND_CLUSTER-worker: loop.hostpath.csi.dev.*$KIND_CLUSTER-worker2: loop.hostpath.csi.dev" \
  "$KUBECTL" get csinode -o jsonpath='{range .items[*]}{.metadata.name}: {.spec.drivers[*].name}{"\n"}{end}'
if [ "$SNAPSHOTS" = 1 ]; then
  expect "the VolumeSnapshotClass exists" '^csi-hostpath-snapclass$' \
    "$KUBECTL" get volumesnapshotclass csi-hostpath-snapclass -o jsonpath='{.metadata.name}'
fi
run "$KUBECTL" apply -f examples/namespace.yaml

step "experiment 1: two pods, one RWO volume, one node"
run "$KUBECTL" apply -f examples/rwo-same-node.yaml
run "$KUBECTL" -n "$DEMO" wait --for=condition=Ready pod/rwo-writer pod/rwo-reader --timeout="$WAIT"
expect "writer and reader share a node" '^(\S+) \1$' \
  "$KUBECTL" -n "$DEMO" get pod rwo-writer rwo-reader -o jsonpath='{.items[*].spec.nodeName}'
expect "the reader reads the writer's file" 'persistent' "$KUBECTL" -n "$DEMO" logs rwo-reader --tail=1
expect "the ledger has one holder" 'SINGLE_NODE_MULTI_WRITER' ledger list
run "$KUBECTL" -n "$DEMO" delete pod rwo-writer --wait=true
expect "the reader still reads it" 'persistent' "$KUBECTL" -n "$DEMO" logs rwo-reader --tail=1

step "experiment 2: ReadWriteOncePod refuses the second pod"
run "$KUBECTL" apply -f examples/rwop.yaml
run "$KUBECTL" -n "$DEMO" wait --for=condition=Ready pod/exclusive-one --timeout="$WAIT"
run "$KUBECTL" apply -f examples/rwop-second-pod.yaml
run sleep 20
expect "the second pod is not scheduled" '^Pending False$' \
  "$KUBECTL" -n "$DEMO" get pod exclusive-two -o jsonpath='{.status.phase} {.status.conditions[?(@.type=="PodScheduled")].status}'
run "$KUBECTL" -n "$DEMO" delete pod exclusive-one --wait=true
run "$KUBECTL" -n "$DEMO" wait --for=condition=Ready pod/exclusive-two --timeout="$WAIT"
expect "then it starts and reads the volume" 'only-me' "$KUBECTL" -n "$DEMO" logs exclusive-two

step "experiment 3: WaitForFirstConsumer waits for a pod"
run "$KUBECTL" apply -f examples/wffc.yaml
run sleep 5
expect "the claim waits" '^Pending$' "$KUBECTL" -n "$DEMO" get pvc late -o jsonpath='{.status.phase}'
run "$KUBECTL" apply -f examples/wffc-pod.yaml
run "$KUBECTL" -n "$DEMO" wait --for=condition=Ready pod/late-consumer --timeout="$WAIT"
expect "the claim is bound" '^Bound$' "$KUBECTL" -n "$DEMO" get pvc late -o jsonpath='{.status.phase}'
expect "for the node the pod runs on" '^(\S+) \1$' \
  "$KUBECTL" -n "$DEMO" get pvc/late pod/late-consumer \
  -o jsonpath='{.items[0].metadata.annotations.volume\.kubernetes\.io/selected-node} {.items[1].spec.nodeName}'

step "experiment 4: the pod moves to another node, the volume follows"
run "$KUBECTL" apply -f examples/move-first-node.yaml
run "$KUBECTL" -n "$DEMO" wait --for=condition=Ready pod/mover-1 --timeout="$WAIT"
expect "held by the first worker" "$KIND_CLUSTER-worker( |$)" ledger list
run "$KUBECTL" -n "$DEMO" delete pod mover-1 --wait=true
pipeline "for i in \$(seq 60); do $KUBECTL get volumeattachment -o name | grep -q . || exit 0; sleep 2; done; exit 1"
run "$KUBECTL" apply -f examples/move-second-node.yaml
run "$KUBECTL" -n "$DEMO" wait --for=condition=Ready pod/mover-2 --timeout="$WAIT"
expect "the data moved with it" 'written-on-worker' "$KUBECTL" -n "$DEMO" logs mover-2
expect "now held by the second worker" "$KIND_CLUSTER-worker2" ledger list

if [ "$NODE_LOSS" = 1 ]; then
  step "experiment 5: a node that is gone (stopped with docker stop)"
  run "$KUBECTL" apply -f examples/node-gone.yaml
  run "$KUBECTL" -n "$DEMO" wait --for=condition=Ready pod/doomed --timeout="$WAIT"
  GONE=$KIND_CLUSTER-worker2
  [ "$DRY_RUN" = 1 ] || GONE=$(kd get pod doomed -o jsonpath='{.spec.nodeName}')
  run "$DOCKER" stop "$GONE"
  run "$KUBECTL" wait --for=condition=Ready=false node/"$GONE" --timeout="$WAIT"
  run "$KUBECTL" taint node "$GONE" node.kubernetes.io/out-of-service=nodeshutdown:NoExecute
  run "$KUBECTL" -n "$DEMO" wait --for=delete pod/doomed --timeout="$WAIT"
  run "$KUBECTL" apply -f examples/node-gone-rescue.yaml
  run "$KUBECTL" -n "$DEMO" wait --for=condition=Ready pod/rescue --timeout="$WAIT"
  expect "the rescue reads what doomed wrote" '[0-9]{2}:[0-9]{2}:[0-9]{2}' "$KUBECTL" -n "$DEMO" logs rescue
  # No NodeUnstage came before the attacher's ControllerUnpublishVolume: Kubernetes'
  # force-detach, which the ledger records as a revocation (docs/kind.md, experiment 5).
  expect "the audit records the detach of the gone node as a revocation" 'revoke' ledger audit
fi

step "cleaning up the experiments"
run "$KUBECTL" delete namespace "$DEMO" --wait=true --timeout=5m
