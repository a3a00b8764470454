#!/usr/bin/env bash
# One node of the cluster from binaries, made like a kind node: its own network, mount, PID, UTS
# and IPC namespaces, its own containerd, kubelet and kube-proxy.
#
#   tools/cluster/node.sh create NODE           namespaces, veth, mounts and the node's init
#   tools/cluster/node.sh start NODE COMPONENT  start containerd or the kubelet (and wait for
#                                               it to answer), or kube-proxy, in it
#   tools/cluster/node.sh stop NODE COMPONENT   end that component (SIGTERM, then SIGKILL)
#   tools/cluster/node.sh down NODE             the node is gone, as `docker stop` of a kind node:
#                                               every process of it killed, its mounts and /run
#                                               with its mount namespace (loop devices, the
#                                               kernel's, stay attached); disk and network stay
#   tools/cluster/node.sh up NODE               (back) up: create, containerd, kubelet, kube-proxy
#   tools/cluster/node.sh exec NODE -- CMD...   run CMD inside the node (as `docker exec` would)
#   tools/cluster/node.sh pid NODE              the host PID of the node's init
#   tools/cluster/node.sh list                  the node names
#   tools/cluster/node.sh --help
#
# NODE is a node name (csi-hostpath-worker, csi-hostpath-worker2, ...; NAME-worker, ... of the
# cluster CLUSTER_NAME=NAME) or its index (1, 2, ...).
# Inside the node, these host directories of its own are bind-mounted over the usual paths:
# /var/lib/kubelet (rshared), /var/lib/containerd, /etc/cni/net.d, /var/log and
# /var/lib/csi-hostpath (whose controller/ is the same host directory on every node, pool/ too
# unless CLUSTER_POOL=local, and node/ the node's own); /etc/resolv.conf is the node's own and
# /run a tmpfs of its own. Mounts made inside one node are seen by no other node nor the host.
set -euo pipefail
# shellcheck source=tools/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_settings
CLUSTER_PAUSE_BIN=${CLUSTER_PAUSE_BIN:-$(bash "$CLUSTER_TOOLS/pause.sh" path bin)}


# The paths each node sees at their usual place, and where they come from on the host.
NODE_BINDS="kubelet:/var/lib/kubelet containerd:/var/lib/containerd cni:/etc/cni/net.d varlog:/var/log csi-hostpath:/var/lib/csi-hostpath"

pidfile() { echo "$CLUSTER_RUN/pids/$1.pid"; }
init_pid() {
  local f
  f=$(pidfile "$1.init")
  if [ ! -f "$f" ] || ! running "$(cat "$f")"; then die "node $1 is not running (no init at $f)"; fi
  cat "$f"
}

# in_node NAME CMD...: run CMD in every namespace of the node (its PID namespace included).
in_node() {
  local name=$1
  shift
  nsenter --target "$(init_pid "$name")" --mount --net --pid --uts --ipc -- "$@"
}

# Inside the node's fresh mount namespace, before anything runs there: drop the copies of the
# host's other mounts (another program's loop-device mount, copied here, would stay busy for as
# long as the node lives), then mount the node's own directories.
setup_mounts() {
  local i=$1 dir target src keep
  dir=$(node_dir "$i")
  findmnt -rn -o TARGET | sort -r | while read -r target; do
    target=$(printf '%b' "$target")
    keep=0
    case "$target" in
      / | /proc | /proc/* | /sys | /sys/* | /dev | /dev/*) keep=1 ;;
    esac
    [ "$keep" = 1 ] || umount -l "$target" 2>/dev/null || true
  done
  # The node's own sysfs (its network devices), with the host's cgroup hierarchies kept.
  mount --rbind /sys/fs/cgroup "$dir/mnt/cgroup"
  mount -t sysfs sysfs /sys
  mount --move "$dir/mnt/cgroup" /sys/fs/cgroup
  mount -t tmpfs -o mode=0755,size=256m tmpfs /run
  for pair in $NODE_BINDS; do
    src=${pair%%:*}
    target=${pair#*:}
    mount --bind "$dir/$src" "$target"
  done
  # The node plugin mounts the kubelet directory with Bidirectional propagation.
  mount --make-rshared /var/lib/kubelet
  case "$CLUSTER_POOL" in
    shared) mount --bind "$CLUSTER_ROOT/shared/pool" /var/lib/csi-hostpath/pool ;;
    local) mount --bind "$dir/pool" /var/lib/csi-hostpath/pool ;;
    *) die "CLUSTER_POOL is '$CLUSTER_POOL': shared or local" ;;
  esac
  mount --bind "$CLUSTER_ROOT/shared/controller" /var/lib/csi-hostpath/controller
  mount --bind "$CLUSTER_RUN/nodes/$(node_name "$i")/resolv.conf" /etc/resolv.conf
}

init_ready() { [ "$(readlink "/proc/$1/exe")" = "$CLUSTER_PAUSE_BIN" ]; }

create() {
  local i=$1 name dir ip veth j f
  name=$(node_name "$i")
  dir=$(node_dir "$i")
  ip=$(node_ip "$i")
  veth=$(node_veth "$i")
  mkdir -p "$dir/ns" "$dir/mnt/cgroup" "$dir/pool" "$dir/csi-hostpath/pool" "$dir/csi-hostpath/controller" \
    "$dir/csi-hostpath/node" "$CLUSTER_RUN/pids" "$CLUSTER_RUN/logs" "$CLUSTER_RUN/nodes/$name"
  for pair in $NODE_BINDS; do mkdir -p "$dir/${pair%%:*}"; done
  # The node's own resolv.conf, over /etc/resolv.conf inside it: the host's resolvers are not the
  # cluster's, and containerd copies this file into every pod.
  echo "# $CLUSTER_TAG: no DNS" >"$CLUSTER_RUN/nodes/$name/resolv.conf"

  # Both namespaces are pinned by a bind mount under the cluster's root, so they outlive any
  # process and down.sh finds them. The mount namespace is made inside the network namespace:
  # its sysfs then shows the node's own network devices.
  for f in "$dir/ns/mnt" "$dir/ns/net"; do [ -e "$f" ] || touch "$f"; done
  if ! findmnt -rn "$dir/ns/net" >/dev/null; then
    unshare --net="$dir/ns/net" -- true
  fi
  if ! findmnt -rn "$dir/ns/mnt" >/dev/null; then
    nsenter --net="$dir/ns/net" -- \
      unshare --mount="$dir/ns/mnt" --propagation private -- bash "$0" _setup-mounts "$i"
  fi

  # The node's end of the veth is its eth0; the host's end joins the cluster's bridge.
  if ! ip link show "$veth" >/dev/null 2>&1; then
    nsenter --net="$dir/ns/net" -- ip link add eth0 type veth peer name "$veth" netns "$$"
  fi
  ip link set "$veth" master "$CLUSTER_BRIDGE" up
  nsenter --net="$dir/ns/net" -- bash -euo pipefail -c "
    ip link set lo up
    ip addr replace $ip/24 dev eth0
    ip link set eth0 up
    # No default route: the node reaches its bridge's network, the other nodes' pods (through
    # their node), and the service range (through the host, where kube-proxy's DNAT is undone
    # towards the API server) and nothing else.
    ip route replace $CLUSTER_SERVICE_CIDR via $CLUSTER_HOST_IP dev eth0
    sysctl -qw net.ipv4.ip_forward=1
    if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
      sysctl -qw net.bridge.bridge-nf-call-iptables=1
    fi
  "
  for ((j = 1; j <= CLUSTER_NODES; j++)); do
    [ "$j" = "$i" ] && continue
    nsenter --net="$dir/ns/net" -- ip route replace "$(node_pod_cidr "$j")" via "$(node_ip "$j")" dev eth0
  done
  # The host answers pods of this node (the API server's replies) through it.
  ip route replace "$(node_pod_cidr "$i")" via "$ip" dev "$CLUSTER_BRIDGE"

  make_cgroup "$(node_cgroup "$i")"
  if [ -f "$(pidfile "$name.init")" ] && running "$(cat "$(pidfile "$name.init")")"; then
    return 0
  fi
  # The node's init: PID 1 of its PID namespace, reaping what containerd's shims leave; when it
  # ends, the kernel ends every process of the node.
  local starter init
  starter=$(
    join_cgroup "$(node_cgroup "$i")"
    # shellcheck disable=SC2016 # expanded by the node's bash, from its arguments
    setsid nsenter --mount="$dir/ns/mnt" --net="$dir/ns/net" -- \
      unshare --pid --uts --ipc --fork --kill-child -- \
      bash -c 'mount -t proc proc /proc && hostname "$1" && exec "$2"' node-init "$name" \
      "$CLUSTER_PAUSE_BIN" </dev/null >>"$CLUSTER_RUN/logs/$name.init.log" 2>&1 &
    echo $!
  )
  init=$(child_of "$starter") || { tail_log "$name.init"; die "node $name: its init did not start"; }
  echo "$init" >"$(pidfile "$name.init")"
  # Once it runs the pause program, the node's /proc is mounted: every later nsenter sees the
  # node's PID namespace through it.
  wait_for "node $name init" 10 "$name.init" init_ready "$init"
}

start() {
  local i=$1 component=$2 name conf pid starter started bin args=()
  name=$(node_name "$i")
  conf=$CLUSTER_RUN/nodes/$name
  case "$component" in
    containerd)
      bin=$(cluster_bin containerd)
      args=(--config "$conf/containerd.toml")
      ;;
    kubelet)
      bin=$(cluster_bin kubelet)
      args=(--config "$conf/kubelet.yaml" --kubeconfig "$CLUSTER_RUN/pki/kubelet-$name.kubeconfig"
        --hostname-override "$name" --node-ip "$(node_ip "$i")" --v 2)
      ;;
    kube-proxy)
      bin=$(cluster_bin kube-proxy)
      args=(--config "$conf/kube-proxy.yaml" --v 2)
      ;;
    *) die "unknown component '$component' (containerd, kubelet, kube-proxy)" ;;
  esac
  pid=$(pidfile "$name.$component")
  if [ -f "$pid" ] && running "$(cat "$pid")"; then return 0; fi
  starter=$(
    join_cgroup "$(node_cgroup "$i")"
    setsid nsenter --target "$(init_pid "$name")" --mount --net --pid --uts --ipc -- \
      "$bin" "${args[@]}" </dev/null >>"$CLUSTER_RUN/logs/$name.$component.log" 2>&1 &
    echo $!
  )
  started=$(child_of "$starter") || { tail_log "$name.$component"; die "node $name: $component did not start"; }
  echo "$started" >"$pid"
  case "$component" in
    containerd)
      wait_for "$name containerd" "$CLUSTER_TIMEOUT" "$name.containerd" \
        in_node "$name" ctr --address /run/containerd/containerd.sock version
      ;;
    kubelet)
      wait_for "$name kubelet health" "$CLUSTER_TIMEOUT" "$name.kubelet" \
        in_node "$name" curl -fsS --max-time 2 "http://127.0.0.1:$CLUSTER_KUBELET_HEALTHZ_PORT/healthz"
      ;;
  esac
}

node_processes() {
  local mnt
  for mnt in $(cgroup_mounts); do
    [ -d "$mnt$1" ] && find "$mnt$1" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -un
}

down() {
  local i=$1 name dir pid
  name=$(node_name "$i")
  dir=$(node_dir "$i")
  for component in kubelet kube-proxy containerd init; do
    pid=$(cat "$(pidfile "$name.$component")" 2>/dev/null || true)
    [ -n "$pid" ] && grep -q ":$(node_cgroup "$i")\(/\|$\)" "/proc/$pid/cgroup" 2>/dev/null \
      && kill -KILL "$pid" 2>/dev/null
    rm -f "$(pidfile "$name.$component")"
  done
  # The init was PID 1 of the node's PID namespace: the kernel kills the rest of the node.
  for _ in $(seq 100); do
    pid=$(node_processes "$(node_cgroup "$i")")
    [ -z "$pid" ] && break
    # shellcheck disable=SC2086 # one PID a word
    kill -KILL $pid 2>/dev/null || true
    sleep 0.1
  done
  [ -z "$(node_processes "$(node_cgroup "$i")")" ] || die "node $name: processes that do not die: $pid"
  if findmnt -rn "$dir/ns/mnt" >/dev/null; then umount "$dir/ns/mnt"; fi
}

up() {
  local i=$1
  create "$i"
  start "$i" containerd
  start "$i" kubelet
  start "$i" kube-proxy
}

stop() {
  local name=$1 component=$2 pid f i
  f=$(pidfile "$name.$component")
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 100); do
    running "$pid" || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$f"
}

case "${1:-}" in
  -h | --help) usage "$0"; exit 0 ;;
  create) [ $# -eq 2 ] || { usage "$0" >&2; exit 2; }; create "$(node_index "$2")" ;;
  _setup-mounts) setup_mounts "$2" ;;
  start) [ $# -eq 3 ] || { usage "$0" >&2; exit 2; }; start "$(node_index "$2")" "$3" ;;
  stop) [ $# -eq 3 ] || { usage "$0" >&2; exit 2; }; stop "$(node_name "$(node_index "$2")")" "$3" ;;
  exec)
    [ $# -ge 4 ] && [ "$3" = -- ] || { usage "$0" >&2; exit 2; }
    name=$(node_name "$(node_index "$2")")
    shift 3
    in_node "$name" "$@"
    ;;
  down) [ $# -eq 2 ] || { usage "$0" >&2; exit 2; }; down "$(node_index "$2")" ;;
  up) [ $# -eq 2 ] || { usage "$0" >&2; exit 2; }; up "$(node_index "$2")" ;;
  pid) [ $# -eq 2 ] || { usage "$0" >&2; exit 2; }; init_pid "$(node_name "$(node_index "$2")")" ;;
  list) for ((i = 1; i <= CLUSTER_NODES; i++)); do node_name "$i"; done ;;
  *) usage "$0" >&2; exit 2 ;;
esac
