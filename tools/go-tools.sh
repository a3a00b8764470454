#!/usr/bin/env bash
# Install the pinned Go programs of tools/go-tools.txt from the Go module proxy.
#
#   tools/go-tools.sh install NAME...   go install each one unless its pinned build is cached;
#                                       prints nothing but errors; exit 1 if one can't be had
#   tools/go-tools.sh path NAME         print where NAME's pinned binary is (or will be)
#   tools/go-tools.sh --soft install …  as install, but a failure is a warning (exit 0): the tests
#                                       that need the program skip and name this command
#
# The cache is $CSI_HOSTPATH_CACHE (default ~/.cache/csi-hostpath), outside the checkout, so a
# fresh clone on the same machine reuses what an earlier one built.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pins="$here/go-tools.txt"
cache=${CSI_HOSTPATH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-hostpath}
soft=0
if [ "${1:-}" = --soft ]; then soft=1; shift; fi

usage() { sed -n '2,11p' "$0" >&2; exit 2; }

# pin NAME: print "PACKAGE VERSION" for NAME, or fail naming the file.
pin() {
  local name=$1 n pkg ver
  while read -r n pkg ver _; do
    case "$n" in "" | \#*) continue ;; esac
    if [ "$n" = "$name" ]; then echo "$pkg $ver"; return 0; fi
  done <"$pins"
  echo "go-tools: no pin for '$name' in $pins" >&2
  return 1
}

bin_path() {
  local name=$1 pkg ver
  read -r pkg ver < <(pin "$name")
  echo "$cache/go/$name-$ver/$name"
}

install_one() {
  local name=$1 pkg ver dest
  read -r pkg ver < <(pin "$name")
  dest=$(dirname "$(bin_path "$name")")
  [ -x "$dest/$name" ] && return 0
  if ! command -v go >/dev/null 2>&1; then
    echo "go-tools: '$name' needs Go to install (go install $pkg@$ver): no 'go' on PATH" >&2
    return 1
  fi
  mkdir -p "$dest.partial"
  # A partial directory, renamed at the end: an interrupted install never looks finished.
  if ! GOBIN="$dest.partial" go install "$pkg@$ver"; then
    echo "go-tools: go install $pkg@$ver failed" >&2
    rm -rf "$dest.partial"
    return 1
  fi
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
}

case "${1:-}" in
  path) [ $# -eq 2 ] || usage; bin_path "$2" ;;
  install)
    shift
    [ $# -ge 1 ] || usage
    rc=0
    for name in "$@"; do install_one "$name" || rc=1; done
    if [ "$rc" -ne 0 ] && [ "$soft" -eq 1 ]; then
      echo "go-tools: continuing; the tests that need it skip and say: bash tools/go-tools.sh install $*" >&2
      rc=0
    fi
    exit "$rc"
    ;;
  *) usage ;;
esac
