#!/usr/bin/env bash
# A kind node image made here without any registry, for the Kubernetes KUBERNETES_VERSION selects
# (tools/cluster/pins.sh), the way kind's own `kind build node-image` assembles one (which
# always fetches etcd, CoreDNS, pause and kindnetd from registries, so it can't run offline).
#
#   tools/kind/node-image.sh build    make it unless Docker has it or its archive is cached; print
#                                     its name (give it to `kind create cluster --image`)
#   tools/kind/node-image.sh name     print the name it has (or will have); builds nothing
#   tools/kind/node-image.sh images   print "NAME:TAG RECIPE SOURCE" for every image it holds
#                                     besides pause: what `kubeadm config images list` asks, and
#                                     the pod network's own
#   tools/kind/node-image.sh --help
#
# Needs root and a Docker (DOCKER_HOST from tools/kind/docker.sh). The parts:
# - the Debian base of tools/cluster/images.sh, with systemd, Debian's containerd, runc and CNI
#   plugins and the node's own files (tools/kind/node/Dockerfile);
# - kubeadm, kubelet and kubectl in /usr/bin and crictl in /usr/local/bin, built from their Go
#   modules by tools/cluster/build.sh;
# - /kind/version (the one line kind reads the version from) and /kind/manifests/default-cni.yaml;
# - in containerd's k8s.io namespace, under the exact names kubeadm asks for: kube-apiserver,
#   kube-controller-manager, kube-scheduler and etcd (the binary on PATH, no entrypoint: kubeadm
#   starts them by name), kube-proxy (with iptables, conntrack and ipset), CoreDNS (its
#   entrypoint /coredns: kubeadm passes only arguments), pause (tools/cluster/pause.sh), and the
#   pod network's image (tools/kind/node/kind-net.yaml).
# The name ends in a hash of every input, so a changed input is a new image and an unchanged one
# is never built twice; `docker save` keeps a copy in the cache outside the checkout
# (${CSI_HOSTPATH_CACHE:-~/.cache/csi-hostpath}/kind/), loaded again when Docker lacks the image.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster=$repo/tools/cluster
cache=${CSI_HOSTPATH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-hostpath}
# shellcheck source=tools/cluster/pins.sh
. "$cluster/pins.sh"
pause_image=registry.k8s.io/pause:3.10.1
net_image=csi-hostpath-kind-net:$KUBERNETES_VERSION
table=$cache/kind/node-images-$KUBERNETES_VERSION.txt

say() { echo "node-image: $*" >&2; }
die() { say "$*"; exit 1; }

bin() { bash "$cluster/build.sh" path "$1"; }

# rows: the images' table for tools/cluster/images.sh, from the names kubeadm asks for.
rows() {
  local ref kubeadm
  kubeadm=$(bin kubeadm)
  [ -x "$kubeadm" ] || die "kubeadm is not built (tools/cluster/build.sh node)"
  "$kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION" 2>/dev/null |
    while read -r ref; do
      case "${ref%:*}" in
        */kube-apiserver | */kube-controller-manager | */kube-scheduler)
          echo "$ref gobin $(basename "${ref%:*}")" ;;
        */etcd) echo "$ref gobin etcd" ;;
        */kube-proxy) echo "$ref debian kube-proxy.Dockerfile:kube-proxy" ;;
        */coredns) echo "$ref go coredns" ;;
        */pause)
          [ "$ref" = "$pause_image" ] ||
            die "kubeadm asks for $ref, tools/cluster/pause.sh makes $pause_image"
          ;;
        *) die "kubeadm asks for $ref, which this script does not make" ;;
      esac
    done
  echo "$net_image debian kind-net.Dockerfile:kubectl"
}

write_table() {
  mkdir -p "$(dirname "$table")"
  rows >"$table.new"
  mv "$table.new" "$table"
}

imgs() { CSI_HOSTPATH_IMAGES_TABLE=$table bash "$cluster/images.sh" "$@"; }

# key: a hash of everything the image is made from.
key() {
  local name
  {
    find "$here/node" "$here/node-image.sh" -type f | sort | xargs sha256sum | sed "s#$repo/##"
    echo "$KUBERNETES_VERSION $pause_image"
    for name in kubeadm kubelet kubectl crictl; do stat -c '%n %s %Y' "$(bin "$name")"; done
    while read -r name _; do imgs path "$name"; done <"$table"
    bash "$cluster/pause.sh" path image
    # The base's name holds its own key (its recipe and mirror).
    sed -n 's/^base_suite=//p' "$cluster/images/base.sh"
    sha256sum "$cluster/images/base.sh" | cut -c1-16
  } | sha256sum | cut -c1-12
}

image_name() { echo "csi-hostpath-kind-node:$KUBERNETES_VERSION-$(key)"; }

# normalized NAME:TAG: the name containerd stores (docker.io/library/ for a bare name).
normalized() {
  case "$1" in
    */*) case "${1%%/*}" in *.* | *:* | localhost) echo "$1" ;; *) echo "docker.io/$1" ;; esac ;;
    *) echo "docker.io/library/$1" ;;
  esac
}

need_docker() {
  docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
    die "no Docker answers (DOCKER_HOST=${DOCKER_HOST:-unset}): eval \"export \$(tools/kind/docker.sh start)\""
}

# The pod network's manifest, its script inlined as a ConfigMap.
cni_manifest() {
  sed -e "s#@IMAGE@#$net_image#" "$here/node/kind-net.yaml"
  printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kind-net\n  namespace: kube-system\ndata:\n  kind-net.sh: |\n'
  sed 's/^/    /' "$here/node/kind-net.sh"
}

build() {
  local name archive started=$SECONDS base base_ref stage ctr ref path want got
  need_docker
  [ "$(id -u)" -eq 0 ] || die "build needs root (debootstrap, buildah)"
  say "programs: tools/cluster/build.sh node"
  bash "$cluster/build.sh" node >/dev/null
  write_table
  say "images: tools/cluster/images.sh build ($(wc -l <"$table") images)"
  imgs build
  bash "$cluster/pause.sh" build
  name=$(image_name)
  archive=$cache/kind/node-${name#*:}.tar
  if docker image inspect "$name" >/dev/null 2>&1; then echo "$name"; return 0; fi
  if [ -f "$archive" ]; then
    say "loading $archive"
    docker load -q -i "$archive" >/dev/null
    echo "$name"
    return 0
  fi
  base=$(bash "$cluster/images.sh" base)
  base_ref=$(docker load -q -i "$base" | sed -n 's/^Loaded image: //p' | head -n 1)
  [ -n "$base_ref" ] || die "docker load $base named no image"
  stage=csi-hostpath-kind-node-stage:$(key)
  say "stage 1: docker build on $base_ref"
  docker build -q --network host --build-arg "BASE_IMAGE=$base_ref" -t "$stage" "$here/node" >/dev/null
  ctr=csi-hostpath-kind-build-$$
  # shellcheck disable=SC2064 # the names are fixed now
  trap "docker rm -f $ctr >/dev/null 2>&1 || true; docker rmi $stage >/dev/null 2>&1 || true" EXIT
  say "stage 2: programs, version, manifests and images into $ctr"
  # --init: containerd, started by a docker exec that ends, is reaped when it stops.
  docker run -d --init --name "$ctr" --privileged --entrypoint sleep "$stage" infinity >/dev/null
  for path in kubeadm kubelet kubectl; do docker cp "$(bin "$path")" "$ctr:/usr/bin/$path"; done
  docker cp "$(bin crictl)" "$ctr:/usr/local/bin/crictl"
  echo "$KUBERNETES_VERSION" | docker exec -i "$ctr" sh -c 'cat >/kind/version'
  cni_manifest | docker exec -i "$ctr" sh -c 'cat >/kind/manifests/default-cni.yaml'
  docker exec "$ctr" sed -i "s#@PAUSE_IMAGE@#$pause_image#" /etc/containerd/config.toml
  docker exec "$ctr" sh -c 'containerd >/tmp/containerd.log 2>&1 &
    for i in $(seq 100); do ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done
    cat /tmp/containerd.log; exit 1'
  { while read -r ref _; do imgs path "$ref"; done <"$table"; bash "$cluster/pause.sh" path image; } |
    while read -r path; do
      docker exec -i "$ctr" ctr -n k8s.io images import --no-unpack --all-platforms - <"$path" >/dev/null
    done
  want=$({ cut -d' ' -f1 "$table"; echo "$pause_image"; } | while read -r ref; do normalized "$ref"; done | sort)
  got=$(docker exec "$ctr" ctr -n k8s.io images ls -q | sort)
  [ -z "$(comm -23 <(echo "$want") <(echo "$got"))" ] ||
    die "containerd lacks: $(comm -23 <(echo "$want") <(echo "$got") | tr '\n' ' ')"
  docker exec "$ctr" sh -c 'pkill -x containerd
    for i in $(seq 150); do pgrep -x containerd >/dev/null || break; sleep 0.2; done
    ! pgrep -x containerd >/dev/null && rm -rf /tmp/* /run/containerd'
  docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
    --change "LABEL org.opencontainers.image.description=\"kind node image for Kubernetes $KUBERNETES_VERSION made by csi-hostpath's tools/kind/node-image.sh without a registry\"" \
    "$ctr" "$name" >/dev/null
  say "saving $archive"
  mkdir -p "$(dirname "$archive")"
  docker save -o "$archive.partial" "$name"
  mv "$archive.partial" "$archive"
  for path in "$cache"/kind/node-"$KUBERNETES_VERSION"-*.tar; do
    [ "$path" = "$archive" ] || rm -f "$path"
  done
  say "$name in $((SECONDS - started)) s"
  echo "$name"
}

case "${1:-}" in
  build) build ;;
  name) write_table; image_name ;;
  images) write_table; cat "$table" ;;
  -h | --help | help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
