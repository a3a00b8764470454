#!/usr/bin/env bash
# make kind-down: delete the kind cluster and what it left on the host. The loop devices its
# nodes' driver attached (tools/kind/loops.py knows them by the driver's tag) are detached once
# the nodes are gone; kind's network is removed when no container is on it; the
# /lib/modules Docker made for kind-up is removed; the project's dockerd is stopped when kind-up
# started it and no container is left. The shared pool and ledger stay (KIND_SHARED_DIR).
# Settings: as tools/kind/up.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=tools/kind/lib.sh
. "$here/lib.sh"

t=$SECONDS
if ! out=$(bash "$here/docker.sh" env 2>/dev/null); then
  log "no Docker answers: no kind cluster to delete"
  rm -rf "$state"
  exit 0
fi
export "${out?}"
kind=$(kind_bin)

# shellcheck disable=SC2207 # node names are single words
nodes=($(cluster_nodes))
# An sshd of node-ssh.sh holds its node's network namespace: stop them first.
[ ! -d "$state/ssh" ] || bash "$here/node-ssh.sh" down
if "$kind" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
  "$kind" delete cluster --name "$KIND_CLUSTER" --kubeconfig "$kubeconfig"
fi
# Once the nodes are gone nothing uses them: the devices their driver attached, by its tag.
for dev in $(tagged_loops "${nodes[@]}"); do
  losetup -d "$dev" && log "detached $dev"
done
if docker network inspect kind >/dev/null 2>&1 &&
  [ -z "$(docker network inspect -f '{{range .Containers}}x{{end}}' kind)" ]; then
  docker network rm kind >/dev/null && log "removed the docker network kind"
fi
if [ -f "$state/made-lib-modules" ] && [ -d /lib/modules ] && [ -z "$(ls -A /lib/modules)" ] &&
  [ -z "$(docker ps -aq)" ]; then
  rmdir /lib/modules && log "removed the empty /lib/modules Docker made for kind"
fi
if [ -f "$state/started-dockerd" ] && [ -z "$(docker ps -aq)" ]; then
  bash "$here/docker.sh" stop
fi
rm -rf "$state"
log "$KIND_CLUSTER down in $((SECONDS - t)) s (the pool and the ledger stay in $KIND_SHARED_DIR)"
