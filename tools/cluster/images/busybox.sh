# shellcheck shell=bash
# busybox images (sourced by images.sh), from Debian's busybox-static: the one binary with a
# link for each of its applets at the path busybox itself gives (--list-full), /etc/passwd and
# /etc/group with root and nobody, /tmp, and `sh` as the command, as the Docker library image has.

busybox_bin() {
  dpkg-query -L busybox-static 2>/dev/null | grep -E '^(/usr)?/bin/busybox$' | head -n 1
}

busybox_key() {
  local bin
  bin=$(busybox_bin)
  [ -n "$bin" ] && [ -x "$bin" ] || return 1
  { hash_files "$here/images/busybox.sh" "$here/images/lib.sh"; stat -c '%n %s %Y' "$bin"
    dpkg-query -W -f '${Version}\n' busybox-static; } | hash_stdin
}

busybox_root() {
  local r=$1 bin=$2 applet
  install -d -m 0755 "$r/bin" "$r/sbin" "$r/usr/bin" "$r/usr/sbin" "$r/etc" "$r/var" \
    "$r/home"
  install -d -m 1777 "$r/tmp"
  install -d -m 0700 "$r/root"
  install -m 0755 "$bin" "$r/bin/busybox"
  "$bin" --list-full | while read -r applet; do
    case "$applet" in bin/busybox | linuxrc) continue ;; esac
    install -d -m 0755 "$r/$(dirname "$applet")"
    ln -sf /bin/busybox "$r/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' \
    >"$r/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$r/etc/group"
}

busybox_build() {
  local ref=$1 key=$2 archive=$3 bin version image m started=$SECONDS
  need_debs buildah:buildah
  bin=$(busybox_bin)
  version=$(dpkg-query -W -f '${Version}' busybox-static)
  image=$(build_name "$ref")
  working_ctr scratch
  m=$(bah mount "$ctr")
  busybox_root "$m" "$bin"
  bah umount "$ctr" >/dev/null
  bah config --os linux --arch amd64 --cmd '["sh"]' \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label "org.opencontainers.image.title=busybox" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.description=Debian's busybox-static $version, made into an image on this machine by csi-hostpath's tools/cluster/images.sh" \
    --label "dev.csi.hostpath.built-from=debian:busybox-static=$version" "$ctr"
  bah commit -q --rm "$ctr" "$image" >/dev/null
  publish "$ref" "$image" "$archive"
  drop_image "$image"
  say "$ref: busybox-static $version, $(du -h "$archive" | cut -f1), $((SECONDS - started)) s"
}
