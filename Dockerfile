# The csi-hostpath driver image. One image serves both the controller StatefulSet and the node
# DaemonSet of charts/csi-hostpath; the chart picks the role with `serve --mode`.
#
#   docker build -t csi-hostpath:0.1.0 .        (or: make image)
#
# Two stages: the builder turns the project and all its dependencies into wheels; the final stage
# installs only those wheels (--no-index), so it needs no compiler, no build backend and no network
# for Python packages, and what was tested as wheels is exactly what runs.

FROM python:3.11-slim-bookworm AS builder

WORKDIR /src

# Only what the wheel is built from: a change to tests or docs must not invalidate this layer.
COPY pyproject.toml README.md ./
COPY csi_hostpath ./csi_hostpath

# `pip wheel .` builds the project with its declared build backend (build isolation fetches
# setuptools as pyproject.toml pins it) and collects the wheels of every runtime dependency.
RUN pip wheel --no-cache-dir --wheel-dir /wheels .


FROM python:3.11-slim-bookworm

ARG VERSION=0.1.0

LABEL org.opencontainers.image.title="csi-hostpath" \
      org.opencontainers.image.description="A CSI driver whose volumes are sparse files on loop devices, with a durable publish ledger" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim-bookworm"

# The node plugin shells out to these (csi_hostpath/system/linux.py; loop devices themselves are
# driven with ioctls): blkid (util-linux), mkfs.ext4, e2fsck and resize2fs (e2fsprogs), mkfs.xfs
# and xfs_growfs (xfsprogs), mount and umount (mount). pyudev loads libudev1 for the kernel's
# loop-device uevents (csi_hostpath/system/linux_uevents.py). No build tools are installed here.
#
# DL3008 (pin apt package versions) is ignored on purpose: Debian's archive keeps only the newest
# version of each package in a stable release, so an exact pin stops building after the next
# security update. The base image tag (bookworm) is what fixes the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends util-linux e2fsprogs xfsprogs mount libudev1 \
    && rm -rf /var/lib/apt/lists/*

# The wheels are bind-mounted from the builder for this one step, so they never become a layer of
# the final image (RUN --mount needs BuildKit, the default builder since Docker 23).
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels "csi-hostpath==${VERSION}"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# No USER instruction: the image runs as root on purpose. The node plugin attaches loop devices
# (/dev/loop-control ioctls), formats them and mounts them into kubelet's directories, which needs
# root in a privileged container; the controller and the sidecars talk to the driver over a unix
# socket that the driver creates 0600, owned by root. The chart drops every capability from the
# containers that do not need them.
ENTRYPOINT ["csi-hostpath"]
CMD ["--help"]
