# agnhost, the program of the Kubernetes e2e suite's test image, built here from k8s.io/kubernetes
# (tools/cluster/build.sh agnhost) and laid on the Debian base of tools/cluster/images.sh, which
# builds this file with BASE_IMAGE set and the binary as the only file of the build context.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE}

# The tools e2e tests run inside agnhost pods besides agnhost itself: curl and nc (HTTP and TCP
# checks), ip and ss (iproute2), iperf, dig (bind9-dnsutils); nsenter and mount are in the base.
# DL3008 (pin apt package versions) is ignored on purpose: Debian's archive keeps only the newest
# version of each package in a stable release, so an exact pin stops building after the next
# security update. The base image (bookworm) is what fixes the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl netcat-openbsd iproute2 iperf bind9-dnsutils \
    && rm -rf /var/lib/apt/lists/*

# A user and a group defined in the image (uid 1000 in gid 50000), which the suite's
# SupplementalGroups specs expect to find, and the directory netexec's uploads go to.
RUN groupadd -g 50000 group-defined-in-image \
    && useradd -u 1000 -M -s /bin/sh -G group-defined-in-image user-defined-in-image \
    && mkdir /uploads

COPY agnhost /agnhost
# Some entrypoint specs run the same program under a second name.
RUN ln -s agnhost /agnhost-2

ENTRYPOINT ["/agnhost"]
CMD ["pause"]
