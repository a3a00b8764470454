# shellcheck shell=bash
# Images of one static Go binary that its manifests start by name rather than by the image's
# entrypoint (sourced by images.sh after go.sh): kubeadm's control-plane pods run
# `command: [kube-apiserver, ...]`, `[etcd, ...]`. The go recipe's image, with a link to the
# binary in /usr/local/bin, which is on the image's PATH.

eval "go_static_root() $(declare -f static_root | tail -n +2)"

gobin_key() { { go_key "$@"; hash_files "$here/images/gobin.sh"; } | hash_stdin; }

# Each image is built in a subshell of its own (images.sh), so this static_root stays in it.
gobin_build() {
  # shellcheck disable=SC2329 # go_build calls it
  static_root() {
    go_static_root "$@"
    install -d "$1/usr/local/bin"
    ln -s "/$(basename "$2")" "$1/usr/local/bin/$(basename "$2")"
  }
  go_build "$@"
}
