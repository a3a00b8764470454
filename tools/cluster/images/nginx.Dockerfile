# The web server image of the Kubernetes e2e suite (its `nginx` test image), made of Debian's
# nginx-light on the Debian base of tools/cluster/images.sh, which passes BASE_IMAGE. The storage
# specs run their scripts in it with /bin/sh; the server itself serves /var/www/html on port 80.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE}

# DL3008 (pin apt package versions) is ignored on purpose: Debian's archive keeps only the newest
# version of each package in a stable release, so an exact pin stops building after the next
# security update. The base image (bookworm) is what fixes the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends nginx-light \
    && rm -rf /var/lib/apt/lists/* \
    && ln -sf /dev/stdout /var/log/nginx/access.log \
    && ln -sf /dev/stderr /var/log/nginx/error.log

EXPOSE 80
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
