# shellcheck shell=bash disable=SC2034 # the settings are read by the scripts that source this
# What tools/kind/up.sh, down.sh and tools/kind-e2e.sh share: the settings and small helpers.
# Sourced, never run; $here and $repo are set by the caller.

KIND_CLUSTER=${KIND_CLUSTER:-csi-hostpath}
KIND_CONFIG=${KIND_CONFIG:-$repo/examples/kind-config.yaml}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
KIND_SHARED_DIR=${KIND_SHARED_DIR:-/var/lib/csi-hostpath-kind}
KIND_IMAGES=${KIND_IMAGES:-1}
# The host directory the configurations in examples/ name (kind expands no variables).
config_shared=/var/lib/csi-hostpath-kind
# The cluster's own files in the checkout: its kubeconfig and what kind-down must know.
state=$repo/.run/kind/$KIND_CLUSTER
kubeconfig=$state/kubeconfig

# kind_config: the configuration kind is given: KIND_CONFIG with KIND_SHARED_DIR in place of the
# configurations' host directory and, on Kubernetes 1.34 (KUBERNETES_MINOR, tools/cluster/pins.sh),
# the gate MutableCSINodeAllocatableCount on: beta but off in 1.34 (on from 1.35), and without it
# the apiserver drops the CSIDriver's nodeAllocatableUpdatePeriodSeconds and no kubelet updates
# CSINode's count (experiment n). A configuration with featureGates of its own is left as it is.
kind_config() {
  sed "s#$config_shared/#$KIND_SHARED_DIR/#g" "$KIND_CONFIG"
  if [ "${KUBERNETES_MINOR:-}" = 1.34 ] && ! grep -q '^featureGates:' "$KIND_CONFIG"; then
    printf 'featureGates:\n  MutableCSINodeAllocatableCount: true\n'
  fi
}

log() { printf '%s kind: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'kind: %s\n' "$*" >&2; exit 1; }

# kind_bin: the pinned kind (tools/go-tools.txt), installed when missing, or $KIND.
kind_bin() {
  if [ -n "${KIND:-}" ] && [ "$KIND" != kind ]; then echo "$KIND"; return 0; fi
  local path
  path=$(bash "$repo/tools/go-tools.sh" path kind)
  [ -x "$path" ] || PATH=$PATH:/usr/local/go/bin bash "$repo/tools/go-tools.sh" install kind >&2
  echo "$path"
}

# tagged_loops NODE...: the loop devices the driver attached for these nodes (tools/kind/loops.py).
tagged_loops() {
  local py=${PY:-$repo/.venv/bin/python}
  [ -x "$py" ] || py=python3
  "$py" "$repo/tools/kind/loops.py" "$@"
}

# cluster_nodes: the cluster's node names, from kind while it is up, else the names the
# configurations in examples/ give (one control plane, two workers).
cluster_nodes() {
  local names
  names=$("$(kind_bin)" get nodes --name "$KIND_CLUSTER" 2>/dev/null) || names=
  [ -n "$names" ] || names="$KIND_CLUSTER-control-plane $KIND_CLUSTER-worker $KIND_CLUSTER-worker2"
  echo "$names"
}
