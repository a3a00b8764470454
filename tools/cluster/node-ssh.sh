#!/usr/bin/env bash
# An SSH server at each node's address, the way the Kubernetes e2e suite reaches a node: its
# [Disruptive] storage specs stop and start the kubelet with `systemctl stop kubelet` over SSH
# (test/e2e/storage/utils: KubeletCommand), and look at the node's mounts with `mount | grep`.
# The nodes here have neither sshd nor systemd, so each node gets an sshd of the host's
# (Debian's openssh-server) in the node's network namespace only, whose one command is this
# script: `systemctl stop|start|restart kubelet` becomes `node.sh stop|start NODE kubelet`,
# `systemctl show kubelet --property ActiveState --value` reads the kubelet's PID file, and
# anything else runs inside the node (node.sh exec). Needs root and a cluster that is up.
#
#   tools/cluster/node-ssh.sh up        start an sshd on port 22 of every node's address, in
#                                       the cluster's cgroup (down.sh ends it with the rest);
#                                       print the client key for KUBE_SSH_KEY_PATH
#   tools/cluster/node-ssh.sh key       print the client key's path
#   tools/cluster/node-ssh.sh run NODE  one session's command ($SSH_ORIGINAL_COMMAND), as
#                                       the sshd's ForceCommand runs it
set -euo pipefail
# shellcheck source=tools/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_settings
# shellcheck source=tools/node-sshd.sh
. "$CLUSTER_TOOLS/../node-sshd.sh"

dir=$CLUSTER_RUN/ssh
key=$dir/id_ed25519
sshd=/usr/sbin/sshd
cgroup=/$CLUSTER_TAG/ssh

ssh_up() {
  local i name ip conf
  [ "$(id -u)" -eq 0 ] || die "node-ssh: needs root"
  sshd_ready "$dir"
  make_cgroup "$cgroup"
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    name=$(node_name "$i")
    ip=$(node_ip "$i")
    conf=$dir/$name.sshd_config
    sshd_config "$dir" "$ip" "$CLUSTER_RUN/pids/$name.sshd.pid" "CLUSTER_NAME=$CLUSTER_NAME" \
      "bash $CLUSTER_TOOLS/node-ssh.sh run $name" >"$conf"
    if [ -f "$CLUSTER_RUN/pids/$name.sshd.pid" ] && running "$(cat "$CLUSTER_RUN/pids/$name.sshd.pid")"; then
      continue
    fi
    (
      join_cgroup "$cgroup"
      nsenter --net="$(node_dir "$i")/ns/net" -- "$sshd" -f "$conf" -E "$CLUSTER_RUN/logs/$name.sshd.log"
    )
    wait_for "$name sshd" "$CLUSTER_TIMEOUT" "$name.sshd" \
      ssh -i "$key" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
      -o ConnectTimeout=2 "root@$ip" "systemctl show kubelet --property ActiveState --value"
  done
  echo "$key"
}

# The command of one session. The suite prefixes `sudo ` when `sudo --version` works: answer as
# a node without sudo would, and take the prefix off anyway.
ssh_run() {
  local name=$1 cmd=${SSH_ORIGINAL_COMMAND:-} pid
  case "$cmd" in
    "sudo --version") echo "sudo: command not found" >&2; exit 127 ;;
  esac
  cmd=${cmd#sudo }
  case "$cmd" in
    "systemctl stop kubelet") exec bash "$CLUSTER_TOOLS/node.sh" stop "$name" kubelet ;;
    "systemctl start kubelet") exec bash "$CLUSTER_TOOLS/node.sh" start "$name" kubelet ;;
    "systemctl restart kubelet")
      bash "$CLUSTER_TOOLS/node.sh" stop "$name" kubelet
      exec bash "$CLUSTER_TOOLS/node.sh" start "$name" kubelet
      ;;
    "systemctl show kubelet --property ActiveState --value" | "systemctl is-active kubelet")
      pid=$(cat "$CLUSTER_RUN/pids/$name.kubelet.pid" 2>/dev/null) || pid=
      if [ -n "$pid" ] && running "$pid"; then echo active; else echo inactive; fi
      ;;
    "") die "node-ssh: no command (this server runs commands, no shells)" ;;
    *) exec bash "$CLUSTER_TOOLS/node.sh" exec "$name" -- sh -c "$cmd" ;;
  esac
}

case "${1:-}" in
  up) ssh_up ;;
  key) echo "$key" ;;
  run) [ $# -eq 2 ] || die "usage: node-ssh.sh run NODE"; ssh_run "$2" ;;
  -h | --help) usage "$0" ;;
  *) usage "$0" >&2; exit 2 ;;
esac
