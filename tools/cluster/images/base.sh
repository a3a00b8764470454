# shellcheck shell=bash
# The Debian base of the driver image (sourced by images.sh): a minbase bookworm root made with
# debootstrap from the same Debian archive as this machine's apt sources, the recipe of Debian's
# official image, imported into buildah's storage as localhost/csi-hostpath-base:bookworm-<key>
# and kept as an archive in the cache so a later run only loads it.

base_suite=bookworm

# apt_uri SUITE: the first URI of this machine's apt sources that serves SUITE (one-line or
# deb822 format), else Debian's own redirector.
apt_uri() {
  local suite=$1 uri
  uri=$(
    {
      { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
        awk -v s="$suite" '$1 == "deb" { sub(/\[[^]]*\][[:space:]]*/, ""); if ($3 == s) print $2 }'
      { cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } | awk -v s="$suite" '
        /^[[:space:]]*$/ { if (u != "" && hit) { print u; exit } u = ""; hit = 0; next }
        tolower($1) == "uris:" { u = $2 }
        tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) hit = 1 }
        END { if (u != "" && hit) print u }'
    } | awk 'NR == 1'
  )
  echo "${uri:-http://deb.debian.org/$2}"
}

base_mirror() { apt_uri "$base_suite" debian; }
base_security() { apt_uri "$base_suite-security" debian-security; }

base_key() {
  { hash_files "$here/images/base.sh"; base_mirror; base_security; } | hash_stdin
}

base_image() { echo "localhost/csi-hostpath-base:$base_suite-$(base_key)"; }

# ensure_base: put the base image into buildah's storage (made, or loaded from its archive) and
# set $base_ref to its name. Not for $(...): its scratch must be cleaned by this shell's trap.
ensure_base() {
  local key archive
  key=$(base_key)
  base_ref="localhost/csi-hostpath-base:$base_suite-$key"
  archive="$images_dir/base/debian-$base_suite-$key.tar"
  bah inspect --type image "$base_ref" >/dev/null 2>&1 && return 0
  if [ -f "$archive" ]; then
    bah pull -q "docker-archive:$archive" >/dev/null
  else
    make_base "$base_ref" "$archive"
  fi
}

# slim_root ROOT: what Debian's -slim images leave out (documentation but the copyright files,
# man and info pages, translations), removed now and kept out of later installs by dpkg.
slim_root() {
  local r=$1
  cat >"$r/etc/dpkg/dpkg.cfg.d/csi-hostpath-slim" <<'EOF'
# Documentation is left out of this image (images.sh, like Debian's -slim images); licences stay.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
EOF
  find "$r/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$r/usr/share/man/"* "$r/usr/share/info/"* "$r/usr/share/lintian/"*
  find "$r/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
}

make_base() {
  local image=$1 archive=$2 r m old started=$SECONDS
  need_debs debootstrap:debootstrap buildah:buildah
  scratch base
  r="$scratch/root"
  say "base: debootstrap --variant=minbase $base_suite from $(base_mirror)"
  if ! debootstrap --variant=minbase --merged-usr "$base_suite" "$r" "$(base_mirror)" \
    >"$scratch/debootstrap.log" 2>&1; then
    tail -n 20 "$scratch/debootstrap.log" >&2
    die "base: debootstrap failed (log above)"
  fi
  # The container runtime provides these; the build machine's copies must not travel.
  rm -f "$r/etc/resolv.conf" "$r/etc/hostname"
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$r/etc/hosts"
  rm -f "$r/etc/apt/sources.list"
  cat >"$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $(base_mirror)
Suites: $base_suite $base_suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $(base_security)
Suites: $base_suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # Downloaded packages and apt's binary caches go after every apt run, as in Debian's official
  # images: in a layer they are only weight (about 100 MB for the driver's packages).
  cat >"$r/etc/apt/apt.conf.d/csi-hostpath-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  slim_root "$r"
  rm -rf "$r/var/lib/apt/lists/"* "$r/var/cache/apt/"*.bin "$r/var/cache/apt/archives/"*.deb \
    "$r/var/log/"*.log "$r/var/log/apt/"* "$r/tmp/"* "$r/root/.bash_history"
  working_ctr scratch
  m=$(bah mount "$ctr")
  cp -a "$r/." "$m/"
  bah umount "$ctr" >/dev/null
  bah config --os linux --arch amd64 --cmd '["bash"]' \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label "org.opencontainers.image.description=Debian $base_suite minbase, made by debootstrap on this machine from $(base_mirror)" \
    --label "org.opencontainers.image.version=$(cat "$r/etc/debian_version")" "$ctr"
  bah commit -q --rm "$ctr" "$image" >/dev/null
  publish "$image" "$image" "$archive"
  # An older base (an earlier recipe or mirror) is no longer any image's base.
  bah images --format '{{.Name}}:{{.Tag}}' | { grep '^localhost/csi-hostpath-base:' || true; } |
    { grep -vxF "$image" || true; } | while read -r old; do drop_image "$old"; done
  say "base: $image ($(du -h "$archive" | cut -f1), $((SECONDS - started)) s)"
}
