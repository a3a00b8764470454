# shellcheck shell=bash
# What tools/kind/node-ssh.sh uses: an sshd of the host's (Debian's openssh-server) that serves
# one node, by key only, and runs one command for every session. Sourced, never run; the caller
# defines log.

# sshd_ready DIR: openssh-server installed, and DIR holding the host key, the client key
# (DIR/id_ed25519, for KUBE_SSH_KEY_PATH) and the keys the servers accept.
sshd_ready() {
  local dir=$1
  if [ ! -x /usr/sbin/sshd ]; then
    log "node-ssh: installing Debian's openssh-server (its own service is not started here)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openssh-server >&2
  fi
  mkdir -p "$dir" /run/sshd
  chmod 700 "$dir"
  [ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_ed25519"
  [ -f "$dir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/id_ed25519"
  cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
}

# sshd_config DIR ADDRESS PIDFILE ENV COMMAND: the configuration of one node's server, on port 22
# of ADDRESS, with ENV (NAME=VALUE ...) set for COMMAND, which every session runs.
sshd_config() {
  local dir=$1 address=$2 pidfile=$3 env=$4 command=$5
  cat <<EOF
ListenAddress $address:22
HostKey $dir/host_ed25519
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $pidfile
SetEnv $env
ForceCommand $command
EOF
}
