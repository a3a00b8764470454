#!/usr/bin/env bash
# Render the cluster's configuration templates (tools/cluster/templates/) for every node.
#
#   tools/cluster/render.sh DIR   write DIR/config/kube-scheduler.yaml and, for each node,
#                                 DIR/nodes/NAME/{containerd.toml,kubelet.yaml,kube-proxy.yaml,
#                                 10-csi-hostpath.conflist}; the files name DIR/pki for the
#                                 certificates (tools/cluster/pki.sh DIR/pki makes them)
#   tools/cluster/render.sh --help
#
# up.sh renders into .run/cluster (.run/NAME); the settings come from lib.sh and the environment
# (CLUSTER_NAME among them). Needs no root and touches nothing else, so the fast tests render and
# read the same files.
set -euo pipefail
# shellcheck source=tools/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
  -h | --help) usage "$0"; exit 0 ;;
  "") usage "$0" >&2; exit 2 ;;
esac
out=$1
templates=$CLUSTER_TOOLS/templates
export PKI=$out/pki CLUSTER_POD_CIDR CLUSTER_SERVICE_CIDR CLUSTER_SERVICE_IP CLUSTER_PAUSE_IMAGE \
  CLUSTER_KUBELET_PORT CLUSTER_KUBELET_HEALTHZ_PORT CLUSTER_PROXY_HEALTHZ_PORT CLUSTER_PROXY_METRICS_PORT
export CLUSTER_NODE_CIDR=$CLUSTER_NET_PREFIX.0/24 CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}
RUNC=$(cluster_bin runc 2>/dev/null || echo /usr/sbin/runc)
export RUNC
render "$templates/kube-scheduler.yaml" "$out/config/kube-scheduler.yaml"
for ((i = 1; i <= CLUSTER_NODES; i++)); do
  NODE_NAME=$(node_name "$i") NODE_IP=$(node_ip "$i") NODE_CGROUP=$(node_cgroup "$i")
  NODE_POD_CIDR=$(node_pod_cidr "$i") NODE_POD_GATEWAY=$(node_pod_gateway "$i")
  NODE_CONF=$out/nodes/$NODE_NAME
  export NODE_NAME NODE_IP NODE_CGROUP NODE_POD_CIDR NODE_POD_GATEWAY NODE_CONF
  render "$templates/containerd.toml" "$NODE_CONF/containerd.toml"
  render "$templates/kubelet.yaml" "$NODE_CONF/kubelet.yaml"
  render "$templates/kube-proxy.yaml" "$NODE_CONF/kube-proxy.yaml"
  render "$templates/cni.conflist" "$NODE_CONF/10-csi-hostpath.conflist"
done
