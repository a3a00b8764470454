#!/usr/bin/env bash
# make kind-e2e: the experiments of docs/kind.md (a-q, tests/k8s/experiments) on kind, on two node
# shapes, then a check that nothing is left on the host.
#
#   tools/kind-e2e.sh [--dry-run] [--keep] [--only LETTERS] [--plain LETTERS] [--no-plain]
#
# 1. kind-up (tools/kind/up.sh) with examples/kind-config.yaml (one control plane, two workers,
#    the host's /dev in every node), the images loaded with `kind load image-archive`;
#    `python -m tests.k8s.experiments` runs the experiments (--only LETTERS: some of them),
#    installing the chart with helm as a user does; kind-down.
# 2. The same with examples/kind-config-no-dev.yaml, the shape a plain `kind create cluster` gives
#    (each node's /dev a copy made at its start), experiments a, b, d, k and p (--plain LETTERS:
#    others; --no-plain: skip this shape); kind-down.
# 3. Nothing left: no kind container or network, no loop device the nodes' driver attached, no
#    mount of the run's shared directory, no iptables or nftables rule, ip_forward value or
#    network device the host had not at the start (what others on the machine removed meanwhile
#    is theirs), the project's dockerd stopped when this run started it.
# --dry-run prints the steps and runs nothing; --keep leaves the last cluster up (kind-down
# removes it). The shared pool is a directory of the run's own, removed at the end.
# Settings: as tools/kind/up.sh (make passes mk/deploy.mk's; KUBERNETES_VERSION=v1.34.4 runs it all
# on Kubernetes 1.34), and E2E_SET='KEY=VALUE ...' for more chart values.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
# The Kubernetes release and its pins (KUBERNETES_VERSION); an unknown minor stops here.
# shellcheck source=tools/cluster/pins.sh
. tools/cluster/pins.sh

DRY_RUN=0 KEEP=0 ONLY='' PLAIN=abdkp
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY_RUN=1 ;;
    --keep) KEEP=1 ;;
    --only) ONLY=${2:?--only needs letters}; shift ;;
    --plain) PLAIN=${2:?--plain needs letters}; shift ;;
    --no-plain) PLAIN='' ;;
    -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "kind-e2e: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

export KIND_CLUSTER=${KIND_CLUSTER:-csi-hostpath}
# A shared directory of the run's own: its pool and ledger go with it at the end.
export KIND_SHARED_DIR=${KIND_E2E_SHARED_DIR:-/var/lib/csi-hostpath-kind-e2e}
PY=${PY:-.venv/bin/python}
E2E_SET=${E2E_SET:-}

step() { printf '\n=== %s %s\n' "$(date +%H:%M:%S)" "$*"; }
run() {
  printf '+ %s\n' "$*"
  [ "$DRY_RUN" = 1 ] || "$@"
}

# host_state: what must be as it was at the end (the host's network and the run's traces).
host_state() {
  { iptables-legacy-save 2>/dev/null || true; iptables-nft-save 2>/dev/null || true
    ip6tables-legacy-save 2>/dev/null || true; nft list ruleset 2>/dev/null || true
  } | sed -e '/^#/d' -e 's/\[[0-9]*:[0-9]*\]//g'
  echo "ip_forward $(cat /proc/sys/net/ipv4/ip_forward)"
  echo "ipv6 forwarding $(cat /proc/sys/net/ipv6/conf/all/forwarding)"
  ip -o link | awk -F': ' '{print "link", $2}' | sed 's/@.*//'
  [ -e /lib/modules ] && echo "/lib/modules exists"
  return 0
}

experiments() {
  local letters=$1 kubeconfig sets=() kv
  kubeconfig=$repo/.run/kind/$KIND_CLUSTER/kubeconfig
  for kv in $E2E_SET; do sets+=(--set "$kv"); done
  # The experiments reach the nodes with docker exec: the Docker kind-up used.
  if [ "$DRY_RUN" = 0 ]; then
    kv=$(bash tools/kind/docker.sh env)
    export "${kv?}"
  fi
  run "$PY" -m tests.k8s.experiments --kubeconfig "$kubeconfig" \
    --kubectl "$(bash tools/cluster/build.sh path kubectl)" \
    --helm "$(bash tools/cluster/build.sh path helm)" \
    --pool-dir "$KIND_SHARED_DIR/pool" ${letters:+--only "$letters"} "${sets[@]}"
}

failed=()
# shape NAME CONFIG LETTERS: one cluster of that configuration, its experiments, kind-down.
shape() {
  local name=$1 config=$2 letters=$3 rc=0
  step "$name: kind-up ($config)"
  if ! run env KIND_CONFIG="$config" bash tools/kind/up.sh; then
    failed+=("$name: kind-up")
  else
    step "$name: experiments ${letters:-a-q}"
    experiments "$letters" || rc=$?
    [ "$rc" = 0 ] || failed+=("$name: experiments (exit $rc)")
  fi
  if [ "$KEEP" = 1 ] && [ "$name" = "$last" ]; then
    echo "kind-e2e: $KIND_CLUSTER stays up (--keep); make kind-down KIND_SHARED_DIR=$KIND_SHARED_DIR removes it"
    return 0
  fi
  step "$name: kind-down"
  run env KIND_CONFIG="$config" bash tools/kind/down.sh || failed+=("$name: kind-down")
}

began=$SECONDS
if [ "$DRY_RUN" = 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "kind-e2e: needs root (dockerd, loop devices)" >&2; exit 1; }
  if [ -n "$(ls -A "$KIND_SHARED_DIR" 2>/dev/null)" ]; then
    echo "kind-e2e: $KIND_SHARED_DIR is not empty (an earlier run's?): make kind-down KIND_SHARED_DIR=$KIND_SHARED_DIR, then remove it" >&2
    exit 1
  fi
  mkdir -p "$repo/.run"
  host_state >"$repo/.run/kind-e2e-host-before.txt"
fi
last=project
[ -z "$PLAIN" ] || last=plain
step "programs and images the cache lacks (tools/cluster/build.sh kind; images.sh build) for" \
  "Kubernetes $KUBERNETES_VERSION (pins: $PINS_FILES; ginkgo $GINKGO_VERSION, etcd $ETCD_VERSION," \
  "CoreDNS $COREDNS_VERSION, agnhost $AGNHOST_VERSION)"
run bash tools/cluster/build.sh kind
run bash tools/cluster/images.sh build
shape project examples/kind-config.yaml "$ONLY"
[ -z "$PLAIN" ] || shape plain examples/kind-config-no-dev.yaml "$PLAIN"

step "nothing left behind"
if [ "$DRY_RUN" = 0 ] && [ "$KEEP" = 0 ]; then
  out=$(bash tools/kind/docker.sh env 2>/dev/null || true)
  if [ -n "$out" ]; then
    export "${out?}"
    left=$(docker ps -a --filter "label=io.x-k8s.kind.cluster=$KIND_CLUSTER" -q)
    [ -z "$left" ] || failed+=("kind containers left: $left")
  fi
  left=$("$PY" tools/kind/loops.py "$KIND_CLUSTER-control-plane" "$KIND_CLUSTER-worker" "$KIND_CLUSTER-worker2")
  [ -z "$left" ] || failed+=("loop devices left: $left")
  left=$(awk -v d="$KIND_SHARED_DIR/" 'index($5 "/", d) == 1 {print $5}' /proc/self/mountinfo)
  [ -z "$left" ] || failed+=("mounts left: $left")
  rm -rf --one-file-system "$KIND_SHARED_DIR"
  # What is there now and was not before: the machine is shared, so what others removed
  # meanwhile (their clusters' rules and devices) is theirs, and only additions count.
  comm -13 <(sort "$repo/.run/kind-e2e-host-before.txt") <(host_state | sort) \
    >"$repo/.run/kind-e2e-host-added.txt"
  if [ -s "$repo/.run/kind-e2e-host-added.txt" ]; then
    failed+=("the host has what it had not before: $(head -c 600 "$repo/.run/kind-e2e-host-added.txt")")
  fi
  echo "host state: unchanged unless said below; dockerd: $(bash tools/kind/docker.sh status 2>&1 || true)"
fi

echo
if [ "$DRY_RUN" = 1 ]; then echo "kind-e2e: dry run; nothing was run"; exit 0; fi
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'kind-e2e: FAILED after %s s:\n' "$((SECONDS - began))" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "kind-e2e: every experiment passed and nothing was left behind ($((SECONDS - began)) s)"
