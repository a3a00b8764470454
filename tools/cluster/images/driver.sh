# shellcheck shell=bash
# The driver image (sourced by images.sh): the project's own Dockerfile, built by buildah on the
# Debian base of base.sh (BASE_IMAGE), with Debian's python3 and the project's wheels. Its inputs
# are the files the Dockerfile copies, so a change to the driver's code is a new archive.

# driver_inputs: every file the image is made from, the build context as .dockerignore keeps it.
driver_inputs() {
  printf '%s\n' "$root/Dockerfile" "$root/.dockerignore" "$root/pyproject.toml" "$root/README.md" \
    "$here/images/driver.sh" "$here/images/driver-smoke.sh"
  find "$root/csi_hostpath" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' | LC_ALL=C sort
}

driver_key() {
  local inputs=()
  mapfile -t inputs < <(driver_inputs)
  { hash_files "${inputs[@]}"; base_image; } | hash_stdin
}

# pip_ca: the CA bundle this machine's pip verifies PyPI with, when one is configured ($PIP_CERT
# or `cert =` in a pip.conf): a machine behind a TLS proxy needs it inside the build too.
pip_ca() {
  local f cert=${PIP_CERT:-}
  if [ -z "$cert" ]; then
    for f in "${PIP_CONFIG_FILE:-}" /etc/pip.conf /etc/xdg/pip/pip.conf \
      "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf"; do
      [ -n "$f" ] && [ -f "$f" ] || continue
      cert=$(sed -n 's/^[[:space:]]*cert[[:space:]]*=[[:space:]]*//p' "$f" | tail -n 1)
      [ -n "$cert" ] && break
    done
  fi
  [ -n "$cert" ] && [ -f "$cert" ] && echo "$cert"
  return 0
}

driver_build() {
  local ref=$1 archive=$3 version image ca started=$SECONDS args=()
  need_debs buildah:buildah
  ensure_base
  version=${ref##*:}
  image=$(build_name "$ref")
  args=(--build-arg "BASE_IMAGE=$base_ref" --build-arg "VERSION=$version")
  ca=$(pip_ca)
  if [ -n "$ca" ]; then
    # The bundle reaches the RUN steps as a bind mount over /mnt (empty in Debian), which leaves
    # nothing in a layer; only the builder stage's pip reads it.
    scratch pip-ca
    cp "$ca" "$scratch/ca.crt"
    args+=(--volume "$scratch:/mnt:ro" --build-arg PIP_CERT=/mnt/ca.crt)
  fi
  say "$ref: buildah bud on $base_ref"
  bud "$ref" "$image" "$root/Dockerfile" "$root" "${args[@]}"
  driver_smoke_buildah "$ref" "$image"
  publish "$ref" "$image" "$archive"
  drop_image "$image"
  say "$ref: $(du -h "$archive" | cut -f1), $((SECONDS - started)) s"
}

# driver_smoke_buildah REF IMAGE: driver-smoke.sh inside the image (buildah run), before it is
# published: --help, then serve on a socket in /tmp and ask it over CSI who it is.
driver_smoke_buildah() {
  local out
  working_ctr "$2"
  if ! out=$(bah run --isolation chroot \
    --volume "$here/images/driver-smoke.sh:/run/driver-smoke.sh:ro" "$ctr" \
    -- sh /run/driver-smoke.sh 2>&1); then
    echo "$out" >&2
    die "$1: the image does not run (driver-smoke.sh, output above)"
  fi
  say "$1: runs: $(echo "$out" | tail -n 1)"
}
