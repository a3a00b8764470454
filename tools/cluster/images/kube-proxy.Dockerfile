# kube-proxy for a kind node image (tools/kind/node-image.sh), built here from k8s.io/kubernetes
# (tools/cluster/build.sh kube-proxy) on the Debian base of tools/cluster/images.sh, which builds
# this file with BASE_IMAGE set and the binary as the only file of the build context.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE}

# What kube-proxy runs in iptables mode: iptables (Debian's default nft backend, the one the node
# and Docker's own rules in the node use), conntrack to clear stale UDP entries, ipset, and ip.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends iptables conntrack ipset iproute2 kmod \
    && rm -rf /var/lib/apt/lists/*

# kubeadm's DaemonSet starts it by name: `command: [/usr/local/bin/kube-proxy, ...]`.
COPY kube-proxy /usr/local/bin/kube-proxy
