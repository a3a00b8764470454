#!/bin/sh
# The pod network's loop on one node (tools/kind/node/kind-net.yaml): every few seconds, read the
# nodes' pod ranges and addresses; write this node's bridge configuration for its own range, and
# route every other node's range through that node. Nothing is masqueraded: pods reach nothing
# beyond the cluster's nodes.
set -u
sa=/var/run/secrets/kubernetes.io/serviceaccount
server=https://${CONTROL_PLANE_ENDPOINT:-$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT}
conf=/etc/cni/net.d/10-kind-net.conflist
q='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}'
while :; do
  if nodes=$(kubectl --server "$server" --token "$(cat "$sa/token")" \
    --certificate-authority "$sa/ca.crt" get nodes -o jsonpath="$q"); then
    echo "$nodes" | while read -r name cidr ip; do
      [ -n "$cidr" ] && [ -n "$ip" ] || continue
      if [ "$name" = "$NODE_NAME" ]; then
        want=$(printf '{"cniVersion":"0.4.0","name":"kind-net","plugins":[{"type":"bridge","bridge":"kind-br0","isGateway":true,"ipMasq":false,"hairpinMode":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"%s"}]],"routes":[{"dst":"0.0.0.0/0"}]}},{"type":"portmap","capabilities":{"portMappings":true}}]}' "$cidr")
        if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
          printf '%s\n' "$want" >"$conf.tmp" && mv "$conf.tmp" "$conf"
          echo "kind-net: $NODE_NAME's pods on $cidr"
        fi
      elif ! ip route show "$cidr" | grep -q "via $ip "; then
        ip route replace "$cidr" via "$ip" && echo "kind-net: $cidr via $ip ($name)"
      fi
    done
  fi
  sleep 5
done
