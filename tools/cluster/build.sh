#!/usr/bin/env bash
# Build the pinned Go programs of the kind path (the node image, its images, kubectl and helm) and
# of the e2e suite from their Go modules.
#
#   tools/cluster/build.sh kind           build what make kind-up and kind-e2e need that is
#                                         missing, then print one `NAME PATH` line for each
#   tools/cluster/build.sh TARGET...      the same for groups or program names: kind, node (a
#                                         kind node image's programs, kubectl, helm), e2e
#                                         (e2e.test, agnhost, ginkgo), everything; `list` names
#                                         them
#   tools/cluster/build.sh path NAME      print where NAME is (or will be); builds nothing
#   tools/cluster/build.sh list           print `NAME COMPONENT VERSION PACKAGE` per program
#   tools/cluster/build.sh versions [T…]  print the version each built program reports
#
# Each program is built with `go build` (`go test -c` for e2e.test) in tools/cluster/go/COMPONENT,
# whose go.mod requires the component's module at its pin in tools/cluster/versions.env; for
# another Kubernetes minor (KUBERNETES_VERSION=v1.34.4: tools/cluster/pins.sh) in
# tools/cluster/go/COMPONENT-1.34 where the minor's pins file changes that component's pin. The
# result goes to ${CSI_HOSTPATH_CACHE:-~/.cache/csi-hostpath}/COMPONENT-VERSION/, outside the
# checkout: written in COMPONENT-VERSION.partial, then renamed, so an interrupted build never
# looks finished, and a program that is there is never built again (delete it to rebuild).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
godir="$here/go"
cache=${CSI_HOSTPATH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-hostpath}
# shellcheck source=tools/cluster/pins.sh
. "$here/pins.sh"

# One program a line: NAME COMPONENT KIND WHAT. KIND is bin (go build WHAT), test (go test -c
# WHAT) or crds (the *.yaml files of MODULE/SUBDIR, WHAT being MODULE:SUBDIR, copied from the
# module download: CRDs, or the snapshot-controller's own RBAC and Deployment).
programs() {
  cat <<'EOF'
kube-apiserver          kubernetes                 bin   k8s.io/kubernetes/cmd/kube-apiserver
kube-controller-manager kubernetes                 bin   k8s.io/kubernetes/cmd/kube-controller-manager
kube-scheduler          kubernetes                 bin   k8s.io/kubernetes/cmd/kube-scheduler
kubelet                 kubernetes                 bin   k8s.io/kubernetes/cmd/kubelet
kubectl                 kubernetes                 bin   k8s.io/kubernetes/cmd/kubectl
kube-proxy              kubernetes                 bin   k8s.io/kubernetes/cmd/kube-proxy
kubeadm                 kubernetes                 bin   k8s.io/kubernetes/cmd/kubeadm
crictl                  cri-tools                  bin   sigs.k8s.io/cri-tools/cmd/crictl
coredns                 coredns                    bin   github.com/coredns/coredns
etcd                    etcd                       bin   go.etcd.io/etcd/server/v3
etcdctl                 etcd                       bin   go.etcd.io/etcd/etcdctl/v3
helm                    helm                       bin   helm.sh/helm/v4/cmd/helm
csi-provisioner         external-provisioner       bin   github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner
csi-attacher            external-attacher          bin   github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher
csi-resizer             external-resizer           bin   github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer
csi-snapshotter         external-snapshotter       bin   github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter
snapshot-controller     external-snapshotter       bin   github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
snapshot-crds           external-snapshotter       crds  github.com/kubernetes-csi/external-snapshotter/client/v8:config/crd
snapshot-controller-manifests external-snapshotter  crds  github.com/kubernetes-csi/external-snapshotter/v8:deploy/kubernetes/snapshot-controller
csi-snapshot-metadata   external-snapshot-metadata bin   github.com/kubernetes-csi/external-snapshot-metadata/cmd/csi-snapshot-metadata
snapshot-metadata-crds  external-snapshot-metadata crds  github.com/kubernetes-csi/external-snapshot-metadata/client:config/crd
snapshot-metadata-lister external-snapshot-metadata bin  csi-hostpath.local/external-snapshot-metadata-build/lister
e2e.test                kubernetes                 test  k8s.io/kubernetes/test/e2e
agnhost                 kubernetes                 bin   k8s.io/kubernetes/test/images/agnhost
ginkgo                  ginkgo                     bin   github.com/onsi/ginkgo/v2/ginkgo
EOF
}

# The groups: `node` is what a kind node image holds (tools/kind/node-image.sh) with the kubectl
# and helm that drive the cluster; `kind` is everything make kind-up and make kind-e2e need on top:
# the sidecars' programs, the snapshot CRDs and snapshot-controller manifests, the snapshot
# metadata CRDs and lister, and agnhost (an image of tools/cluster/images/images.txt); `e2e` is
# what Kubernetes' external storage e2e suite adds.
node_programs="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy etcd helm kubeadm crictl coredns"
kind_programs="csi-provisioner csi-attacher csi-resizer csi-snapshotter snapshot-controller snapshot-crds
  snapshot-controller-manifests csi-snapshot-metadata snapshot-metadata-crds snapshot-metadata-lister agnhost"
group() {
  case "$1" in
    node) echo "$node_programs" ;;
    kind) echo "$node_programs $kind_programs" ;;
    e2e) echo e2e.test agnhost ginkgo ;;
    everything) programs | awk '{print $1}' ;;
    *) return 1 ;;
  esac
}

die() { echo "build.sh: $*" >&2; exit 1; }
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

# field NAME N: the Nth column of NAME's line, or fail naming the known programs.
field() {
  local line
  line=$(programs | awk -v n="$1" '$1 == n') ||:
  if [ -z "$line" ]; then
    echo "build.sh: no program '$1' (known: $(programs | awk '{printf "%s ", $1}'); groups: kind node e2e everything)" >&2
    exit 2
  fi
  awk -v i="$2" '{print $i}' <<<"$line"
}

version_of() {
  case "$1" in
    kubernetes) echo "$KUBERNETES_VERSION" ;;
    etcd) echo "$ETCD_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    external-provisioner) echo "$CSI_PROVISIONER_VERSION" ;;
    external-attacher) echo "$CSI_ATTACHER_VERSION" ;;
    external-resizer) echo "$CSI_RESIZER_VERSION" ;;
    external-snapshotter) echo "$CSI_SNAPSHOTTER_VERSION" ;;
    external-snapshot-metadata) echo "$CSI_SNAPSHOT_METADATA_VERSION" ;;
    ginkgo) echo "$GINKGO_VERSION" ;;
    cri-tools) echo "$CRI_TOOLS_VERSION" ;;
    coredns) echo "$COREDNS_VERSION" ;;
    *) die "no pin for component '$1' in $here/versions.env" ;;
  esac
}

# moddir COMPONENT: the module directory of the component at the selected minor's pins: its own
# one for that minor where there is one, else the default's.
moddir() {
  if [ -d "$godir/$1-$KUBERNETES_MINOR" ]; then echo "$godir/$1-$KUBERNETES_MINOR"
  else echo "$godir/$1"; fi
}

comp_dir() { echo "$cache/$1-$(version_of "$1")"; }
path_of() { echo "$(comp_dir "$(field "$1" 2)")/$1"; }

present() {
  local p
  p=$(path_of "$1")
  if [ "$(field "$1" 3)" = crds ]; then [ -d "$p" ]; else [ -x "$p" ] && [ -f "$p" ]; fi
}

# expand TARGET...: the program names, groups resolved, each once, in the table's order.
expand() {
  local t names=()
  for t in "$@"; do
    if group "$t" >/dev/null; then
      read -r -a more <<<"$(group "$t" | tr '\n' ' ')"
      names+=("${more[@]}")
    else
      field "$t" 1 >/dev/null
      names+=("$t")
    fi
  done
  programs | awk '{print $1}' | grep -Fxf <(printf '%s\n' "${names[@]}")
}

# The Debian packages a build needs on a fresh machine: only the CA certificates the Go module
# proxy's TLS is checked against (every build is CGO_ENABLED=0, so no C toolchain).
debs=(ca-certificates)

ensure_build_deps() {
  local missing=() d
  for d in "${debs[@]}"; do
    dpkg-query -W -f='${db:Status-Status}' "$d" 2>/dev/null | grep -qx installed || missing+=("$d")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "build.sh: installing Debian packages: ${missing[*]}" >&2
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      die "the builds need the Debian packages ${missing[*]}: apt-get install ${missing[*]}"
    fi
  fi
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    PATH=/usr/local/go/bin:$PATH
  fi
  command -v go >/dev/null 2>&1 ||
    die "no 'go' on PATH: the go.mod files under $godir need Go 1.26 or newer (Debian's golang is older; see https://go.dev/doc/install)"
  # The toolchain on the machine builds; a go.mod asking for a newer one fails, saying which.
  export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0
}

# run COMPONENT CMD...: run a go command in the component's module, or fail naming both.
run() {
  local comp=$1 dir
  shift
  dir=$(moddir "$comp")
  if ! (cd "$dir" && "$@"); then
    echo "build.sh: $comp $(version_of "$comp"): failed: (cd $dir && $(printf '%q ' "$@"))" >&2
    return 1
  fi
}

# ldflags COMPONENT NAME: the flags that make NAME report its real version, as its own release
# build sets them (kubernetes' hack/lib/version.sh, the sidecars' release-tools, helm's
# Makefile). The build date is the release's, from the module proxy, so a rebuild
# gives the same binary.
ldflags() {
  local comp=$1 name=$2 v f=(-s -w) pkg date major minor
  v=$(version_of "$comp")
  case "$comp" in
    kubernetes)
      if [ "$name" = agnhost ]; then
        f+=(-X "main.Version=$AGNHOST_VERSION")
      else
        date=$(run "$comp" go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes) ||
          return 1
        major=${v#v}; major=${major%%.*}
        minor=${v#v"$major".}; minor=${minor%%.*}
        for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
          f+=(-X "$pkg.gitVersion=$v" -X "$pkg.gitMajor=$major" -X "$pkg.gitMinor=$minor"
            -X "$pkg.gitTreeState=clean" -X "$pkg.buildDate=$date")
        done
      fi
      ;;
    etcd) ;; # its version is a constant of go.etcd.io/etcd/api/v3 at the pin
    helm)
      pkg=helm.sh/helm/v4/internal/version
      f+=(-X "$pkg.version=$v" -X "$pkg.gitTreeState=clean")
      ;;
    ginkgo) ;; # its version is a constant of the module (types.VERSION)
    coredns) ;; # its version is a constant of the module (coremain.CoreVersion)
    cri-tools) f+=(-X "sigs.k8s.io/cri-tools/pkg/version.Version=$v") ;;
    *) f+=(-X "main.version=$v") ;; # the kubernetes-csi sidecars
  esac
  echo "${f[*]}"
}

# check_agnhost: the agnhost tag the e2e suite asks for is the VERSION file of that release.
check_agnhost() {
  local dir want
  dir=$(run kubernetes go list -m -f '{{.Dir}}' k8s.io/kubernetes) || return 1
  want=$(tr -d '[:space:]' <"$dir/test/images/agnhost/VERSION") || return 1
  [ "$want" = "$AGNHOST_VERSION" ] && return 0
  echo "build.sh: kubernetes $KUBERNETES_VERSION ships agnhost $want, but $PINS_FILES pin AGNHOST_VERSION=$AGNHOST_VERSION: change the pin" >&2
  return 1
}

# build_one NAME OUTDIR: build NAME into OUTDIR. It runs where errexit is off (a caller's ||), so
# every step that can fail says so itself.
build_one() {
  local name=$1 out=$2 comp kind what flags mod sub src
  comp=$(field "$name" 2)
  kind=$(field "$name" 3)
  what=$(field "$name" 4)
  case "$kind" in
    bin | test)
      if [ "$name" = agnhost ]; then check_agnhost || return 1; fi
      flags=$(ldflags "$comp" "$name") || return 1
      local cmd=(go build)
      [ "$kind" = test ] && cmd=(go test -c)
      run "$comp" "${cmd[@]}" -trimpath -buildvcs=false -ldflags "$flags" \
        -o "$out/$name" "$what"
      ;;
    crds)
      mod=${what%%:*}
      sub=${what#*:}
      run "$comp" go mod download "$mod" || return 1
      src=$(run "$comp" go list -m -f '{{with .Replace}}{{.Dir}}{{else}}{{.Dir}}{{end}}' "$mod") ||
        return 1
      mkdir -p "$out/$name" || return 1
      # Every CRD file; kustomization.yaml is no object `kubectl apply -f DIR` could take.
      find "$src/$sub" -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml \
        -exec install -m 0644 -t "$out/$name" {} + || return 1
      if [ -z "$(find "$out/$name" -name '*.yaml')" ]; then
        echo "build.sh: $comp: no CRD files under $mod/$sub ($src/$sub)" >&2
        return 1
      fi
      ;;
  esac
}

# build_component COMPONENT NAME...: build the missing ones in the partial directory, then rename:
# the whole directory when it is new, else each program into the one already there. Like
# build_one, it checks each step itself.
build_component() {
  local comp=$1 dir partial name start lockfd
  shift
  dir=$(comp_dir "$comp")
  partial="$dir.partial"
  mkdir -p "$cache" || return 1
  exec {lockfd}>"$dir.lock" || return 1
  # Two builds of one component at once would share the partial directory; the second waits
  # and then finds the programs there.
  flock "$lockfd" || return 1
  local missing=() rc=0
  for name in "$@"; do present "$name" || missing+=("$name"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    rm -rf "$partial" && mkdir -p "$partial" || rc=1
    for name in "${missing[@]}"; do
      [ "$rc" -eq 0 ] || break
      start=$SECONDS
      echo "build.sh: $comp $(version_of "$comp"): building $name" >&2
      if build_one "$name" "$partial"; then
        echo "build.sh: $comp $(version_of "$comp"): $name built in $((SECONDS - start)) s" >&2
      else
        rc=1
      fi
    done
    if [ "$rc" -eq 0 ] && [ -d "$dir" ]; then
      for name in "${missing[@]}"; do mv -T "$partial/$name" "$dir/$name" || rc=1; done
      rmdir "$partial" || rc=1
    elif [ "$rc" -eq 0 ]; then
      mv -T "$partial" "$dir" || rc=1
    fi
    [ "$rc" -eq 0 ] || rm -rf "$partial"
  fi
  exec {lockfd}>&-
  return "$rc"
}

build() {
  local names comp failed=() t
  # Unknown names fail here, before anything is built.
  for t in "$@"; do group "$t" >/dev/null || field "$t" 1 >/dev/null; done
  mapfile -t names < <(expand "$@")
  local todo=()
  for name in "${names[@]}"; do present "$name" || todo+=("$name"); done
  if [ "${#todo[@]}" -gt 0 ]; then
    ensure_build_deps
    for comp in $(for n in "${todo[@]}"; do field "$n" 2; done | awk '!seen[$0]++'); do
      local mine=()
      for name in "${todo[@]}"; do [ "$(field "$name" 2)" = "$comp" ] && mine+=("$name"); done
      build_component "$comp" "${mine[@]}" || failed+=("$comp")
    done
  fi
  for name in "${names[@]}"; do present "$name" && echo "$name $(path_of "$name")"; done
  [ "${#failed[@]}" -eq 0 ] || die "failed: ${failed[*]} (the go command is named above)"
}

# The version each program reports about itself.
versions() {
  local name p
  for name in $(expand "${@:-everything}"); do
    present "$name" || { echo "$name (not built)"; continue; }
    p=$(path_of "$name")
    case "$name" in
      *-crds) echo "$name $(find "$p" -name '*.yaml' | wc -l) CRD files" ;;
      *-manifests) echo "$name $(find "$p" -name '*.yaml' | wc -l) manifest files" ;;
      kubectl) echo "$name $("$p" version --client 2>&1 | head -1)" ;;
      etcdctl) echo "$name $("$p" version 2>&1 | head -1)" ;;
      helm) echo "$name $("$p" version --short 2>&1 | head -1)" ;;
      ginkgo | kubeadm) echo "$name $("$p" version 2>&1 | head -1)" ;;
      coredns) echo "$name $("$p" -version 2>&1 | head -1)" ;;
      # The project's client over the module's library (tools/cluster/go/external-snapshot-
      # metadata/lister), with no version flag: the library's version, from the build information.
      snapshot-metadata-lister)
        echo "$name $(PATH=$PATH:/usr/local/go/bin go version -m "$p" 2>&1 |
          awk '($1 == "mod" || $1 == "dep") && $2 ~ /external-snapshot-metadata$/ {print $2, $3}')" ;;
      *) echo "$name $("$p" --version 2>&1 | head -1)" ;;
    esac
  done
}

case "${1:-}" in
  "" | -h | --help | help) usage ;;
  path)
    [ $# -eq 2 ] || { usage >&2; exit 2; }
    field "$2" 1 >/dev/null
    path_of "$2"
    ;;
  list)
    programs | while read -r name comp _ what; do
      echo "$name $comp $(version_of "$comp") $what"
    done
    ;;
  versions)
    shift
    for t in "$@"; do group "$t" >/dev/null || field "$t" 1 >/dev/null; done
    versions "$@"
    ;;
  *) build "$@" ;;
esac
