# The e2e suite's jessie-dnsutils test image (test/images/jessie-dnsutils: a Debian with dnsutils),
# made of Debian's dnsutils on the Debian base of tools/cluster/images.sh, which passes BASE_IMAGE:
# bookworm, not the jessie of its name. The storage specs that run several pods on one volume
# (multivolume's concurrent access) run their shell scripts in it.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE}

# DL3008 (pin apt package versions) is ignored on purpose, as in nginx.Dockerfile: Debian's
# archive keeps only the newest version of each package of a stable release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends dnsutils \
    && rm -rf /var/lib/apt/lists/*
