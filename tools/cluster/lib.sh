# shellcheck shell=bash disable=SC2034 # the settings are read by the scripts that source this
# What up.sh, down.sh, node.sh and pki.sh share: the cluster's names, addresses and directories,
# where its binaries are, and small helpers. Sourced, never run.
#
# Every setting can be overridden from the environment; down.sh reads the values up.sh used from
# $CLUSTER_STATE/settings.env, so a teardown never depends on the caller's environment.

CLUSTER_TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER_REPO=$(cd "$CLUSTER_TOOLS/../.." && pwd)

# Every host directory, namespace pin and mount of the cluster lives under this root.
CLUSTER_ROOT=${CLUSTER_ROOT:-/var/lib/csi-hostpath-cluster}
# The checkout's own files: kubeconfig, certificates, rendered configs, logs, PIDs.
CLUSTER_RUN=${CLUSTER_RUN:-$CLUSTER_REPO/.run/cluster}
CLUSTER_STATE=$CLUSTER_ROOT/state
CLUSTER_NODES=${CLUSTER_NODES:-2}
CLUSTER_NAME=${CLUSTER_NAME:-csi-hostpath}
# The tag every iptables rule, cgroup and link of the cluster carries, so down.sh finds them.
CLUSTER_TAG=csi-hostpath-cluster
CLUSTER_CACHE=${CSI_HOSTPATH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-hostpath}

# The cluster's own L2 network: a bridge on the host, one veth per node. Nothing of it is routed
# to or from any other interface of the host.
CLUSTER_BRIDGE=${CLUSTER_BRIDGE:-chp-br0}
CLUSTER_NET_PREFIX=${CLUSTER_NET_PREFIX:-10.250.0}
CLUSTER_HOST_IP=$CLUSTER_NET_PREFIX.1
# Pods get 10.244.<node index>.0/24; services 10.96.0.0/12, the API server's at 10.96.0.1.
CLUSTER_POD_CIDR=${CLUSTER_POD_CIDR:-10.244.0.0/16}
CLUSTER_POD_PREFIX=${CLUSTER_POD_PREFIX:-10.244}
CLUSTER_SERVICE_CIDR=${CLUSTER_SERVICE_CIDR:-10.96.0.0/12}
CLUSTER_SERVICE_IP=${CLUSTER_SERVICE_IP:-10.96.0.1}
CLUSTER_API_PORT=${CLUSTER_API_PORT:-6443}
# etcd listens on the host's loopback only, away from the default ports other tools may use.
CLUSTER_ETCD_PORT=${CLUSTER_ETCD_PORT:-12379}
CLUSTER_ETCD_PEER_PORT=${CLUSTER_ETCD_PEER_PORT:-12380}
CLUSTER_K8S_VERSION=${CLUSTER_K8S_VERSION:-v1.35.4}
# The sandbox image: the name and tag the kubelet and the e2e suite use (test/utils/image/manifest.go).
CLUSTER_PAUSE_IMAGE=${CLUSTER_PAUSE_IMAGE:-registry.k8s.io/pause:3.10.1}
CLUSTER_TIMEOUT=${CLUSTER_TIMEOUT:-180}
# What each node sees at /var/lib/csi-hostpath/pool, the chart's default pool.hostPath: one host
# directory for every node (shared, the chart's default shape), or a directory of each node's
# own (local, for pool.scope=local with the chart's other defaults unchanged).
CLUSTER_POOL=${CLUSTER_POOL:-shared}

# The variables settings.env records (down.sh and node.sh read them back).
CLUSTER_SETTINGS="CLUSTER_ROOT CLUSTER_RUN CLUSTER_NODES CLUSTER_NAME CLUSTER_BRIDGE
  CLUSTER_NET_PREFIX CLUSTER_POD_CIDR CLUSTER_POD_PREFIX CLUSTER_SERVICE_CIDR CLUSTER_SERVICE_IP
  CLUSTER_API_PORT CLUSTER_ETCD_PORT CLUSTER_ETCD_PEER_PORT CLUSTER_PAUSE_IMAGE CLUSTER_POOL"

# usage SCRIPT: the comment block at the top of SCRIPT, its help.
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$1"; }

log() { printf '%s cluster: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'cluster: %s\n' "$*" >&2; exit 1; }

# Node i (1-based) is named like kind's workers, so the examples' node names read the same.
node_name() { if [ "$1" -eq 1 ]; then echo "$CLUSTER_NAME-worker"; else echo "$CLUSTER_NAME-worker$1"; fi; }
node_ip() { echo "$CLUSTER_NET_PREFIX.$((10 + $1))"; }
node_pod_cidr() { echo "$CLUSTER_POD_PREFIX.$1.0/24"; }
node_pod_gateway() { echo "$CLUSTER_POD_PREFIX.$1.1"; }
# The host end of node i's veth (interface names are at most 15 characters).
node_veth() { echo "chp-v$1"; }
node_dir() { echo "$CLUSTER_ROOT/nodes/$(node_name "$1")"; }
node_cgroup() { echo "/$CLUSTER_TAG/$(node_name "$1")"; }
node_index() {
  local i
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    if [ "$(node_name "$i")" = "$1" ] || [ "$i" = "$1" ]; then echo "$i"; return 0; fi
  done
  die "no node '$1' (the nodes are: $(for ((i = 1; i <= CLUSTER_NODES; i++)); do printf '%s ' "$(node_name "$i")"; done))"
}

# cluster_bin NAME: the path of a binary the cluster runs. $CLUSTER_BIN_DIR (a directory holding
# any of them) wins. containerd, ctr and runc are Debian's; every other program is the pinned
# build of tools/cluster/build.sh, in the cache (up.sh builds what is missing).
cluster_bin() {
  local name=$1 path
  if [ -n "${CLUSTER_BIN_DIR:-}" ] && [ -x "$CLUSTER_BIN_DIR/$name" ]; then
    echo "$CLUSTER_BIN_DIR/$name"; return 0
  fi
  case "$name" in
    containerd | ctr | runc)
      command -v "$name" && return 0
      echo "cluster: no '$name' on PATH (apt-get install containerd runc)" >&2
      return 1
      ;;
  esac
  if path=$(bash "$CLUSTER_TOOLS/build.sh" path "$name") && [ -x "$path" ]; then
    echo "$path"; return 0
  fi
  echo "cluster: no '$name' at ${path:-?}: run 'bash tools/cluster/build.sh $name' (or set CLUSTER_BIN_DIR)" >&2
  return 1
}

# render TEMPLATE OUT: substitute the ${VARS} of a template from the environment. Only variables
# the template names are replaced, and an unset one is an error, not an empty string.
render() {
  local template=$1 out=$2 vars v
  # shellcheck disable=SC2016 # the template's literal ${NAME} references
  vars=$(grep -o '\${[A-Z_][A-Z0-9_]*}' "$template" | sort -u | tr -d '${}' || true)
  for v in $vars; do
    [ -n "${!v+x}" ] || die "render $template: \$$v is not set"
    export "${v?}"
  done
  mkdir -p "$(dirname "$out")"
  # shellcheck disable=SC2016,SC2086 # envsubst's list of ${NAME}s, one word a variable
  envsubst "$(printf '${%s} ' $vars)" <"$template" >"$out.tmp"
  mv "$out.tmp" "$out"
}

# running PID: alive and not a zombie (a killed process waits for its parent to reap it).
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# tail_log NAME: the last lines of a component's log, for an error message.
tail_log() {
  local f=$CLUSTER_RUN/logs/$1.log
  if [ -f "$f" ]; then
    printf -- '--- last lines of %s ---\n' "$f" >&2
    tail -n "${2:-25}" "$f" >&2
  else
    printf -- '--- no log at %s ---\n' "$f" >&2
  fi
}

# wait_for WHAT SECONDS COMPONENT CMD...: run CMD every second until it succeeds. On timeout, or
# when COMPONENT's process is gone, print its last log lines and fail.
wait_for() {
  local what=$1 timeout=$2 component=$3 start=$SECONDS pidfile
  shift 3
  pidfile=$CLUSTER_RUN/pids/$component.pid
  until "$@" >/dev/null 2>&1; do
    if [ -f "$pidfile" ] && ! running "$(cat "$pidfile")"; then
      tail_log "$component"
      die "$what: $component (pid $(cat "$pidfile")) exited"
    fi
    if ((SECONDS - start >= timeout)); then
      tail_log "$component"
      die "$what: not done after ${timeout}s"
    fi
    sleep 1
  done
}

# The cgroup v1 hierarchies (and the hybrid host's unified one) the cluster makes directories in.
cgroup_mounts() { findmnt -rn -t cgroup,cgroup2 -o TARGET; }

# join_cgroup CGROUP: move this shell into CGROUP in every hierarchy, so what it starts is there.
join_cgroup() {
  local mnt
  for mnt in $(cgroup_mounts); do
    [ -d "$mnt$1" ] && echo "$BASHPID" >"$mnt$1/cgroup.procs"
  done
}

# make_cgroup CGROUP: the directory in every hierarchy (cpuset's needs its parent's cpus and mems).
make_cgroup() {
  local mnt path part
  for mnt in $(cgroup_mounts); do
    path=$mnt
    for part in ${1//\// }; do
      path=$path/$part
      if [ ! -d "$path" ]; then
        mkdir "$path"
        if [ -f "$path/cpuset.cpus" ]; then
          cat "$(dirname "$path")/cpuset.cpus" >"$path/cpuset.cpus"
          cat "$(dirname "$path")/cpuset.mems" >"$path/cpuset.mems"
        fi
      fi
    done
  done
}

# child_of PID: the first child process of PID (nsenter --pid and unshare --fork run their
# command as a child), waiting a little for it to appear.
child_of() {
  local i c
  for i in $(seq 50); do
    c=$(pgrep -P "$1" | head -n 1 || true)
    if [ -n "$c" ]; then echo "$c"; return 0; fi
    running "$1" || return 1
    sleep 0.1
  done
  return 1
}

# load_settings: read back what up.sh recorded, if a cluster was (half) brought up.
load_settings() {
  if [ -f "$CLUSTER_STATE/settings.env" ]; then
    # shellcheck disable=SC1091
    . "$CLUSTER_STATE/settings.env"
  fi
}
save_settings() {
  local v
  mkdir -p "$CLUSTER_STATE"
  for v in $CLUSTER_SETTINGS; do printf '%s=%q\n' "$v" "${!v}"; done >"$CLUSTER_STATE/settings.env"
}
