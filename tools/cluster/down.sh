#!/usr/bin/env bash
# Take down the cluster of tools/cluster/up.sh (make cluster-down), whole or half up.
#
#   tools/cluster/down.sh          end, unmount, detach and delete everything the cluster made
#   tools/cluster/down.sh --list   print what that is, touching nothing (no root needed)
#   tools/cluster/down.sh --help
#
# The cluster is the default one, or CLUSTER_NAME's: only that one's things are touched, whatever
# other cluster runs beside it.
#
# In order: thaw any frozen filesystem inside a node; end every process it started, by the PIDs
# it recorded, then every process left in its cgroups (the nodes' containers); unmount what is
# mounted under its root (the nodes' namespace pins among them: the nodes' own mounts go with
# their mount namespaces); detach the loop devices whose backing file is under its root; delete
# its veths, bridge and tagged iptables rules, its cgroups, its root and the mount-point
# directories it made. Idempotent; each step goes on when another fails, and it exits 1 naming
# what is left. The logs stay in .run/cluster/logs (.run/NAME/logs).
set -uo pipefail
# shellcheck source=tools/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_settings

# What a teardown looks for, for --list and for the tests.
list() {
  local i
  echo "cluster: $CLUSTER_NAME (slot ${CLUSTER_SLOT:-none}, tag $CLUSTER_TAG)"
  echo "processes: the PIDs in $CLUSTER_RUN/pids/*.pid (etcd, kube-apiserver," \
    "kube-controller-manager, kube-scheduler; each node's init, containerd, kubelet, kube-proxy)"
  echo "processes: every PID left in a cgroup under /$CLUSTER_TAG (the nodes' pods)"
  echo "frozen filesystems: loop-device mounts inside each node's mount namespace, thawed first"
  echo "mounts: everything mounted under $CLUSTER_ROOT (the nodes' namespace pins ns/mnt, ns/net)"
  echo "loop devices: those whose backing file is under $CLUSTER_ROOT"
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    echo "network namespace: $(node_dir "$i")/ns/net ($(node_name "$i"), $(node_ip "$i"))"
    echo "mount namespace: $(node_dir "$i")/ns/mnt ($(node_name "$i"))"
    echo "veth: $(node_veth "$i")"
  done
  echo "bridge: $CLUSTER_BRIDGE"
  echo "iptables rules: those commented '$CLUSTER_TAG' (that word alone) in the filter and nat tables"
  echo "cgroups: /$CLUSTER_TAG in every hierarchy"
  echo "directories: $CLUSTER_ROOT; the mount points it made (listed in $CLUSTER_STATE/created-dirs; handed to another cluster still up, which may have them mounted)"
  echo "files: $CLUSTER_RUN/{kubeconfig,pki,config,nodes,pids,bin} (the logs stay)"
}

case "${1:-}" in
  -h | --help) usage "$0"; exit 0 ;;
  --list) list; exit 0 ;;
  "") ;;
  *) usage "$0" >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || die "needs root"

left=()

# ours PID: the process is still one the cluster started (in its cgroups), not a recycled PID.
ours() { grep -q ":/$CLUSTER_TAG/" "/proc/$1/cgroup" 2>/dev/null; }

# cluster_pids: every process in the cluster's cgroups.
cluster_pids() {
  local mnt
  for mnt in $(cgroup_mounts); do
    [ -d "$mnt/$CLUSTER_TAG" ] || continue
    find "$mnt/$CLUSTER_TAG" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -un
}

thaw() {
  local i ns target source
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    ns=$(node_dir "$i")/ns/mnt
    findmnt -rn "$ns" >/dev/null 2>&1 || continue
    nsenter --mount="$ns" -- findmnt -rn -o TARGET,SOURCE 2>/dev/null | while read -r target source; do
      case "$source" in /dev/loop*) nsenter --mount="$ns" -- fsfreeze -u "$(printf '%b' "$target")" 2>/dev/null ;; esac
    done
  done
}

# stop_pids FILE...: SIGKILL each recorded PID that is still the cluster's, and wait for it.
stop_pids() {
  local f pid pids=() n alive
  for f in "$@"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if [ -n "$pid" ] && ours "$pid"; then kill -KILL "$pid" 2>/dev/null && pids+=("$pid"); fi
  done
  for n in $(seq 100); do
    alive=0
    for pid in "${pids[@]}"; do running "$pid" && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.05
  done
  rm -f "$@"
}

stop_processes() {
  local pids_dir=$CLUSTER_RUN/pids pid n rest
  if [ -d "$pids_dir" ]; then
    # The nodes first (their kubelets would otherwise restart what is killed), the API server and
    # etcd last.
    # Nothing needs a clean stop: all the cluster keeps is deleted next. The nodes go first, or
    # their kubelets would restart what is killed; a node's init is PID 1 of its PID namespace,
    # and when it dies the kernel kills the rest of the node.
    stop_pids "$pids_dir"/*.kubelet.pid "$pids_dir"/*.kube-proxy.pid
    stop_pids "$pids_dir"/*.containerd.pid
    stop_pids "$pids_dir"/*.init.pid
    stop_pids "$pids_dir"/kube-scheduler.pid "$pids_dir"/kube-controller-manager.pid
    stop_pids "$pids_dir"/kube-apiserver.pid "$pids_dir"/etcd.pid
  fi
  for n in $(seq 100); do
    rest=$(cluster_pids)
    [ -z "$rest" ] && return 0
    for pid in $rest; do kill -KILL "$pid" 2>/dev/null || true; done
    sleep 0.1
  done
  left+=("processes that do not die (D state?): $(echo "$rest" | tr '\n' ' ')")
}

unmount_all() {
  local target n
  [ -d "$CLUSTER_ROOT" ] || return 0
  for n in 1 2 3; do
    findmnt -rn -o TARGET | under_root | sort -r | while read -r target; do
      target=$(printf '%b' "$target")
      umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || true
    done
  done
  if findmnt -rn -o TARGET | under_root | grep -q .; then
    left+=("mounts under $CLUSTER_ROOT: $(findmnt -rn -o TARGET | under_root | tr '\n' ' ')")
  fi
}

# The loop devices backed by a file under the root: matched by the backing file's device and
# inode, as the kernel names the backing file by the path the attaching process saw.
detach_loops() {
  local dev ino majmin inodes rootdev n dirs=()
  [ -d "$CLUSTER_ROOT" ] || return 0
  # The driver's directories: the shared pool and controller state, each node's own.
  for n in "$CLUSTER_ROOT"/shared "$CLUSTER_ROOT"/nodes/*/pool "$CLUSTER_ROOT"/nodes/*/csi-hostpath; do [ -d "$n" ] && dirs+=("$n"); done
  [ "${#dirs[@]}" -gt 0 ] || return 0
  rootdev=$(stat -c '%Hd:%Ld' "$CLUSTER_ROOT")
  inodes=$(find "${dirs[@]}" -xdev -type f -printf '%i\n' 2>/dev/null)
  [ -n "$inodes" ] || return 0
  for n in $(seq 50); do
    local found=0
    while read -r dev ino majmin; do
      [ -n "$dev" ] && [ "$majmin" = "$rootdev" ] || continue
      if grep -qxF "$ino" <<<"$inodes"; then
        found=1
        losetup -d "$dev" 2>/dev/null || true
      fi
    done < <(losetup -l -n -O NAME,BACK-INO,BACK-MAJ:MIN 2>/dev/null)
    [ "$found" = 0 ] && return 0
    sleep 0.2
  done
  left+=("loop devices backed by files under $CLUSTER_ROOT (still held)")
}

network() {
  local i table line
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    ip link show "$(node_veth "$i")" >/dev/null 2>&1 && ip link delete "$(node_veth "$i")"
  done
  ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1 && ip link delete "$CLUSTER_BRIDGE"
  for table in filter nat; do
    iptables -w -t "$table" -S 2>/dev/null | tagged | while read -r line; do
      # -S prints "-A CHAIN SPEC"; the same SPEC after -D deletes that rule.
      eval "iptables -w -t $table -D ${line#-A }" || true
    done
  done
  if iptables -w -S 2>/dev/null | tagged -q || iptables -w -t nat -S 2>/dev/null | tagged -q; then
    left+=("iptables rules commented $CLUSTER_TAG")
  fi
  ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1 && left+=("bridge $CLUSTER_BRIDGE")
}

cgroups() {
  local mnt
  for mnt in $(cgroup_mounts); do
    [ -d "$mnt/$CLUSTER_TAG" ] || continue
    find "$mnt/$CLUSTER_TAG" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ -d "$mnt/$CLUSTER_TAG" ] && left+=("cgroup $mnt/$CLUSTER_TAG")
  done
}

# The host directories the nodes' mounts sit on (/var/lib/kubelet, ...) that up.sh made. While
# another cluster is up they are its nodes' mount points too, and removing a mount point takes
# the mounts on it away in every mount namespace: so they go to that cluster's list instead, and
# the last cluster down removes them.
created_dirs() {
  local f=$CLUSTER_STATE/created-dirs root _ d
  [ -f "$f" ] || return 0
  cluster_lock
  while read -r root _; do
    [ -n "$root" ] && [ "$root" != "$CLUSTER_ROOT" ] || continue
    cat "$f" >>"$root/state/created-dirs"
    cluster_unlock
    return 0
  done < <(cluster_instances)
  sort -r "$f" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
  cluster_unlock
}

directories() {
  created_dirs
  if [ -d "$CLUSTER_ROOT" ]; then
    # Never through a mount: the pool and the host's own directories stay where they are.
    if findmnt -rn -o TARGET | under_root | grep -q .; then
      left+=("$CLUSTER_ROOT (still has mounts: not deleted)")
    else
      rm -rf --one-file-system "$CLUSTER_ROOT"
    fi
  fi
  local run=${CLUSTER_RUN:?}
  rm -rf "${run:?}/kubeconfig" "${run:?}/pki" "${run:?}/config" "${run:?}/nodes" "${run:?}/pids" "${run:?}/bin"
}

start=$SECONDS
for step in thaw stop_processes unmount_all detach_loops network cgroups directories; do
  t=$SECONDS
  "$step"
  if [ "${CLUSTER_VERBOSE:-0}" = 1 ] || ((SECONDS - t >= 3)); then log "$step: $((SECONDS - t))s"; fi
done
if [ "${#left[@]}" -gt 0 ]; then
  printf 'cluster: left behind: %s\n' "${left[@]}" >&2
  exit 1
fi
log "down in $((SECONDS - start))s"
