# shellcheck shell=bash
# Images of a Dockerfile of tools/cluster/images/ on the Debian base of base.sh (sourced by
# images.sh): the e2e suite's agnhost and nginx. SOURCE is FILE.Dockerfile, or
# FILE.Dockerfile:NAME when the image holds the binary NAME of tools/cluster/build.sh, which is
# then the only file of the build context.

debian_parts() {
  dockerfile=$here/images/${1%%:*}
  binary_name=
  [[ $1 == *:* ]] && binary_name=${1#*:}
  return 0
}

debian_key() {
  local dockerfile binary_name bin=
  debian_parts "$2"
  [ -f "$dockerfile" ] || return 1
  if [ -n "$binary_name" ]; then
    bin=$(binary_of "$binary_name")
    [ -n "$bin" ] || return 1
  fi
  { hash_files "$dockerfile" "$here/images/debian.sh" "$here/images/lib.sh"; base_image
    [ -z "$bin" ] || stat -c '%n %s %Y' "$bin"; } | hash_stdin
}

debian_why_not() {
  local dockerfile binary_name
  debian_parts "$1"
  if [ ! -f "$dockerfile" ]; then echo "there is no $dockerfile"
  else not_built "$binary_name"; fi
}

debian_build() {
  local ref=$1 archive=$3 dockerfile binary_name bin image context module package gover
  local started=$SECONDS labels=() from="Debian's packages"
  need_debs buildah:buildah
  debian_parts "$4"
  ensure_base
  image=$(build_name "$ref")
  scratch context
  context=$scratch
  if [ -n "$binary_name" ]; then
    bin=$(binary_of "$binary_name")
    ! ldd "$bin" >/dev/null 2>&1 || die "$ref: $bin is dynamically linked (build it with CGO_ENABLED=0)"
    read -r module package gover < <(go_origin "$bin")
    [ -n "${module:-}" ] || die "$ref: $bin has no Go build information (go version -m)"
    cp "$bin" "$context/$binary_name"
    from="$module ($package, $gover) and Debian's packages"
    labels=(--label "dev.csi.hostpath.built-from=$module" --label "dev.csi.hostpath.package=$package"
      --label "dev.csi.hostpath.go=$gover")
  fi
  say "$ref: buildah bud $(basename "$dockerfile") on $base_ref"
  bud "$ref" "$image" "$dockerfile" "$context" --build-arg "BASE_IMAGE=$base_ref" "${labels[@]}" \
    --label "org.opencontainers.image.description=${ref##*/} built on this machine from $from by csi-hostpath's tools/cluster/images.sh" \
    --label "org.opencontainers.image.base.name=$base_ref"
  publish "$ref" "$image" "$archive"
  drop_image "$image"
  say "$ref: from $from, $(du -h "$archive" | cut -f1), $((SECONDS - started)) s"
}
