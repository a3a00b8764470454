# shellcheck shell=bash disable=SC2034 # the settings are read by the scripts that source this
# What up.sh, down.sh, node.sh and pki.sh share: the cluster's names, addresses and directories,
# where its binaries are, and small helpers. Sourced, never run.
#
# CLUSTER_NAME picks the cluster; every other setting can be overridden from the environment.
# down.sh and node.sh read the values up.sh used from $CLUSTER_STATE/settings.env, so a teardown
# depends on the caller's environment for the name only.

CLUSTER_TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER_REPO=$(cd "$CLUSTER_TOOLS/../.." && pwd)

log() { printf '%s cluster: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'cluster: %s\n' "$*" >&2; exit 1; }

# Clusters run side by side on one machine, each under a name. The default name keeps the paths,
# names, addresses and ports the cluster always had; any other name derives its own from the name
# (directories, links, cgroups, the iptables tag) and from a slot (addresses and ports), the
# lowest no other cluster holds when it comes up. `up.sh --settings` prints them.
CLUSTER_DEFAULT_NAME=csi-hostpath
CLUSTER_NAME=${CLUSTER_NAME:-$CLUSTER_DEFAULT_NAME}
# Where every cluster's root is, so that each finds the others (the tests point it elsewhere).
CLUSTER_BASE=${CLUSTER_BASE:-/var/lib}
# How many clusters may run beside the default one: slots 1 to this, each with its own numbers.
CLUSTER_MAX_SLOT=5
if [ "$CLUSTER_NAME" = "$CLUSTER_DEFAULT_NAME" ]; then
  cluster_root=$CLUSTER_BASE/csi-hostpath-cluster
  cluster_run=$CLUSTER_REPO/.run/cluster
  CLUSTER_TAG=csi-hostpath-cluster
  cluster_bridge=chp-br0
  cluster_veth=chp-v
else
  # The name goes into link names (at most 15 characters: chp-NAME-v9), node names (DNS labels)
  # and .run/NAME, beside the default's .run/cluster and `make run`'s .run/state.
  if ! [[ "$CLUSTER_NAME" =~ ^[a-z][a-z0-9]{0,7}$ ]] || [ "$CLUSTER_NAME" = cluster ] || [ "$CLUSTER_NAME" = state ]; then
    die "CLUSTER_NAME '$CLUSTER_NAME': a lowercase letter and up to 7 more lowercase letters or digits, not 'cluster' or 'state' (unset: the default cluster, $CLUSTER_DEFAULT_NAME)"
  fi
  # Neither the root nor the tag starts with the default's, so no teardown that matches by
  # prefix (an older checkout's down.sh among them) takes another cluster's things for its own.
  cluster_root=$CLUSTER_BASE/chp-cluster-$CLUSTER_NAME
  cluster_run=$CLUSTER_REPO/.run/$CLUSTER_NAME
  CLUSTER_TAG=chp-cluster-$CLUSTER_NAME
  cluster_bridge=chp-$CLUSTER_NAME-br
  cluster_veth=chp-$CLUSTER_NAME-v
fi

# Every host directory, namespace pin and mount of the cluster lives under this root.
CLUSTER_ROOT=${CLUSTER_ROOT:-$cluster_root}
# The checkout's own files: kubeconfig, certificates, rendered configs, logs, PIDs.
CLUSTER_RUN=${CLUSTER_RUN:-$cluster_run}
CLUSTER_STATE=$CLUSTER_ROOT/state
CLUSTER_NODES=${CLUSTER_NODES:-2}
CLUSTER_CACHE=${CSI_HOSTPATH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-hostpath}

# The cluster's own L2 network: a bridge on the host, one veth per node (the host's ends are
# $CLUSTER_VETH1, 2, ...). Nothing of it is routed to or from any other interface of the host.
CLUSTER_BRIDGE=${CLUSTER_BRIDGE:-$cluster_bridge}
CLUSTER_VETH=${CLUSTER_VETH:-$cluster_veth}
# Services get 10.96.0.0/12 in every cluster, the API server's at 10.96.0.1: only kube-proxy,
# inside each node, ever sees a service address (the host routes none).
CLUSTER_SERVICE_CIDR=${CLUSTER_SERVICE_CIDR:-10.96.0.0/12}
CLUSTER_SERVICE_IP=${CLUSTER_SERVICE_IP:-10.96.0.1}
# What listens inside each node's own network namespace, at the node's own address, is the same
# in every cluster: the e2e suite dials the kubelet at 10250 and kube-proxy's health at 10256
# (test/e2e/framework/ports.go, pkg/cluster/ports).
CLUSTER_KUBELET_PORT=${CLUSTER_KUBELET_PORT:-10250}
CLUSTER_KUBELET_HEALTHZ_PORT=${CLUSTER_KUBELET_HEALTHZ_PORT:-10248}
CLUSTER_PROXY_HEALTHZ_PORT=${CLUSTER_PROXY_HEALTHZ_PORT:-10256}
CLUSTER_PROXY_METRICS_PORT=${CLUSTER_PROXY_METRICS_PORT:-10249}
CLUSTER_K8S_VERSION=${CLUSTER_K8S_VERSION:-v1.35.4}
# The sandbox image: the name and tag the kubelet and the e2e suite use (test/utils/image/manifest.go).
CLUSTER_PAUSE_IMAGE=${CLUSTER_PAUSE_IMAGE:-registry.k8s.io/pause:3.10.1}
CLUSTER_TIMEOUT=${CLUSTER_TIMEOUT:-180}
# What each node sees at /var/lib/csi-hostpath/pool, the chart's default pool.hostPath: one host
# directory for every node (shared, the chart's default shape), or a directory of each node's
# own (local, for pool.scope=local with the chart's other defaults unchanged).
CLUSTER_POOL=${CLUSTER_POOL:-shared}

# The numbers the environment sets itself win over those of the slot.
for cluster_v in NET_PREFIX POD_PREFIX POD_CIDR API_PORT ETCD_PORT ETCD_PEER_PORT \
  CONTROLLER_MANAGER_PORT SCHEDULER_PORT; do
  cluster_v=CLUSTER_$cluster_v
  printf -v "CLUSTER_ENV_${cluster_v#CLUSTER_}" '%s' "${!cluster_v-}"
done
unset cluster_v

# cluster_instances: "ROOT SLOT NAME RUN" for every cluster under $CLUSTER_BASE that recorded its
# settings (up or half up). A default cluster recorded before slots existed holds slot 0.
cluster_instances() {
  local f
  for f in "$CLUSTER_BASE"/csi-hostpath-cluster/state/settings.env "$CLUSTER_BASE"/chp-cluster-*/state/settings.env; do
    [ -f "$f" ] || continue
    # shellcheck disable=SC2016 # expanded by that bash, after it read the file
    env -u CLUSTER_SLOT bash -c '. "$1" && echo "${1%/state/settings.env} ${CLUSTER_SLOT:-0} $CLUSTER_NAME $CLUSTER_RUN"' settings "$f"
  done
}

# free_slot: the slot this cluster recorded, else the lowest no other cluster holds (nothing when
# every slot is taken).
free_slot() {
  local instances s
  instances=$(cluster_instances)
  s=$(awk -v self="$CLUSTER_ROOT" '$1 == self { print $2 }' <<<"$instances")
  if [ -n "$s" ]; then echo "$s"; return 0; fi
  for ((s = 1; s <= CLUSTER_MAX_SLOT; s++)); do
    awk -v s="$s" '$2 == s { found = 1 } END { exit !found }' <<<"$instances" || { echo "$s"; return 0; }
  done
}

# derive_numbers: the addresses and ports of $CLUSTER_SLOT. Slot 0 is the default cluster's:
# 10.250.0.0/24 for the nodes, 10.244.0.0/16 for the pods, 6443 for the API server, etcd at
# 12379. Slot S: 10.250.S.0/24, 10.(244+S).0.0/16, and the host ports 12400+10*S and up.
derive_numbers() {
  local s=${CLUSTER_SLOT:-} net='' pods='' api='' etcd='' peer='' cm='' scheduler='' base
  if [ "$s" = 0 ]; then
    net=10.250.0 pods=10.244 api=6443 etcd=12379 peer=12380 cm=10257 scheduler=10259
  elif [ -n "$s" ]; then
    base=$((12400 + 10 * s))
    net=10.250.$s pods=10.$((244 + s)) api=$base etcd=$((base + 1)) peer=$((base + 2))
    cm=$((base + 3)) scheduler=$((base + 4))
  fi
  CLUSTER_NET_PREFIX=${CLUSTER_ENV_NET_PREFIX:-$net}
  CLUSTER_HOST_IP=$CLUSTER_NET_PREFIX.1
  # Pods get <prefix>.<node index>.0/24.
  CLUSTER_POD_PREFIX=${CLUSTER_ENV_POD_PREFIX:-$pods}
  CLUSTER_POD_CIDR=${CLUSTER_ENV_POD_CIDR:-$CLUSTER_POD_PREFIX.0.0/16}
  CLUSTER_API_PORT=${CLUSTER_ENV_API_PORT:-$api}
  # etcd listens on the host's loopback only, away from the default ports other tools may use.
  CLUSTER_ETCD_PORT=${CLUSTER_ENV_ETCD_PORT:-$etcd}
  CLUSTER_ETCD_PEER_PORT=${CLUSTER_ENV_ETCD_PEER_PORT:-$peer}
  CLUSTER_CONTROLLER_MANAGER_PORT=${CLUSTER_ENV_CONTROLLER_MANAGER_PORT:-$cm}
  CLUSTER_SCHEDULER_PORT=${CLUSTER_ENV_SCHEDULER_PORT:-$scheduler}
}
if [ "$CLUSTER_NAME" = "$CLUSTER_DEFAULT_NAME" ]; then
  [ "${CLUSTER_SLOT:-0}" = 0 ] || die "CLUSTER_SLOT=$CLUSTER_SLOT: the default cluster's slot is 0"
  CLUSTER_SLOT=0
elif [ -n "${CLUSTER_SLOT:-}" ]; then
  [[ "$CLUSTER_SLOT" =~ ^[1-9][0-9]*$ ]] && [ "$CLUSTER_SLOT" -le "$CLUSTER_MAX_SLOT" ] \
    || die "CLUSTER_SLOT=$CLUSTER_SLOT: 1 to $CLUSTER_MAX_SLOT (0 is the default cluster's)"
  CLUSTER_SLOT_GIVEN=1
else
  CLUSTER_SLOT=$(free_slot)
fi
derive_numbers

# The variables settings.env records (down.sh and node.sh read them back).
CLUSTER_SETTINGS="CLUSTER_ROOT CLUSTER_RUN CLUSTER_NODES CLUSTER_NAME CLUSTER_TAG CLUSTER_SLOT
  CLUSTER_BRIDGE CLUSTER_VETH CLUSTER_NET_PREFIX CLUSTER_POD_CIDR CLUSTER_POD_PREFIX
  CLUSTER_SERVICE_CIDR CLUSTER_SERVICE_IP CLUSTER_API_PORT CLUSTER_ETCD_PORT CLUSTER_ETCD_PEER_PORT
  CLUSTER_CONTROLLER_MANAGER_PORT CLUSTER_SCHEDULER_PORT CLUSTER_KUBELET_PORT
  CLUSTER_KUBELET_HEALTHZ_PORT CLUSTER_PROXY_HEALTHZ_PORT CLUSTER_PROXY_METRICS_PORT
  CLUSTER_PAUSE_IMAGE CLUSTER_POOL"

# usage SCRIPT: the comment block at the top of SCRIPT, its help.
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$1"; }

# Node i (1-based) is named like kind's workers, so the examples' node names read the same.
node_name() { if [ "$1" -eq 1 ]; then echo "$CLUSTER_NAME-worker"; else echo "$CLUSTER_NAME-worker$1"; fi; }
node_ip() { echo "$CLUSTER_NET_PREFIX.$((10 + $1))"; }
node_pod_cidr() { echo "$CLUSTER_POD_PREFIX.$1.0/24"; }
node_pod_gateway() { echo "$CLUSTER_POD_PREFIX.$1.1"; }
# The host end of node i's veth (interface names are at most 15 characters).
node_veth() { echo "$CLUSTER_VETH$1"; }
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
    CLUSTER_HOST_IP=$CLUSTER_NET_PREFIX.1
  fi
}

# under_root: the lines of stdin that are the cluster's root or a path below it (never another
# cluster's root that only starts with the same characters).
under_root() { awk -v root="$CLUSTER_ROOT" 'index($0, root "/") == 1 || $0 == root'; }
# tagged [GREP-OPTION...]: the lines of stdin (iptables -S) that carry the cluster's comment,
# that word alone.
tagged() { grep -E "$@" -- "--comment \"?$CLUSTER_TAG\"?( |$)"; }

# down_args: what `make cluster-down` needs to end this cluster.
down_args() { [ "$CLUSTER_NAME" = "$CLUSTER_DEFAULT_NAME" ] || printf ' CLUSTER_NAME=%s' "$CLUSTER_NAME"; }

# claim_name: this name's cluster, if one is up, must be this checkout's: another checkout's is
# that checkout's to end, not a half-up one of ours.
claim_name() {
  local owner
  [ -f "$CLUSTER_STATE/settings.env" ] || return 0
  # shellcheck disable=SC2016 # expanded by that bash, after it read the file
  owner=$(bash -c '. "$1" && echo "$CLUSTER_RUN"' settings "$CLUSTER_STATE/settings.env")
  [ "$owner" = "$CLUSTER_RUN" ] && return 0
  die "the cluster '$CLUSTER_NAME' of $owner is up on this machine: make cluster-down$(down_args) there first (or tools/cluster/down.sh here ends it); another CLUSTER_NAME runs beside it"
}

# cluster_lock / cluster_unlock: one up.sh or down.sh of the machine at a time claims a slot or
# hands over directories (a flock on $CLUSTER_BASE, released when the holder exits). Unlock
# before starting anything that lives on: a child would inherit the lock.
cluster_lock() {
  exec {CLUSTER_LOCK_FD}<"$CLUSTER_BASE"
  flock "$CLUSTER_LOCK_FD"
}
cluster_unlock() { exec {CLUSTER_LOCK_FD}<&-; }

# claim_slot: under the lock, keep this cluster's slot or take the lowest free one (with its
# numbers); fail when it is another cluster's or none is left.
claim_slot() {
  local root slot name run
  if [ "${CLUSTER_SLOT_GIVEN:-0}" != 1 ] && [ "$CLUSTER_SLOT" != 0 ]; then
    CLUSTER_SLOT=$(free_slot)
    derive_numbers
  fi
  [ -n "$CLUSTER_SLOT" ] || die "every slot (1 to $CLUSTER_MAX_SLOT) is taken by another cluster: $(cluster_instances | awk '{ printf "%s ", $3 }')(make cluster-down CLUSTER_NAME=... ends one)"
  while read -r root slot name run; do
    [ -n "$root" ] && [ "$root" != "$CLUSTER_ROOT" ] && [ "$slot" = "$CLUSTER_SLOT" ] || continue
    die "slot $slot (its addresses and ports) is cluster '$name''s, of $run: set another CLUSTER_SLOT, or none"
  done < <(cluster_instances)
}
save_settings() {
  local v
  mkdir -p "$CLUSTER_STATE"
  for v in $CLUSTER_SETTINGS; do printf '%s=%q\n' "$v" "${!v}"; done >"$CLUSTER_STATE/settings.env"
}
