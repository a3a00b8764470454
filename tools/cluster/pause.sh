#!/usr/bin/env bash
# The sandbox image of a kind node made here (tools/kind/node-image.sh): tools/cluster/pause/pause.c,
# built static with gcc and packaged as an OCI image archive named $CLUSTER_PAUSE_IMAGE
# (registry.k8s.io/pause:3.10.1, the name the kubelet and the e2e suite use), which
# `ctr images import` loads under that name.
#
#   tools/cluster/pause.sh build     build into the cache unless it is there already
#   tools/cluster/pause.sh path bin  the static program
#   tools/cluster/pause.sh path image the image archive
#   tools/cluster/pause.sh list      "NAME ARCHIVE", as tools/cluster/images.sh list prints
#   tools/cluster/pause.sh --help
#
# The cache directory is named after a hash of the source, the compiler and this script, and is
# written as DIR.partial then renamed: an interrupted build never looks finished. gcc and libc6-dev
# are installed with apt-get when missing (as root).
set -euo pipefail

CLUSTER_TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER_CACHE=${CSI_HOSTPATH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-hostpath}
CLUSTER_PAUSE_IMAGE=${CLUSTER_PAUSE_IMAGE:-registry.k8s.io/pause:3.10.1}

die() { printf 'pause: %s\n' "$*" >&2; exit 1; }
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$1"; }

# need_gcc: a C compiler and the static libc, from Debian's packages when missing.
need_gcc() {
  command -v gcc >/dev/null && [ -f /usr/lib/x86_64-linux-gnu/libc.a ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    die "needs gcc and the static libc (apt-get install gcc libc6-dev)"
  fi
  echo "pause: installing Debian's gcc and libc6-dev" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
}

src=$CLUSTER_TOOLS/pause/pause.c
key=$( { cat "$src" "$0"; gcc --version 2>/dev/null | head -n 1; echo "$CLUSTER_PAUSE_IMAGE"; } | sha256sum | cut -c1-12)
dir=$CLUSTER_CACHE/cluster/pause-$key

# blob FILE: store FILE in the layout's blobs by its sha256, print "sha256:HEX SIZE".
blob() {
  local sum size
  sum=$(sha256sum "$1" | cut -d' ' -f1)
  size=$(stat -c %s "$1")
  mv "$1" "$layout/blobs/sha256/$sum"
  echo "sha256:$sum $size"
}

build() {
  [ -f "$dir/pause.tar" ] && return 0
  need_gcc
  local part=$dir.partial root layer_digest layer_size diff_id config_digest config_size \
    manifest_digest manifest_size name tag
  rm -rf "$part"
  mkdir -p "$part/rootfs" "$part/layout/blobs/sha256"
  layout=$part/layout
  gcc -static -O2 -s -Wall -Wextra -Werror -o "$part/pause" "$src"
  cp "$part/pause" "$part/rootfs/pause"
  root=$part/rootfs
  # One uncompressed layer, byte for byte the same on every build.
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$root" -cf "$part/layer.tar" pause
  diff_id=sha256:$(sha256sum "$part/layer.tar" | cut -d' ' -f1)
  read -r layer_digest layer_size < <(blob "$part/layer.tar")
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
    "$diff_id" >"$part/config.json"
  read -r config_digest config_size < <(blob "$part/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
    "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$part/manifest.json"
  read -r manifest_digest manifest_size < <(blob "$part/manifest.json")
  name=$CLUSTER_PAUSE_IMAGE
  tag=${name##*:}
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest_digest" "$manifest_size" "$name" "$tag" >"$layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$layout" -cf "$part/pause.tar" .
  rm -rf "$part/rootfs" "$layout"
  rm -rf "$dir"
  mv "$part" "$dir"
}

case "${1:-}" in
  -h | --help) usage "$0"; exit 0 ;;
  build) build ;;
  path)
    case "${2:-}" in
      bin) echo "$dir/pause" ;;
      image) echo "$dir/pause.tar" ;;
      *) usage "$0" >&2; exit 2 ;;
    esac
    ;;
  list) echo "$CLUSTER_PAUSE_IMAGE $dir/pause.tar" ;;
  *) usage "$0" >&2; exit 2 ;;
esac
