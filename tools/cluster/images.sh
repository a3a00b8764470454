#!/usr/bin/env bash
# Every container image the cluster runs, made on this machine without any registry, as archives
# in the cache that `ctr -n k8s.io images import` loads under the exact NAME:TAG the manifests use.
# The images are listed in tools/cluster/images/images.txt.
#
#   tools/cluster/images.sh build [NAME:TAG...]      make what is missing (all images by default);
#                                                    exit 1, naming each image and the command
#                                                    that builds its program, when a program is
#                                                    not built yet (`missing`), or a build failed
#   tools/cluster/images.sh missing                  print "NAME:TAG: WHY (COMMAND)" for each image
#                                                    whose inputs are not there; exit 1 if any
#   tools/cluster/images.sh unmade                   print "NAME:TAG VALUE" for each image the
#                                                    chart's defaults name that is not made here,
#                                                    VALUE the chart setting that replaces it
#   tools/cluster/images.sh list                     print "NAME:TAG ARCHIVE" for every image
#                                                    whose current archive exists, NAME as
#                                                    containerd stores it (a bare name under
#                                                    docker.io/library/, as the kubelet reads it)
#   tools/cluster/images.sh names                    print every NAME:TAG this script makes, as
#                                                    the manifests spell it (the `none` rows not)
#   tools/cluster/images.sh path NAME:TAG            print where its current archive is (or will
#                                                    be); exit 1 if its inputs are not there
#   tools/cluster/images.sh check NAME:TAG [ARG...]  import its archive into a throwaway containerd
#                                                    and run it: its own check, or the image
#                                                    with ARGs as a pod's args (after the
#                                                    entrypoint); --command ARG... replaces the
#                                                    entrypoint too, as a pod's command does
#   tools/cluster/images.sh check-args NAME:TAG      print the arguments of its own check, one a
#                                                    line (no root needed)
#   tools/cluster/images.sh base                     print the path of the Debian base's archive
#                                                    (a docker-archive), made when missing
#
# CSI_HOSTPATH_IMAGES_TABLE=FILE reads another table of the same format instead of images.txt.
#
# Needs root for build and check (buildah, containerd); the Debian packages they need are
# installed with apt-get when missing. The archives live in ${CSI_HOSTPATH_CACHE:-~/.cache/csi-hostpath}/images.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/cluster/images/lib.sh
. "$here/images/lib.sh"
# shellcheck source=tools/cluster/images/base.sh
. "$here/images/base.sh"
# shellcheck source=tools/cluster/images/driver.sh
. "$here/images/driver.sh"
# shellcheck source=tools/cluster/images/go.sh
. "$here/images/go.sh"
# shellcheck source=tools/cluster/images/gobin.sh
. "$here/images/gobin.sh"
# shellcheck source=tools/cluster/images/busybox.sh
. "$here/images/busybox.sh"
# shellcheck source=tools/cluster/images/debian.sh
. "$here/images/debian.sh"
# shellcheck source=tools/cluster/images/containerd.sh
. "$here/images/containerd.sh"

# Another table of the same format, for another set of images (a kind node's: tools/kind/).
table=${CSI_HOSTPATH_IMAGES_TABLE:-$table}

# The agnhost tag follows the Kubernetes minor KUBERNETES_VERSION selects: images.txt says
# @AGNHOST_VERSION@, filled in here rather than in lib.sh's table_rows, because lib.sh is an
# input of every image's key and a change there would make every archive anew.
# shellcheck source=tools/cluster/pins.sh
. "$here/pins.sh"
eval "lib_table_rows() $(declare -f table_rows | tail -n +2)"
table_rows() { lib_table_rows | sed "s#@AGNHOST_VERSION@#$AGNHOST_VERSION#g"; }

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" >&2; exit 2; }

# key_of NAME:TAG RECIPE SOURCE: the hash of the image's inputs; fails when they are not there.
key_of() {
  case "$2" in
    driver) driver_key ;;
    go) go_key "$1" "$3" ;;
    gobin) gobin_key "$1" "$3" ;;
    busybox) busybox_key ;;
    debian) debian_key "$1" "$3" ;;
    *) die "$1: unknown recipe '$2' in $table" ;;
  esac
}

# why_not NAME:TAG RECIPE SOURCE: why key_of failed, with the command that fixes it.
why_not() {
  case "$2" in
    go | gobin) not_built "$3" ;;
    busybox) echo "Debian's busybox-static is not installed" ;;
    debian) debian_why_not "$3" ;;
    *) echo "its inputs are missing" ;;
  esac
}

# row NAME:TAG: the table row of one image, or die naming the known ones.
row() {
  local name recipe source
  while read -r name recipe source; do
    if [ "$name" = "$1" ] || [ "$(normalized "$name")" = "$(normalized "$1")" ]; then
      echo "$name $recipe $source"
      return 0
    fi
  done < <(table_rows)
  die "no image $1 in $table (images.sh names lists them)"
}

# made_rows: the rows of the images this script makes (a `none` row is one it does not).
made_rows() { table_rows | awk '$2 != "none"'; }

# cmd_missing: each image whose inputs are not there, and why; exit 1 if there is one. busybox
# is not one: its Debian package is installed by the build itself.
cmd_missing() {
  local name recipe source n=0
  while read -r name recipe source; do
    [ "$recipe" = busybox ] && continue
    key_of "$name" "$recipe" "$source" >/dev/null 2>&1 && continue
    echo "$name: $(why_not "$name" "$recipe" "$source")"
    n=$((n + 1))
  done < <(made_rows)
  [ "$n" -eq 0 ]
}

cmd_list() {
  local name recipe source key archive
  while read -r name recipe source; do
    key=$(key_of "$name" "$recipe" "$source" 2>/dev/null) || continue
    archive=$(archive_path "$name" "$key")
    [ -f "$archive" ] && echo "$(normalized "$name") $archive"
  done < <(made_rows)
  return 0
}

cmd_path() {
  local name recipe source key
  read -r name recipe source < <(row "$1")
  key=$(key_of "$name" "$recipe" "$source" 2>/dev/null) || die "$name: $(why_not "$name" "$recipe" "$source")"
  archive_path "$name" "$key"
}

build_one() {
  local name=$1 recipe=$2 source=$3 key archive
  [ "$recipe" = none ] && die "$name: not made here; the chart runs without it with --set $source"
  [ "$recipe" = busybox ] && need_pkg busybox-static
  key=$(key_of "$name" "$recipe" "$source" 2>/dev/null) ||
    die "$name: can't be made: $(why_not "$name" "$recipe" "$source")"
  archive=$(archive_path "$name" "$key")
  [ -f "$archive" ] && return 0
  "${recipe}_build" "$name" "$key" "$archive" "$source"
}

cmd_build() {
  local rows=() line rc=0 failed=() started=$SECONDS ref out
  [ "$(id -u)" -eq 0 ] || die "build needs root (buildah, debootstrap)"
  if [ $# -eq 0 ]; then
    mapfile -t rows < <(made_rows)
    # Every program first: a missing one stops the build before anything is made, naming them all.
    out=$(cmd_missing) || die "programs not built yet:"$'\n'"$out"
  else for ref in "$@"; do rows+=("$(row "$ref")"); done; fi
  mkdir -p "$images_dir"
  exec 9>"$images_dir/.lock"
  flock -n 9 || { say "another build holds $images_dir/.lock; waiting"; flock 9; }
  for line in "${rows[@]}"; do
    read -r name recipe source <<<"$line"
    # Each image in a subshell of its own: one failure is reported and the others still build.
    set +e
    (
      set -e
      # A command that fails without a message of its own (set -e) still gets one.
      trap 'rc=$?; cleanup_scratch; [ "$rc" -eq 0 ] || [ -n "$died" ] ||
        say "$name: failed (exit $rc) at: $BASH_COMMAND"' EXIT
      build_one "$name" "$recipe" "$source"
    )
    rc=$?
    set -e
    [ "$rc" -eq 0 ] || failed+=("$name")
  done
  if [ "${#failed[@]}" -gt 0 ]; then die "failed: ${failed[*]}"; fi
  say "done in $((SECONDS - started)) s"
}

# run_image ARCHIVE NAME ID [ARG...]: run the image to its end as the kubelet would start it
# (process_of), in a network namespace of its own with only lo; print what it prints. Each
# container gets a top-level cgroup of its own name, which runc removes with it (ctr's default,
# /<namespace>/<id>, would leave a k8s.io cgroup behind in every hierarchy).
run_image() {
  local archive=$1 name=$2 id=$3 process=()
  shift 3
  mapfile -t process < <(process_of "$archive" "$@")
  c run --rm --runc-root "$ctr_dir/runc" --cgroup "/$id" "$name" "$id" "${process[@]}" </dev/null
}

# check_driver ARCHIVE NAME: the image's own command (--help) prints the usage, and `serve` (the
# entrypoint as the chart runs it) answers CSI Identity calls on its socket: driver-smoke.sh,
# started beside it with `ctr tasks exec`.
check_driver() {
  local archive=$1 name=$2 id=csi-hostpath-check-$$ out process=()
  out=$(run_image "$archive" "$name" "$id-help")
  echo "$out" | grep -q "^usage: csi-hostpath" || die "check: the image's command printed: $out"
  say "check: $name, its own command: $(echo "$out" | head -n 1)"
  mapfile -t process < <(process_of "$archive" serve --endpoint unix:///tmp/csi.sock \
    --mode controller --node-id image-check --state-dir /tmp/state)
  c run -d --runc-root "$ctr_dir/runc" --cgroup "/$id" \
    --mount "type=bind,src=$here/images/driver-smoke.sh,dst=/run/driver-smoke.sh,options=rbind:ro" \
    "$name" "$id" "${process[@]}" >/dev/null
  out=$(c tasks exec --exec-id smoke "$id" sh /run/driver-smoke.sh /tmp/csi.sock 2>&1) ||
    die "check: the driver did not answer: $out"
  say "check: $name ${process[*]}: $(echo "$out" | tail -n 1)"
}

cmd_check() {
  local ref=$1 name recipe source key archive out args=()
  shift
  [ "$(id -u)" -eq 0 ] || die "check needs root (containerd)"
  read -r name recipe source < <(row "$ref")
  key=$(key_of "$name" "$recipe" "$source" 2>/dev/null) || die "$name: $(why_not "$name" "$recipe" "$source")"
  archive=$(archive_path "$name" "$key")
  [ -f "$archive" ] || die "$name: not built (tools/cluster/images.sh build $name)"
  trap 'ctr_down; cleanup_scratch' EXIT
  ctr_up
  ctr_import "$archive" "$name"
  # ctr, unlike the kubelet, takes no short names: run it by the name containerd stores.
  name=$(normalized "$name")
  if [ "${1:-}" = --command ]; then
    shift
    [ $# -gt 0 ] || usage
    c run --rm --runc-root "$ctr_dir/runc" --cgroup "/csi-hostpath-check-$$" "$name" \
      "csi-hostpath-check-$$" "$@"
    return
  fi
  if [ $# -gt 0 ]; then
    run_image "$archive" "$name" "csi-hostpath-check-$$" "$@"
    return
  fi
  [ "$recipe" = driver ] && { check_driver "$archive" "$name"; return; }
  out=$(check_args "$ref") || exit 1
  mapfile -t args <<<"$out"
  out=$(run_image "$archive" "$name" "csi-hostpath-check-$$" "${args[@]}" 2>&1) ||
    die "check: $name ${args[*]} failed: $out"
  case "$source" in
    agnhost.*) [ "$out" = "app version ${name##*:}" ] || die "check: $name --version printed: $out" ;;
  esac
  say "check: $name ${args[*]}: $out"
}

# check_args NAME:TAG: one line per argument of the command that checks the image, given after
# its entrypoint. Each ends by itself: an image run with no arguments may start a shell that
# waits for input, so an image without a check of its own is an error, not a bare run.
check_args() {
  local name recipe source
  read -r name recipe source < <(row "$1")
  case "$recipe:$source" in
    driver:*) printf '%s\n' --help ;;
    # The lister has no --version; Go's flag package answers -h with its usage and status 0.
    go:snapshot-metadata-lister) printf '%s\n' -h ;;
    go:coredns) printf '%s\n' -version ;;
    go:* | gobin:*) printf '%s\n' --version ;;
    busybox:*)
      # shellcheck disable=SC2016 # expanded by the image's sh, not here
      printf '%s\n' sh -c 'echo "$(busybox | head -n 1) as $(id -un), $(ls /bin | wc -l) links in /bin"' ;;
    debian:agnhost.*) printf '%s\n' --version ;;
    debian:nginx.*) printf '%s\n' nginx -t ;;
    debian:jessie-dnsutils.*) printf '%s\n' dig -v ;;
    *) die "check: $name has no check of its own: add one to check_args in $0" ;;
  esac
}

case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  list) [ $# -eq 1 ] || usage; cmd_list ;;
  names) [ $# -eq 1 ] || usage; made_rows | cut -d' ' -f1 ;;
  missing) [ $# -eq 1 ] || usage; cmd_missing ;;
  unmade) [ $# -eq 1 ] || usage; table_rows | awk '$2 == "none" {print $1, $3}' ;;
  path) [ $# -eq 2 ] || usage; cmd_path "$2" ;;
  check) [ $# -ge 2 ] || usage; shift; cmd_check "$@" ;;
  check-args) [ $# -eq 2 ] || usage; check_args "$2" ;;
  base)
    # The Debian base (made when missing) as a docker-archive, for a builder other than buildah.
    [ $# -eq 1 ] || usage
    [ "$(id -u)" -eq 0 ] || die "base needs root (buildah, debootstrap)"
    trap cleanup_scratch EXIT
    ensure_base
    archive="$images_dir/base/debian-$base_suite-$(base_key).tar"
    [ -f "$archive" ] || publish "$base_ref" "$base_ref" "$archive"
    echo "$archive"
    ;;
  *) usage ;;
esac
