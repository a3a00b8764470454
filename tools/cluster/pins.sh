# shellcheck shell=bash
# The pins for the Kubernetes minor that KUBERNETES_VERSION selects (sourced by build.sh,
# images.sh, node-image.sh and k8s-e2e.sh). versions.env holds the default release and every
# pin; versions-1.MM.env holds, for another minor 1.MM, the pins that follow Kubernetes
# (the staging modules, agnhost, ginkgo, etcd, CoreDNS), read over versions.env.
#
# KUBERNETES_VERSION in the environment: a pinned release (v1.34.4) or its minor (v1.34, 1.34);
# empty or unset: versions.env's. Any other value stops the caller, naming the supported ones.
# Sets every pin, exports KUBERNETES_VERSION as the release, and sets KUBERNETES_MINOR (1.35)
# and PINS_FILES (the files read, relative to the checkout).

pins_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# pins_supported: "v1.35.4 (tools/cluster/versions.env), v1.34.4 (...)", the default first.
pins_supported() {
  local f v out
  out=$(sed -n 's/^KUBERNETES_VERSION=//p' "$pins_dir/versions.env")" (tools/cluster/versions.env)"
  for f in "$pins_dir"/versions-1.*.env; do
    [ -f "$f" ] || continue
    v=$(sed -n 's/^KUBERNETES_VERSION=//p' "$f")
    out="$out, $v (tools/cluster/${f##*/})"
  done
  echo "$out"
}

pins_fail() {
  echo "KUBERNETES_VERSION=$1: $2; supported: $(pins_supported)" >&2
  exit 2
}

pins_load() {
  local want=${KUBERNETES_VERSION:-} minor patch file
  # shellcheck source=tools/cluster/versions.env
  . "$pins_dir/versions.env"
  PINS_FILES=tools/cluster/versions.env
  if [ -n "$want" ]; then
    [[ $want =~ ^v?(1\.[0-9]+)(\.[0-9]+)?$ ]] || pins_fail "$want" "not a Kubernetes version"
    minor=${BASH_REMATCH[1]} patch=${BASH_REMATCH[2]}
    if [[ $KUBERNETES_VERSION != "v$minor."* ]]; then
      file=$pins_dir/versions-$minor.env
      [ -f "$file" ] || pins_fail "$want" "no pins for Kubernetes $minor"
      # shellcheck source=tools/cluster/versions-1.34.env
      . "$file"
      PINS_FILES="$PINS_FILES tools/cluster/${file##*/}"
    fi
    if [ -n "$patch" ] && [ "v${want#v}" != "$KUBERNETES_VERSION" ]; then
      pins_fail "$want" "Kubernetes $minor is pinned at $KUBERNETES_VERSION (${PINS_FILES##* })"
    fi
  fi
  KUBERNETES_MINOR=${KUBERNETES_VERSION#v}
  KUBERNETES_MINOR=${KUBERNETES_MINOR%.*}
  export KUBERNETES_VERSION
}
pins_load
