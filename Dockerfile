# The csi-hostpath driver image. One image serves both the controller StatefulSet and the node
# DaemonSet of charts/csi-hostpath; the chart picks the role with `serve --mode`.
#
#   docker build -t csi-hostpath:0.1.0 .        (or: make image)
#
# It is Debian with Debian's own python3: the base is the official Debian image by default, and
# tools/cluster/images.sh passes BASE_IMAGE=<a minbase bookworm root it made with debootstrap>, so
# the same file builds on a machine that reaches no container registry, only Debian and PyPI.
#
# Two stages: the builder turns the project and all its dependencies into wheels and installs
# exactly those wheels (--no-index) into a virtual environment; the final stage copies only that
# environment, so it has no compiler, no pip, no build backend, and what was built as wheels is
# exactly what runs.

# The official image a Docker user pulls; images.sh overrides it with the local debootstrap base.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS builder

ARG VERSION=0.1.0
# Set only by a build whose machine reaches PyPI through a TLS proxy with its own CA (images.sh
# passes the host's pip CA bundle, bind-mounted for the build only); unset, pip uses its default.
ARG PIP_CERT

# python3-venv gives the venv its pip; ca-certificates lets that pip verify PyPI.
# DL3008 (pin apt package versions) is ignored on purpose: Debian's archive keeps only the newest
# version of each package in a stable release, so an exact pin stops building after the next
# security update. The base image (bookworm) is what fixes the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src

# Only what the wheel is built from: a change to tests or docs must not invalidate this layer.
COPY pyproject.toml README.md ./
COPY csi_hostpath ./csi_hostpath

# `pip wheel .` builds the project with its declared build backend (build isolation fetches
# setuptools as pyproject.toml pins it) and collects the wheels of every runtime dependency; the
# install that follows takes those wheels only. pip itself leaves the environment afterwards.
RUN python3 -m venv /opt/csi-hostpath \
    && /opt/csi-hostpath/bin/pip wheel --no-cache-dir --wheel-dir /wheels . \
    && /opt/csi-hostpath/bin/pip install --no-cache-dir --no-index --find-links=/wheels \
        "csi-hostpath==${VERSION}" \
    && /opt/csi-hostpath/bin/pip uninstall -y pip setuptools


FROM ${BASE_IMAGE}

ARG BASE_IMAGE
ARG VERSION=0.1.0

LABEL org.opencontainers.image.title="csi-hostpath" \
      org.opencontainers.image.description="A CSI driver whose volumes are sparse files on loop devices, with a durable publish ledger" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

# python3 runs the driver (the venv below points at Debian's /usr/bin/python3). The node plugin
# shells out to the rest (csi_hostpath/system/linux/; loop devices themselves are driven with
# ioctls): blkid (util-linux), mkfs.ext4, e2fsck and resize2fs (e2fsprogs), mkfs.xfs and
# xfs_growfs (xfsprogs), mount and umount (mount). The kernel's loop-device uevents are read from
# its netlink socket (csi_hostpath/system/linux/uevents.py). No build tools are installed here.
#
# DL3008 is ignored for the reason given in the builder stage (Debian keeps only the newest
# version of each package in a release, so a version pin stops building).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3 util-linux e2fsprogs xfsprogs mount \
    && rm -rf /var/lib/apt/lists/*

COPY --from=builder /opt/csi-hostpath /opt/csi-hostpath

ENV PATH=/opt/csi-hostpath/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# No USER instruction: the image runs as root on purpose. The node plugin attaches loop devices
# (/dev/loop-control ioctls), formats them and mounts them into kubelet's directories, which needs
# root in a privileged container; the controller and the sidecars talk to the driver over a unix
# socket that the driver creates 0600, owned by root. The chart drops every capability from the
# containers that do not need them.
ENTRYPOINT ["csi-hostpath"]
CMD ["--help"]
