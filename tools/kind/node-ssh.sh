#!/usr/bin/env bash
# An SSH server at each kind node's address, the way the Kubernetes e2e suite reaches a node: its
# [Disruptive] storage specs stop and start the kubelet with `systemctl` over SSH
# (test/e2e/storage/utils: KubeletCommand) and read the node's mounts with `mount | grep`. A kind
# node runs no sshd, so each node gets an sshd of the host's (Debian's openssh-server) in the
# node's network namespace only, whose one command is this script: the session's command runs
# inside the node (`docker exec`), where systemd runs the kubelet. Needs root and a cluster
# that is up; tools/kind/down.sh stops the servers (each holds its node's network namespace).
#
#   tools/kind/node-ssh.sh up        an sshd on port 22 of every node's address; print the
#                                    client key for KUBE_SSH_KEY_PATH
#   tools/kind/node-ssh.sh down      stop them
#   tools/kind/node-ssh.sh run NODE  one session's command ($SSH_ORIGINAL_COMMAND), as the
#                                    sshd's ForceCommand runs it
# Settings: as tools/kind/up.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=tools/kind/lib.sh
. "$here/lib.sh"
# shellcheck source=tools/node-sshd.sh
. "$here/../node-sshd.sh"

dir=$state/ssh
key=$dir/id_ed25519
sshd=/usr/sbin/sshd

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

ssh_up() {
  local name pid ip conf out
  [ "$(id -u)" -eq 0 ] || die "node-ssh: needs root"
  out=$(bash "$here/docker.sh" env) || die "node-ssh: no Docker answers"
  export "${out?}"
  sshd_ready "$dir"
  for name in $(cluster_nodes); do
    alive "$dir/$name.pid" && continue
    pid=$(docker inspect -f '{{.State.Pid}}' "$name")
    ip=$(docker inspect -f '{{with index .NetworkSettings.Networks "kind"}}{{.IPAddress}}{{end}}' "$name")
    [ -n "$ip" ] && [ "$pid" -gt 0 ] || die "node-ssh: $name has no address on the kind network"
    conf=$dir/$name.sshd_config
    sshd_config "$dir" "$ip" "$dir/$name.pid" "$out KIND_CLUSTER=$KIND_CLUSTER" \
      "bash $here/node-ssh.sh run $name" >"$conf"
    nsenter --net="/proc/$pid/ns/net" -- "$sshd" -f "$conf" -E "$dir/$name.log"
    local i
    for ((i = 0; i < 50; i++)); do
      ssh -i "$key" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
        -o ConnectTimeout=2 "root@$ip" "systemctl is-active kubelet" >/dev/null 2>&1 && break
      sleep 0.2
    done
    ((i < 50)) || die "node-ssh: no answer from $name's sshd at $ip (see $dir/$name.log)"
    log "node-ssh: $name answers at $ip:22"
  done
  echo "$key"
}

ssh_down() {
  local f
  for f in "$dir"/*.pid; do
    [ -f "$f" ] || continue
    alive "$f" && kill "$(cat "$f")" && log "node-ssh: stopped $(basename "$f" .pid)'s sshd"
    rm -f "$f"
  done
}

# The command of one session. The suite prefixes `sudo ` when `sudo --version` works: answer as
# a node without sudo would (kind's has none), and take the prefix off anyway.
ssh_run() {
  local name=$1 cmd=${SSH_ORIGINAL_COMMAND:-}
  case "$cmd" in
    "sudo --version") echo "sudo: command not found" >&2; exit 127 ;;
    "") die "node-ssh: no command (this server runs commands, no shells)" ;;
  esac
  exec docker exec -i "$name" sh -c "${cmd#sudo }"
}

case "${1:-}" in
  up) ssh_up ;;
  down) ssh_down ;;
  run) [ $# -eq 2 ] || die "usage: node-ssh.sh run NODE"; ssh_run "$2" ;;
  *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
