# shellcheck shell=bash
# Images of one static Go binary (sourced by images.sh): the sidecars the chart pins and the
# snapshot-controller, each built from its Go module by tools/cluster/build.sh. Laid out as the
# upstream images are on distroless/static: the binary at /<name> as the entrypoint, the Mozilla
# CA bundle, a passwd with root, nobody and nonroot (65532), and /tmp.

# binary_of SOURCE: the binary's path (SOURCE itself when absolute, else build.sh's answer), or
# nothing when it is not built yet.
binary_of() {
  local source=$1 path
  if [ "${source#/}" != "$source" ]; then path=$source
  elif [ -x "$here/build.sh" ]; then path=$(bash "$here/build.sh" path "$source" 2>/dev/null) || path=
  else path=; fi
  [ -n "$path" ] && [ -f "$path" ] && [ -x "$path" ] && echo "$path"
  return 0
}

# not_built SOURCE: why SOURCE has no binary, for the skip message.
not_built() {
  if [ "${1#/}" != "$1" ]; then echo "$1 is not there"
  elif [ ! -x "$here/build.sh" ]; then echo "tools/cluster/build.sh is not there yet"
  else echo "its binary is not built (tools/cluster/build.sh $1)"; fi
}

# The key is the recipe and the binary's identity (path, size, modification time): hashing every
# binary on each `list` would cost seconds for nothing, and build.sh writes a new file per build.
go_key() {
  local bin
  bin=$(binary_of "$2")
  [ -n "$bin" ] || return 1
  { hash_files "$here/images/go.sh" "$here/images/lib.sh"; stat -c '%n %s %Y' "$bin"; } | hash_stdin
}

# go_origin BINARY: "MODULE@VERSION PACKAGE GOVERSION" read from the binary's build information
# (the main package's module: a dependency of build.sh's own go.mod, or the main module). A
# program the project writes in a component's own module (csi-hostpath.local/COMPONENT-build, a
# client over the pinned module's library) is of the pinned module it is built over: the dependency
# named COMPONENT, so its image's tag is checked against that module's version like the others'.
go_origin() {
  local go
  go=$(command -v go || echo /usr/local/go/bin/go)
  "$go" version -m "$1" 2>/dev/null | awk '
    NR == 1 { gover = $2 }
    $1 == "path" { pkg = $2 }
    $1 == "mod" { main = $2 }
    ($1 == "mod" || $1 == "dep") && $3 != "(devel)" { mod[$2] = $3 }
    END {
      best = ""
      for (m in mod) if ((pkg == m || index(pkg, m "/") == 1) && length(m) > length(best)) best = m
      if (best == "" && index(main, "csi-hostpath.local/") == 1) {
        comp = main
        sub(/^csi-hostpath\.local\//, "", comp)
        sub(/-build$/, "", comp)
        for (m in mod) {
          base = m
          sub(/\/v[0-9]+$/, "", base)
          if (substr(base, length(base) - length(comp)) == "/" comp) best = m
        }
      }
      if (best != "") print best "@" mod[best], pkg, gover
    }'
}

# static_root ROOT BINARY: the distroless-like file tree around BINARY.
static_root() {
  local r=$1 bin=$2
  install -d -m 0755 "$r/etc/ssl/certs"
  install -d -m 1777 "$r/tmp"
  install -m 0755 "$bin" "$r/$(basename "$bin")"
  mozilla_bundle "$r/etc/ssl/certs/ca-certificates.crt"
  chmod 0644 "$r/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    >"$r/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$r/etc/group"
  install -d -m 0700 "$r/root"
  install -d -m 0700 -o 65532 -g 65532 "$r/home/nonroot"
}

go_build() {
  local ref=$1 key=$2 archive=$3 source=$4 bin name origin module package gover image m
  local started=$SECONDS
  need_debs buildah:buildah
  bin=$(binary_of "$source")
  name=$(basename "$bin")
  if ldd "$bin" >/dev/null 2>&1; then
    die "$ref: $bin is dynamically linked; this image has no libc (build it with CGO_ENABLED=0)"
  fi
  origin=$(go_origin "$bin")
  read -r module package gover <<<"$origin"
  [ -n "${module:-}" ] || die "$ref: $bin has no Go build information (go version -m)"
  case "${ref##*:}" in
    v*) [ "${module##*@}" = "${ref##*:}" ] ||
      die "$ref: $bin was built from $module, not version ${ref##*:}" ;;
  esac
  image=$(build_name "$ref")
  working_ctr scratch
  m=$(bah mount "$ctr")
  static_root "$m" "$bin"
  bah umount "$ctr" >/dev/null
  bah config --os linux --arch amd64 --entrypoint "[\"/$name\"]" --cmd '' \
    --env PATH=/usr/local/bin:/usr/bin:/bin \
    --label "org.opencontainers.image.title=$name" \
    --label "org.opencontainers.image.version=${module##*@}" \
    --label "org.opencontainers.image.description=$name built on this machine from the Go module $module ($package, $gover) by csi-hostpath's tools/cluster/images.sh" \
    --label "dev.csi.hostpath.built-from=$module" \
    --label "dev.csi.hostpath.package=$package" \
    --label "dev.csi.hostpath.go=$gover" "$ctr"
  bah commit -q --rm "$ctr" "$image" >/dev/null
  publish "$ref" "$image" "$archive"
  drop_image "$image"
  say "$ref: from $module, $(du -h "$archive" | cut -f1), $((SECONDS - started)) s"
}
