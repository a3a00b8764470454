#!/usr/bin/env bash
# make kind-up: a kind cluster with the project's images in it, on this machine's Docker or the
# project's own dockerd (tools/kind/docker.sh), on a node image made here (tools/kind/node-image.sh)
# unless KIND_NODE_IMAGE names another. Prints KUBECONFIG=FILE (the cluster's own kubeconfig;
# ~/.kube/config is not touched).
#
# Settings (environment; make passes mk/deploy.mk's):
#   KIND_CLUSTER      the cluster's name (csi-hostpath)
#   KIND_CONFIG       kind's configuration (examples/kind-config.yaml)
#   KIND_NODE_IMAGE   a node image to use as it is (kindest/node:v1.35.1 where a registry can
#                     be reached); empty: make one here
#   KIND_SHARED_DIR   the host directory of the shared pool and the controller's state, put in
#                     place of the configuration's /var/lib/csi-hostpath-kind in the copy kind
#                     is given (tools/kind/lib.sh, kind_config)
#   KIND_IMAGES       1: build (tools/cluster/images.sh build) and `kind load image-archive` the
#                     driver's, the sidecars' and the test images (the default); 0: none
#   KUBERNETES_VERSION  the Kubernetes of the node image and the programs: a release or minor
#                     tools/cluster/pins.sh has pins for (v1.35.4 by default, v1.34.4); on 1.34
#                     the configuration handed to kind turns MutableCSINodeAllocatableCount on
# What the cache (CSI_HOSTPATH_CACHE, default ~/.cache/csi-hostpath) lacks is built first, with
# `tools/cluster/build.sh kind` (the node image's programs, kubectl, helm, the sidecars, the
# snapshot CRDs and controller, the snapshot metadata CRDs and lister, agnhost), so a new machine
# needs nothing done before; an image that still can't be made stops it, naming the command.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=tools/kind/lib.sh
. "$here/lib.sh"
# An unknown minor stops here, before anything is built.
# shellcheck source=tools/cluster/pins.sh
. "$repo/tools/cluster/pins.sh"

started=$SECONDS
mkdir -p "$state"
images_dir=${CSI_HOSTPATH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-hostpath}/images
# The programs first: they need no Docker, and the slowest part of a cold cache is here.
t=$SECONDS
if [ "$KIND_IMAGES" = 1 ]; then
  bash "$repo/tools/cluster/build.sh" kind >/dev/null
elif [ -z "$KIND_NODE_IMAGE" ]; then
  bash "$repo/tools/cluster/build.sh" node >/dev/null
fi
log "programs (tools/cluster/build.sh): $((SECONDS - t)) s"
# Docker: the machine's, or ours. Whether this run started ours is kept for kind-down.
before=$(bash "$here/docker.sh" status 2>/dev/null || true)
out=$(bash "$here/docker.sh" start)
export "${out?}"
if [[ $before != "the project's dockerd"* ]] && [[ $(bash "$here/docker.sh" status) == "the project's dockerd"* ]]; then
  touch "$state/started-dockerd"
fi

kind=$(kind_bin)
if [ -z "$KIND_NODE_IMAGE" ]; then
  KIND_NODE_IMAGE=$(bash "$here/node-image.sh" build)
fi
log "node image $KIND_NODE_IMAGE"

if "$kind" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
  log "$KIND_CLUSTER is up already"
  "$kind" export kubeconfig --name "$KIND_CLUSTER" --kubeconfig "$kubeconfig" >/dev/null 2>&1
  echo "KUBECONFIG=$kubeconfig"
  exit 0
fi

mkdir -p "$KIND_SHARED_DIR/pool" "$KIND_SHARED_DIR/controller"
config=$state/kind-config.yaml
kind_config >"$config"
log "Kubernetes $KUBERNETES_VERSION (pins: $PINS_FILES); kind's configuration: $config"
# kind mounts the host's /lib/modules into every node; Docker makes it when the host has none.
[ -e /lib/modules ] || touch "$state/made-lib-modules"

t=$SECONDS
"$kind" create cluster --name "$KIND_CLUSTER" --config "$config" --image "$KIND_NODE_IMAGE" \
  --kubeconfig "$kubeconfig" --wait 180s
log "kind create cluster: $((SECONDS - t)) s"

# missing_archives: each image images.sh makes whose archive is not in its list (an archive can go
# between the build and the load: another checkout sharing the cache, with other inputs, replaces
# it with its own).
missing_archives() {
  local listed name
  listed=$(bash "$repo/tools/cluster/images.sh" list | awk '{print $1}')
  for name in $(bash "$repo/tools/cluster/images.sh" names); do
    grep -qxF -e "$name" -e "docker.io/$name" -e "docker.io/library/$name" <<<"$listed" || echo "$name"
  done
}

# load_images: build, then, holding images.sh's lock so that no build replaces an archive
# meanwhile, load every archive; an image whose archive went since its build is built again
# (three tries), and one still missing stops kind-up, named.
load_images() {
  local lock missing try n=0 t
  for try in 1 2 3; do
    bash "$repo/tools/cluster/images.sh" build
    exec {lock}>"$images_dir/.lock"
    flock "$lock"
    missing=$(missing_archives)
    if [ -z "$missing" ]; then
      t=$SECONDS
      while read -r _ archive; do
        "$kind" load image-archive "$archive" --name "$KIND_CLUSTER" >/dev/null
        n=$((n + 1))
      done < <(bash "$repo/tools/cluster/images.sh" list)
      exec {lock}>&-
      log "kind load image-archive: $n archives in $((SECONDS - t)) s"
      return 0
    fi
    exec {lock}>&-
    log "try $try: no archive for $(echo "$missing" | tr '\n' ' ')after the build (another checkout sharing $images_dir?)"
  done
  die "images without an archive: $(echo "$missing" | tr '\n' ' ')(tools/cluster/images.sh build)"
}

if [ "$KIND_IMAGES" = 1 ]; then
  load_images
  while read -r image value; do
    log "not loaded: $image, which the chart's defaults name and this machine can't make; install the chart with --set $value"
  done < <(bash "$repo/tools/cluster/images.sh" unmade)
fi
log "$KIND_CLUSTER up in $((SECONDS - started)) s"
echo "KUBECONFIG=$kubeconfig"
