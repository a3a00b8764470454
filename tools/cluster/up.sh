#!/usr/bin/env bash
# Bring up a real Kubernetes cluster on this machine, from binaries (make cluster-up).
#
#   tools/cluster/up.sh          etcd, kube-apiserver, kube-controller-manager and kube-scheduler
#                                as host processes; $CLUSTER_NODES (2) nodes, each in its own
#                                namespaces with its own containerd, kubelet and kube-proxy; the
#                                image archives of tools/cluster/images.sh list imported into
#                                every node. Waits until every node is Ready and a pod runs on
#                                each, then prints the kubeconfig's path (.run/cluster/kubeconfig;
#                                .run/NAME/kubeconfig for CLUSTER_NAME=NAME)
#   tools/cluster/up.sh --settings  print the names, addresses and ports this CLUSTER_NAME gets
#                                (those it recorded, if it is up), touching nothing
#   tools/cluster/up.sh --help
#
# Idempotent: a cluster that is up and healthy is left as it is; a half-up one is taken down
# first. On failure it prints the failing component's last log lines and takes down what it
# started. Needs root. Settings, from the environment:
#   CLUSTER_NAME=NAME        a cluster of that name beside the default one (csi-hostpath): its
#                            own root, links, cgroups, addresses and ports (docs/kind.md); one
#                            of each name on the machine
#   CLUSTER_SLOT=S           its addresses and ports (1 to 5; default: the lowest free slot)
#   CLUSTER_NODES=2          how many nodes
#   CLUSTER_POOL=shared      /var/lib/csi-hostpath/pool is one host directory for every node;
#                            local: each node's own (for the chart's pool.scope=local)
#   CLUSTER_KEEP=1           on failure, leave what was started to look at (make cluster-down)
#   CLUSTER_BIN_DIR=DIR      take any of the programs from DIR instead of the pinned builds
#   CLUSTER_TIMEOUT=180      seconds each readiness wait may take
set -euo pipefail
# shellcheck source=tools/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# print_settings: what --settings prints, one NAME=VALUE a line.
print_settings() {
  local v i
  load_settings
  for v in $CLUSTER_SETTINGS CLUSTER_HOST_IP; do printf '%s=%s\n' "$v" "${!v}"; done
  printf 'CLUSTER_CGROUP=/%s\nKUBECONFIG=%s\n' "$CLUSTER_TAG" "$CLUSTER_RUN/kubeconfig"
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    printf 'NODE_%s_NAME=%s\nNODE_%s_IP=%s\nNODE_%s_VETH=%s\nNODE_%s_POD_CIDR=%s\nNODE_%s_CGROUP=%s\nNODE_%s_DIR=%s\n' \
      "$i" "$(node_name "$i")" "$i" "$(node_ip "$i")" "$i" "$(node_veth "$i")" \
      "$i" "$(node_pod_cidr "$i")" "$i" "$(node_cgroup "$i")" "$i" "$(node_dir "$i")"
  done
}

case "${1:-}" in
  -h | --help) usage "$0"; exit 0 ;;
  --settings) print_settings; exit 0 ;;
  "") ;;
  *) usage "$0" >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || die "needs root (namespaces, mounts, a bridge, cgroups)"

KUBECTL_ARGS=(--kubeconfig "$CLUSTER_RUN/kubeconfig")
failed_command='' failed_line=''
kubectl() { "$KUBECTL" "${KUBECTL_ARGS[@]}" "$@"; }

# Install what the host lacks (tools/cluster/deps.txt), with apt.
ensure_deps() {
  local tool pkg missing=()
  while read -r tool pkg _; do
    case "$tool" in "" | \#*) continue ;; esac
    if [ "${tool#/}" != "$tool" ]; then [ -e "$tool" ] && continue
    else command -v "$tool" >/dev/null 2>&1 && continue; fi
    case " ${missing[*]} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
  done <"$CLUSTER_TOOLS/deps.txt"
  [ "${#missing[@]}" -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "missing Debian packages: ${missing[*]} (no apt-get here)"
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

# healthy: the cluster of an earlier up.sh still answers and its nodes are Ready.
healthy() {
  [ -f "$CLUSTER_STATE/settings.env" ] && [ -f "$CLUSTER_RUN/kubeconfig" ] || return 1
  local ready
  ready=$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True) || return 1
  [ "$ready" -eq "$CLUSTER_NODES" ]
}

# start_host NAME BIN ARGS...: a control-plane process, in the cluster's own cgroup, its own
# session, its log and PID under .run/cluster.
start_host() {
  local name=$1 pid
  shift
  pid=$(
    join_cgroup "/$CLUSTER_TAG/control-plane"
    setsid "$@" </dev/null >>"$CLUSTER_RUN/logs/$name.log" 2>&1 &
    echo $!
  )
  echo "$pid" >"$CLUSTER_RUN/pids/$name.pid"
}

# A host directory the nodes bind over must exist; the ones made here are removed by down.sh.
mountpoint_dir() {
  local d=$1 made=()
  while [ ! -d "$d" ]; do made+=("$d"); d=$(dirname "$d"); done
  mkdir -p "$1"
  [ "${#made[@]}" -eq 0 ] || printf '%s\n' "${made[@]}" >>"$CLUSTER_STATE/created-dirs"
}

host_network() {
  if ! ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1; then
    ip link add "$CLUSTER_BRIDGE" type bridge
  fi
  ip addr replace "$CLUSTER_HOST_IP/24" dev "$CLUSTER_BRIDGE"
  ip link set "$CLUSTER_BRIDGE" up
  # The API server listens on 127.0.0.1 only. The nodes reach it at the bridge's address, which
  # the host turns into 127.0.0.1 (route_localnet lets a packet from the bridge go there); so
  # nothing of the cluster ever listens on another interface of the host.
  sysctl -qw "net.ipv4.conf.$CLUSTER_BRIDGE.route_localnet=1"
  rule nat PREROUTING -i "$CLUSTER_BRIDGE" -d "$CLUSTER_HOST_IP" -p tcp --dport "$CLUSTER_API_PORT" \
    -j DNAT --to-destination "127.0.0.1:$CLUSTER_API_PORT"
  # Nothing is forwarded between the cluster's bridge and any other interface, whatever the
  # host's ip_forward says: the nodes and pods have no way out of the machine.
  rule filter FORWARD -i "$CLUSTER_BRIDGE" ! -o "$CLUSTER_BRIDGE" -j DROP
  rule filter FORWARD ! -i "$CLUSTER_BRIDGE" -o "$CLUSTER_BRIDGE" -j DROP
}

# rule TABLE CHAIN SPEC...: insert an iptables rule tagged with the cluster's comment, once.
rule() {
  local table=$1 chain=$2
  shift 2
  iptables -w -t "$table" -C "$chain" "$@" -m comment --comment "$CLUSTER_TAG" 2>/dev/null \
    || iptables -w -t "$table" -I "$chain" 1 "$@" -m comment --comment "$CLUSTER_TAG"
}

control_plane() {
  local pki=$CLUSTER_RUN/pki etcd_url=http://127.0.0.1:$CLUSTER_ETCD_PORT
  mkdir -p "$CLUSTER_ROOT/etcd"
  chmod 700 "$CLUSTER_ROOT/etcd"
  start_host etcd "$(cluster_bin etcd)" --name "$CLUSTER_TAG" --data-dir "$CLUSTER_ROOT/etcd" \
    --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
    --initial-cluster "$CLUSTER_TAG=http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
    --listen-metrics-urls "" --log-level warn
  wait_for "etcd health" "$CLUSTER_TIMEOUT" etcd curl -fsS "$etcd_url/health"

  start_host kube-apiserver "$(cluster_bin kube-apiserver)" \
    --etcd-servers "$etcd_url" \
    --bind-address 127.0.0.1 --secure-port "$CLUSTER_API_PORT" --advertise-address "$CLUSTER_HOST_IP" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range "$CLUSTER_SERVICE_CIDR" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
    --allow-privileged=true --profiling=false --v 1
  wait_for "kube-apiserver readiness" "$CLUSTER_TIMEOUT" kube-apiserver \
    curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://127.0.0.1:$CLUSTER_API_PORT/readyz"
  # `kubectl logs` and `exec` go from the API server to the kubelets, as this user.
  kubectl create clusterrolebinding kube-apiserver-kubelet-client --clusterrole system:kubelet-api-admin \
    --user kube-apiserver-kubelet-client --dry-run=client -o yaml | kubectl apply -f - >/dev/null

  start_host kube-controller-manager "$(cluster_bin kube-controller-manager)" \
    --kubeconfig "$pki/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$pki/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$pki/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$CLUSTER_CONTROLLER_MANAGER_PORT" \
    --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --service-cluster-ip-range "$CLUSTER_SERVICE_CIDR" --cluster-cidr "$CLUSTER_POD_CIDR" \
    --allocate-node-cidrs=false --profiling=false --v 1
  start_host kube-scheduler "$(cluster_bin kube-scheduler)" \
    --config "$CLUSTER_RUN/config/kube-scheduler.yaml" \
    --authentication-kubeconfig "$pki/scheduler.kubeconfig" \
    --authorization-kubeconfig "$pki/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$CLUSTER_SCHEDULER_PORT" --profiling=false --v 1
}

# The image archives every node gets: the pause image, then tools/cluster/images.sh list (the
# archives that are built). Those not built yet are named, once.
image_list() {
  local listed name
  bash "$CLUSTER_TOOLS/pause.sh" list
  [ -f "$CLUSTER_TOOLS/images.sh" ] || return 0
  listed=$(bash "$CLUSTER_TOOLS/images.sh" list)
  [ -z "$listed" ] || echo "$listed"
  if [ "${1:-}" = --report ]; then
    local names
    names=$(while read -r name _; do if [ -n "$name" ]; then normalized "$name"; fi; done <<<"$listed")
    bash "$CLUSTER_TOOLS/images.sh" names | while read -r name; do
      grep -qxF "$(normalized "$name")" <<<"$names" \
        || log "image $name: no archive yet, not loaded (tools/cluster/images.sh build makes it)"
    done
  fi
}

# normalized NAME: the full name containerd files an image under (busybox:1.37.0 is
# docker.io/library/busybox:1.37.0), as the kubelet's short names are resolved.
normalized() {
  local first=${1%%/*}
  if [ "$first" = "$1" ]; then echo "docker.io/library/$1"
  elif [[ "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then echo "docker.io/$1"
  else echo "$1"; fi
}

node_up() {
  local i=$1 name node=("$CLUSTER_TOOLS/node.sh") images present
  name=$(node_name "$i")
  bash "${node[@]}" create "$i"
  cp "$CLUSTER_RUN/nodes/$name/10-csi-hostpath.conflist" "$(node_dir "$i")/cni/"
  bash "${node[@]}" start "$i" containerd
  images=$(image_list)
  while read -r image archive; do
    bash "${node[@]}" exec "$i" -- ctr --address /run/containerd/containerd.sock -n k8s.io \
      images import "$archive" >/dev/null \
      || die "$name: ctr images import $archive failed"
  done <<<"$images"
  present=$(bash "${node[@]}" exec "$i" -- ctr --address /run/containerd/containerd.sock -n k8s.io images ls -q)
  while read -r image archive; do
    grep -qxF "$(normalized "$image")" <<<"$present" \
      || die "$name: $archive imported, but no image is named $image"
  done <<<"$images"
  bash "${node[@]}" start "$i" kubelet
  bash "${node[@]}" start "$i" kube-proxy
}

# A pod on every node, of the busybox image when there is one (the pause image until then).
check_pods() {
  local image i name command=
  image=$(image_list | awk '$1 ~ /busybox/ {print $1; exit}')
  if [ -n "$image" ]; then command='command: ["sleep", "3600"]'; else image=$CLUSTER_PAUSE_IMAGE; fi
  wait_for "the default service account" "$CLUSTER_TIMEOUT" kube-controller-manager \
    kubectl -n default get serviceaccount default
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    name=$(node_name "$i")
    kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: cluster-check-$name
  namespace: default
spec:
  nodeSelector:
    kubernetes.io/hostname: $name
  terminationGracePeriodSeconds: 1
  containers:
  - name: check
    image: $image
    imagePullPolicy: IfNotPresent
    $command
EOF
  done
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    name=$(node_name "$i")
    wait_for "a pod running on $name" "$CLUSTER_TIMEOUT" "$name.kubelet" \
      kubectl -n default wait --for=jsonpath='{.status.phase}'=Running --timeout=2s "pod/cluster-check-$name"
  done
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    kubectl -n default delete pod --wait=false "cluster-check-$(node_name "$i")" >/dev/null
  done
}

# free_ports: what the cluster listens on in the host's network namespace must be free, its node
# and pod networks no other interface's, its link names no other link's.
free_ports() {
  local port used link
  for port in "$CLUSTER_API_PORT" "$CLUSTER_ETCD_PORT" "$CLUSTER_ETCD_PEER_PORT" \
    "$CLUSTER_CONTROLLER_MANAGER_PORT" "$CLUSTER_SCHEDULER_PORT"; do
    used=$(ss -Hltnp "sport = :$port" 2>/dev/null)
    [ -z "$used" ] || die "port $port is taken on this host: $used"
  done
  used=$(ip -o route show "$CLUSTER_NET_PREFIX.0/24" 2>/dev/null)
  [ -z "$used" ] || die "$CLUSTER_NET_PREFIX.0/24 is routed already ($used): set CLUSTER_NET_PREFIX"
  used=$(ip -o route show root "$CLUSTER_POD_CIDR" 2>/dev/null)
  [ -z "$used" ] || die "the pod range $CLUSTER_POD_CIDR is routed already ($used): set CLUSTER_POD_PREFIX"
  for link in "$CLUSTER_BRIDGE" $(for ((i = 1; i <= CLUSTER_NODES; i++)); do node_veth "$i"; done); do
    [ "${#link}" -le 15 ] || die "link name $link is longer than 15 characters: a shorter CLUSTER_NAME, or fewer nodes"
  done
}

on_error() {
  local rc=$?
  trap - ERR EXIT
  if [ "$rc" -ne 0 ]; then
    [ -z "${failed_command:-}" ] || log "failed at up.sh line $failed_line: $failed_command"
    if [ "${CLUSTER_KEEP:-0}" = 1 ]; then
      log "failed; CLUSTER_KEEP=1 leaves it as it is: logs in $CLUSTER_RUN/logs, make cluster-down$(down_args) ends it"
    else
      log "failed; taking down what was started (logs stay in $CLUSTER_RUN/logs)"
      bash "$CLUSTER_TOOLS/down.sh" >&2 || true
    fi
  fi
  exit "$rc"
}

main() {
  local i start=$SECONDS
  ensure_deps
  KUBECTL=$(cluster_bin kubectl 2>/dev/null) || KUBECTL=false
  if healthy; then
    load_settings
    log "already up"
    echo "$CLUSTER_RUN/kubeconfig"
    return 0
  fi
  claim_name
  if [ -e "$CLUSTER_STATE" ] || [ -d "$CLUSTER_RUN/pids" ]; then
    log "a cluster is half up: taking it down first"
    bash "$CLUSTER_TOOLS/down.sh" >&2
  fi
  # The slot and the settings are claimed at once, so two clusters coming up side by side never
  # take the same addresses.
  cluster_lock
  claim_slot
  free_ports
  mkdir -p "$CLUSTER_STATE"
  save_settings
  cluster_unlock
  # What up.sh runs (pki.sh, render.sh, node.sh, down.sh) gets the same settings.
  for i in $CLUSTER_SETTINGS; do export "${i?}"; done
  # The command that failed, for the message (errtrace: in functions and subshells too).
  set -E
  trap 'failed_command=$BASH_COMMAND failed_line=$LINENO' ERR
  trap on_error EXIT
  # Every binary before anything starts, so a missing one fails before there is anything to undo.
  local programs=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
  for i in "${programs[@]}"; do
    if ! cluster_bin "$i" >/dev/null 2>&1; then
      log "building the pinned programs (tools/cluster/build.sh; cached afterwards)"
      bash "$CLUSTER_TOOLS/build.sh" "${programs[@]}" >/dev/null
      break
    fi
  done
  for i in "${programs[@]}" containerd ctr runc; do cluster_bin "$i" >/dev/null; done
  KUBECTL=$(cluster_bin kubectl)
  bash "$CLUSTER_TOOLS/pause.sh" build
  CLUSTER_PAUSE_BIN=$(bash "$CLUSTER_TOOLS/pause.sh" path bin)
  export CLUSTER_PAUSE_BIN

  mkdir -p "$CLUSTER_ROOT/shared/pool" "$CLUSTER_ROOT/shared/controller"
  rm -rf "$CLUSTER_RUN/logs"
  mkdir -p "$CLUSTER_RUN/logs" "$CLUSTER_RUN/pids" "$CLUSTER_RUN/config" "$CLUSTER_RUN/bin"
  for i in /var/lib/kubelet /var/lib/containerd /etc/cni/net.d /var/log /var/lib/csi-hostpath; do
    mountpoint_dir "$i"
  done
  make_cgroup "/$CLUSTER_TAG/control-plane"

  log "certificates"
  bash "$CLUSTER_TOOLS/pki.sh" "$CLUSTER_RUN/pki"
  cp "$CLUSTER_RUN/pki/admin.kubeconfig" "$CLUSTER_RUN/kubeconfig"
  ln -sf "$KUBECTL" "$CLUSTER_RUN/bin/kubectl"
  bash "$CLUSTER_TOOLS/render.sh" "$CLUSTER_RUN"

  log "network: bridge $CLUSTER_BRIDGE ($CLUSTER_HOST_IP/24)"
  host_network
  log "control plane"
  control_plane
  image_list --report >/dev/null
  # The nodes come up side by side: most of their time is importing the same image archives.
  local started=() failed=0
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    log "node $(node_name "$i") ($(node_ip "$i"))"
    node_up "$i" &
    started+=($!)
  done
  for i in "${started[@]}"; do wait "$i" || failed=1; done
  [ "$failed" = 0 ] || die "a node did not come up (its error is above)"
  log "waiting for $CLUSTER_NODES Ready nodes"
  for ((i = 1; i <= CLUSTER_NODES; i++)); do
    wait_for "node $(node_name "$i") registered" "$CLUSTER_TIMEOUT" "$(node_name "$i").kubelet" \
      kubectl get node "$(node_name "$i")"
    wait_for "node $(node_name "$i") Ready" "$CLUSTER_TIMEOUT" "$(node_name "$i").kubelet" \
      kubectl wait --for=condition=Ready --timeout=2s "node/$(node_name "$i")"
  done
  log "a pod on every node"
  check_pods
  trap - EXIT
  log "up in $((SECONDS - start))s: cluster '$CLUSTER_NAME' (slot $CLUSTER_SLOT, API server 127.0.0.1:$CLUSTER_API_PORT), $CLUSTER_NODES nodes, Kubernetes $("$KUBECTL" version --client | sed -n 's/^Client Version: //p')"
  log "kubectl: export KUBECONFIG=$CLUSTER_RUN/kubeconfig PATH=$CLUSTER_RUN/bin:\$PATH"
  echo "$CLUSTER_RUN/kubeconfig"
}

main
