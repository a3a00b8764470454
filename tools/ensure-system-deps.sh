#!/usr/bin/env bash
# Make sure the system tools in tools/system-deps.txt are on PATH.
#
#   tools/ensure-system-deps.sh           install the missing ones (root with apt-get), else say
#                                         exactly what to install and exit 1
#   tools/ensure-system-deps.sh --check   only report; exit 1 if something is missing
#   tools/ensure-system-deps.sh --soft    as the default, but a tool that can't be installed is
#                                         a warning (exit 0): the tests that need it skip
#
# Used by `make test`, `make run` and .ci/run, so a bare Debian machine needs nothing else.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
deps="$here/system-deps.txt"
mode=install
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  --soft) mode=soft ;;
  -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--check|--soft]" >&2; exit 2 ;;
esac

missing_tools=()
missing_pkgs=()
while read -r tool pkg _; do
  case "$tool" in "" | \#*) continue ;; esac
  if ! command -v "$tool" >/dev/null 2>&1; then
    missing_tools+=("$tool")
    case " ${missing_pkgs[*]} " in *" $pkg "*) ;; *) missing_pkgs+=("$pkg") ;; esac
  fi
done <"$deps"

if [ "${#missing_tools[@]}" -eq 0 ]; then
  [ "$mode" = check ] && echo "system tools: all present"
  exit 0
fi

echo "system tools missing: ${missing_tools[*]} (Debian packages: ${missing_pkgs[*]})" >&2
if [ "$mode" != check ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing: apt-get install -y ${missing_pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing_pkgs[@]}" >/dev/null
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  how="sudo apt-get install ${missing_pkgs[*]}"
else
  how="apt-get install ${missing_pkgs[*]}"
fi
if ! command -v apt-get >/dev/null 2>&1; then
  how="$how (no apt-get here: install the packages that ship ${missing_tools[*]} with this system's package manager)"
fi
echo "to install them: $how" >&2
if [ "$mode" = soft ]; then
  echo "continuing: the tests that need them skip and name the package" >&2
  exit 0
fi
exit 1
