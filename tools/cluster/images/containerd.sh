# shellcheck shell=bash
# A throwaway containerd (sourced by images.sh for `check`): its own root, state and socket in a
# temp directory, no CRI plugin, the overlayfs snapshotter. `ctr_up` starts it; `ctr_down` ends
# every task in it, the shims and containerd by PID, unmounts what it mounted and removes the
# directory; images.sh calls ctr_down on any exit.

ctr_dir=
ctr_pid=

# c ARGS: ctr on the throwaway containerd, namespace k8s.io (the kubelet's).
c() { ctr --address "$ctr_dir/containerd.sock" --namespace k8s.io "$@"; }

ctr_up() {
  local i
  need_debs containerd:containerd runc:runc
  ctr_dir=$(mktemp -d /tmp/csi-hostpath-images-ctr.XXXXXX)
  cat >"$ctr_dir/config.toml" <<EOF
version = 2
root = "$ctr_dir/root"
state = "$ctr_dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$ctr_dir/containerd.sock"
[ttrpc]
  address = "$ctr_dir/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
EOF
  containerd --config "$ctr_dir/config.toml" >"$ctr_dir/containerd.log" 2>&1 &
  ctr_pid=$!
  for i in $(seq 1 100); do
    c version >/dev/null 2>&1 && return 0
    kill -0 "$ctr_pid" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 20 "$ctr_dir/containerd.log" >&2
  die "check: the throwaway containerd did not start (log above; $i tries)"
}

# ctr_pids_of_dir: PIDs whose command line names the throwaway directory (its shims), by a scan
# of /proc for that unique path.
ctr_pids_of_dir() {
  local p cmd
  for p in /proc/[0-9]*; do
    { cmd=$(tr '\0' ' ' <"$p/cmdline"); } 2>/dev/null || continue
    [[ $cmd == *"$ctr_dir/"* ]] && echo "${p#/proc/}"
  done
  return 0
}

ctr_down() {
  local id pid
  [ -n "$ctr_dir" ] || return 0
  if [ -n "$ctr_pid" ] && kill -0 "$ctr_pid" 2>/dev/null; then
    for id in $(c tasks ls -q 2>/dev/null); do
      c tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $(c containers ls -q 2>/dev/null); do
      c tasks delete -f "$id" >/dev/null 2>&1 || true
      c containers delete "$id" >/dev/null 2>&1 || true
    done
    kill "$ctr_pid" 2>/dev/null || true
    wait "$ctr_pid" 2>/dev/null || true
  fi
  for pid in $(ctr_pids_of_dir); do
    [ "$pid" = "$$" ] || kill -9 "$pid" 2>/dev/null || true
  done
  clean_tree "$ctr_dir"
  ctr_dir='' ctr_pid=''
}

# process_of ARCHIVE [ARG...]: the process the kubelet starts from the image in ARCHIVE, one
# word a line: its entrypoint with ARGs (a pod's `args`), or with its own command when none.
# ctr takes a command as the whole process and drops the entrypoint, so `check` spells it out.
process_of() {
  python3 - "$@" <<'EOF'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as archive:
    manifest = json.load(archive.extractfile("manifest.json"))[0]
    config = json.load(archive.extractfile(manifest["Config"])).get("config") or {}
words = (config.get("Entrypoint") or []) + (sys.argv[2:] or config.get("Cmd") or [])
print("\n".join(words))
EOF
}

# ctr_import ARCHIVE NAME: import ARCHIVE and make sure containerd holds it under NAME.
ctr_import() {
  local name
  name=$(normalized "$2")
  c images import "$1" >/dev/null
  c images ls -q | grep -qxF "$name" ||
    die "check: $1 imported, but not as $name (containerd has: $(c images ls -q | tr '\n' ' '))"
  say "check: imported as $name"
}
