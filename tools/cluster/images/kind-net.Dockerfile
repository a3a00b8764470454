# The pod network of a kind node image made here (tools/kind/node-image.sh): kind's own CNI,
# kindnetd, is no Go module the module proxy serves, so each node gets Debian's bridge plugin on
# its own pod range and a route to every other node's range (tools/kind/node/kind-net.sh). Built
# by tools/cluster/images.sh on the Debian base with kubectl (tools/cluster/build.sh kubectl) as
# the only file of the build context.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE}

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends iproute2 \
    && rm -rf /var/lib/apt/lists/*

COPY kubectl /usr/local/bin/kubectl
