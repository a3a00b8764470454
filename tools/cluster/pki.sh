#!/usr/bin/env bash
# The cluster's certificates and kubeconfigs, made with openssl.
#
#   tools/cluster/pki.sh DIR    write into DIR (made if missing): a CA; the API server's serving
#                               certificate; client certificates for the admin, the controller
#                               manager, the scheduler, kube-proxy, the API server's kubelet
#                               client and each node's kubelet; each kubelet's serving
#                               certificate; the service-account key pair; a kubeconfig per client
#   tools/cluster/pki.sh --help
#
# ECDSA P-256 keys throughout: every component accepts them and they take milliseconds to make.
# The settings (node count, addresses) come from lib.sh and the environment.
set -euo pipefail
# shellcheck source=tools/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
  -h | --help) usage "$0"; exit 0 ;;
  "") usage "$0" >&2; exit 2 ;;
esac
pki=$1
mkdir -p "$pki"
chmod 700 "$pki"
days=3650

key() { openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$1.key" 2>/dev/null; chmod 600 "$pki/$1.key"; }

# mkca NAME: a self-signed CA.
mkca() {
  key "$1"
  openssl req -x509 -new -key "$pki/$1.key" -subj "/CN=$CLUSTER_TAG-$1" -days "$days" -sha256 \
    -addext 'basicConstraints=critical,CA:TRUE' -addext 'keyUsage=critical,keyCertSign,cRLSign' \
    -out "$pki/$1.crt" 2>/dev/null
}

# sign NAME SUBJECT EXTENSIONS [CA]: a key and a certificate signed by CA (the cluster's).
sign() {
  local name=$1 subject=$2 ext=$3 ca=${4:-ca}
  key "$name"
  openssl req -new -key "$pki/$name.key" -subj "$subject" -out "$pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" \
    -CAcreateserial -days "$days" -sha256 -extfile <(printf '%b' "$ext") \
    -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr"
}
client_ext='basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n'
server_ext() {
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$1"
}

# kubeconfig NAME SERVER: a kubeconfig for client certificate NAME, everything embedded, so the
# file alone is enough (it is copied to .run/cluster/kubeconfig for the admin).
kubeconfig() {
  local name=$1 server=$2
  cat >"$pki/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$pki/$name.crt")
    client-key-data: $(base64 -w0 "$pki/$name.key")
contexts:
- name: $CLUSTER_NAME
  context:
    cluster: $CLUSTER_NAME
    user: $name
current-context: $CLUSTER_NAME
EOF
  chmod 600 "$pki/$name.kubeconfig"
}

mkca ca
# The aggregation layer's CA and the client the API server proxies to extension servers as
# (without them, the controller manager and the scheduler log a missing request-header CA).
mkca front-proxy-ca
sign front-proxy-client "/CN=front-proxy-client" "$client_ext" front-proxy-ca

sign apiserver "/CN=kube-apiserver" "$(server_ext "IP:127.0.0.1,IP:$CLUSTER_HOST_IP,IP:$CLUSTER_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")"
sign apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" "$client_ext"
sign admin "/O=system:masters/CN=kubernetes-admin" "$client_ext"
sign controller-manager "/CN=system:kube-controller-manager" "$client_ext"
sign scheduler "/CN=system:kube-scheduler" "$client_ext"
sign kube-proxy "/CN=system:kube-proxy" "$client_ext"

local_api=https://127.0.0.1:$CLUSTER_API_PORT
node_api=https://$CLUSTER_HOST_IP:$CLUSTER_API_PORT
kubeconfig admin "$local_api"
kubeconfig controller-manager "$local_api"
kubeconfig scheduler "$local_api"
kubeconfig kube-proxy "$node_api"
for ((i = 1; i <= CLUSTER_NODES; i++)); do
  name=$(node_name "$i")
  sign "kubelet-$name" "/O=system:nodes/CN=system:node:$name" "$client_ext"
  sign "kubelet-$name-serving" "/CN=$name" "$(server_ext "IP:$(node_ip "$i"),DNS:$name")"
  kubeconfig "kubelet-$name" "$node_api"
done

key sa
openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
rm -f "$pki"/*.srl
