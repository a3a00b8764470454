# shellcheck shell=bash
# Shared by tools/cluster/images.sh and its recipes (sourced, not run).
#
# Where things live: every archive under $images_dir (in the cache outside the checkout), named
# <registry>/<path>/<tag>-<key>.tar after the image's normalized name, where <key> is a hash of
# everything the image is made from (the recipe, the sources or binary, the base). A changed input
# is a new file name, so an archive is never stale under its own name, and a warm run only hashes.
# buildah keeps its own storage under $images_dir/buildah, apart from any other buildah user.

root=$(cd "$here/../.." && pwd)
images_dir=${CSI_HOSTPATH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-hostpath}/images
table="$here/images/images.txt"

say() { echo "images: $*" >&2; }
died=
die() { say "$*"; died=1; exit 1; }

# bah ARGS: buildah on the project's own storage (overlay driver, chroot isolation for RUN).
bah() {
  buildah --root "$images_dir/buildah/storage" --runroot "$images_dir/buildah/run" \
    --storage-driver overlay "$@"
}

# need_debs CMD:PACKAGE...: install the Debian packages whose command (or file) is missing.
need_debs() {
  local item cmd pkg missing=()
  for item in "$@"; do
    cmd=${item%%:*} pkg=${item#*:}
    if [ "${cmd#/}" != "$cmd" ]; then [ -e "$cmd" ] && continue
    else command -v "$cmd" >/dev/null 2>&1 && continue; fi
    case " ${missing[*]} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    die "missing Debian packages: ${missing[*]} (as root: apt-get install ${missing[*]})"
  fi
  say "installing: apt-get install -y ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# need_pkg PACKAGE: install a Debian package that is not installed (one that ships no command
# of its own name, or whose command another package also ships).
need_pkg() {
  dpkg-query -W -f '${Status}' "$1" 2>/dev/null | grep -q ' installed$' && return 0
  need_debs "/nonexistent/$1:$1"
}

# table_rows: the rows of images.txt as "NAME:TAG RECIPE SOURCE", the driver's tag filled in.
table_rows() {
  local version name recipe source
  version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml" | head -n 1)
  while read -r name recipe source _; do
    case "$name" in "" | \#*) continue ;; esac
    echo "${name//@VERSION@/$version} $recipe $source"
  done <"$table"
}

# normalized NAME:TAG: the name containerd stores (docker.io/library/ for a bare name).
normalized() {
  local ref=$1 first=${1%%/*}
  if [ "$first" = "$ref" ]; then ref="docker.io/library/$ref"
  elif ! { [[ $first == *.* ]] || [[ $first == *:* ]] || [ "$first" = localhost ]; }; then
    ref="docker.io/$ref"
  fi
  echo "$ref"
}

# archive_path NAME:TAG KEY: where that version of the image's archive lives.
archive_path() {
  local ref
  ref=$(normalized "$1")
  echo "$images_dir/${ref%:*}/${ref##*:}-$2.tar"
}

# hash_stdin: a short content hash of standard input.
hash_stdin() { sha256sum | cut -c1-16; }

# hash_files FILE...: one hash over the names and contents of FILEs.
hash_files() {
  local f
  for f in "$@"; do printf '%s\n' "${f#"$root"/}"; sha256sum <"$f"; done | hash_stdin
}

# publish NAME:TAG IMAGE ARCHIVE: push a buildah image to ARCHIVE as a docker-archive that
# `ctr images import` names NAME:TAG (an oci-archive imports unnamed), written as ARCHIVE.partial
# and renamed, so an interrupted build never looks finished; older versions of the image go.
# The archive lists every name IMAGE has in buildah's storage, so the recipes commit IMAGE under
# NAME:TAG's own normalized name (build_name) and nothing else.
publish() {
  local ref=$1 image=$2 archive=$3 old
  mkdir -p "$(dirname "$archive")"
  rm -f "$archive.partial"
  bah push -q "$image" "docker-archive:$archive.partial:$ref" >/dev/null
  mv "$archive.partial" "$archive"
  for old in "${archive%-*}"-????????????????.tar; do
    [ "$old" = "$archive" ] || rm -f "$old"
  done
}

# build_name NAME:TAG: the name a recipe commits its image under in buildah's storage.
build_name() { normalized "$1"; }

# What a build leaves behind on any exit: scratch directories and buildah working containers.
scratch_dirs=()
scratch_ctrs=()

# scratch NAME: make a scratch directory beside the archives (same filesystem, so a rename is
# atomic) and set $scratch to it; it is removed when the script exits.
scratch() {
  mkdir -p "$images_dir/tmp"
  scratch=$(mktemp -d "$images_dir/tmp/$1.XXXXXX")
  scratch_dirs+=("$scratch")
}

# working_ctr IMAGE: `buildah from IMAGE`, its ID in $ctr, removed when the script exits.
working_ctr() {
  ctr=$(bah from -q "$1")
  scratch_ctrs+=("$ctr")
}

# clean_tree DIR: unmount whatever is mounted under DIR (a failed debootstrap leaves /proc and
# /sys mounted in its root), deepest first, then remove DIR without crossing into a mount.
clean_tree() {
  local dir=$1 mnt
  [ -d "$dir" ] || return 0
  awk -v d="$dir/" 'index($5 "/", d) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r mnt; do umount "$mnt" 2>/dev/null || umount -l "$mnt" || true; done
  rm -rf --one-file-system "$dir"
}

cleanup_scratch() {
  local c d
  for c in "${scratch_ctrs[@]}"; do bah rm "$c" >/dev/null 2>&1 || true; done
  for d in "${scratch_dirs[@]}"; do clean_tree "$d"; done
}

# bud NAME:TAG IMAGE DOCKERFILE CONTEXT [ARG...]: buildah bud into IMAGE, RUN steps with chroot
# isolation (no network namespace: the steps reach Debian's archive and PyPI as this machine
# does); its log is shown when it fails.
bud() {
  local ref=$1 image=$2 file=$3 context=$4
  shift 4
  scratch bud
  if ! bah bud -q --isolation chroot "$@" -t "$image" -f "$file" "$context" >"$scratch/bud.log" 2>&1; then
    tail -n 30 "$scratch/bud.log" >&2
    die "$ref: buildah bud failed (log above)"
  fi
}

# drop_image IMAGE: remove an image from buildah's storage once its archive is written.
drop_image() { bah rmi -f "$1" >/dev/null 2>&1 || true; }

# mozilla_bundle FILE: the CA bundle of Debian's ca-certificates package (its Mozilla set only),
# never the host's /etc/ssl/certs file, which may hold certificates of this machine's own.
mozilla_bundle() {
  local f
  need_debs /usr/share/ca-certificates/mozilla:ca-certificates
  : >"$1"
  for f in /usr/share/ca-certificates/mozilla/*.crt; do cat "$f" >>"$1"; done
}
