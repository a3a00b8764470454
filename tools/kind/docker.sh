#!/usr/bin/env bash
# A Docker for kind: the machine's own when one answers, else a dockerd of the project's own.
#
#   tools/kind/docker.sh start    use the machine's Docker if it answers; else install Debian's
#                                 docker.io when missing and start the project's dockerd; print
#                                 DOCKER_HOST=... (the line to export) either way
#   tools/kind/docker.sh env      print DOCKER_HOST=... for the Docker in use (ours when it runs)
#   tools/kind/docker.sh status   say whose Docker answers; exit 1 when none does
#   tools/kind/docker.sh stop     stop the project's dockerd (never the machine's): its networks
#                                 removed, the process ended by its pid, its mounts and run
#                                 directory gone; the data root (the images) stays as a cache
#   tools/kind/docker.sh --help
#
# The project's dockerd leaves the host's network as it found it: no iptables rules, no
# ip_forward change, no docker0 (--iptables=false --ip6tables=false --ip-forward=false
# --ip-masq=false --bridge=none). A user-defined network (kind's) is still a bridge its
# containers share; `docker build` needs --network host, having no default bridge.
# Where root's capability bounding set lacks one that a privileged container asks for (this
# machine withholds CAP_SYS_RESOURCE), runc would refuse every privileged container; then the
# default runtime is tools/kind/runc-caps, which removes the missing capabilities from the
# container's spec. Detected from /proc/self/status, never assumed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${CSI_HOSTPATH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-hostpath}
# The data root is a cache (its images outlive a stop); the run directory is not.
DOCKER_DATA=${CSI_HOSTPATH_DOCKER_DATA:-$cache/docker}
DOCKER_RUN=${CSI_HOSTPATH_DOCKER_RUN:-/run/csi-hostpath-docker}
sock=$DOCKER_RUN/docker.sock
pidfile=$DOCKER_RUN/dockerd.pid
logfile=$DOCKER_RUN/dockerd.log
ours_host=unix://$sock

say() { echo "docker.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# answers HOST: does a Docker answer there (empty HOST: the docker CLI's default)?
answers() {
  if [ -n "$1" ]; then DOCKER_HOST=$1 timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
  else env -u DOCKER_HOST timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; fi
}

our_pid() {
  local pid
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -n "$pid" ] && [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] &&
    echo "$pid"
}

# machine_host: the machine's own Docker's address, when one answers and it is not ours.
machine_host() {
  if [ -n "${DOCKER_HOST:-}" ] && [ "$DOCKER_HOST" != "$ours_host" ] && answers "$DOCKER_HOST"; then
    echo "$DOCKER_HOST"
  elif answers ""; then
    echo "unix:///var/run/docker.sock"
  else
    return 1
  fi
}

# missing_caps: the names of the capabilities runc knows that root's bounding set lacks.
missing_caps() {
  local bnd i last names
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  last=$(cat /proc/sys/kernel/cap_last_cap)
  names=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
    LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
    SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
    SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
    MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF
    CHECKPOINT_RESTORE)
  for ((i = 0; i <= last && i < ${#names[@]}; i++)); do
    (((0x$bnd >> i) & 1)) || echo "CAP_${names[$i]}"
  done
}

ensure_installed() {
  command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    die "no dockerd here and no way to install it (as root: apt-get install docker.io)"
  fi
  say "installing Debian's docker.io"
  # A package's maintainer script may start the daemon where an init system runs; the project's
  # dockerd is started below with its own flags instead, so no service is started now.
  local policy=/usr/sbin/policy-rc.d made=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; made=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io jq >/dev/null ||
    { [ "$made" = 0 ] || rm -f "$policy"; die "apt-get install docker.io failed"; }
  [ "$made" = 0 ] || rm -f "$policy"
}

start() {
  local host pid caps=() i runtime_args=()
  if host=$(machine_host); then
    say "using the machine's Docker at $host, as it is"
    echo "DOCKER_HOST=$host"
    return 0
  fi
  if pid=$(our_pid) && answers "$ours_host"; then
    echo "DOCKER_HOST=$ours_host"
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || die "starting dockerd needs root"
  ensure_installed
  mkdir -p "$DOCKER_DATA" "$DOCKER_RUN"
  mapfile -t caps < <(missing_caps)
  if [ "${#caps[@]}" -gt 0 ]; then
    say "root's bounding set lacks ${caps[*]}: privileged containers go through tools/kind/runc-caps"
    # A copy beside its list, so the runtime finds the list without any environment.
    printf '%s\n' "${caps[@]}" >"$DOCKER_RUN/drop-caps"
    install -m 0755 "$here/runc-caps" "$DOCKER_RUN/runc-caps"
    runtime_args=(--add-runtime "csi-hostpath-runc=$DOCKER_RUN/runc-caps" --default-runtime csi-hostpath-runc)
  else
    rm -f "$DOCKER_RUN/drop-caps" "$DOCKER_RUN/runc-caps"
  fi
  say "starting dockerd (data root $DOCKER_DATA, socket $sock)"
  # setsid: the daemon outlives this script, in a session of its own, and make's Ctrl-C does not
  # reach it; stop ends it by its pid.
  setsid dockerd \
    --data-root "$DOCKER_DATA" --exec-root "$DOCKER_RUN/exec" --pidfile "$pidfile" \
    -H "$ours_host" --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
    --bridge=none "${runtime_args[@]}" </dev/null >"$logfile" 2>&1 &
  for ((i = 0; i < 120; i++)); do
    answers "$ours_host" && { echo "DOCKER_HOST=$ours_host"; return 0; }
    if [ "$i" -gt 5 ] && ! our_pid >/dev/null; then
      tail -n 20 "$logfile" >&2
      die "dockerd exited (its log above, $logfile)"
    fi
    sleep 0.5
  done
  tail -n 20 "$logfile" >&2
  die "dockerd did not answer on $sock within 60 s"
}

stop() {
  local pid i net mnt
  if ! pid=$(our_pid); then
    say "the project's dockerd is not running"
  else
    # A user-defined network is a bridge device on the host: removed while dockerd can.
    for net in $(DOCKER_HOST=$ours_host docker network ls -q --filter type=custom 2>/dev/null); do
      DOCKER_HOST=$ours_host docker network rm "$net" >/dev/null 2>&1 ||
        say "network $net is still in use: its containers stop with dockerd"
    done
    kill -TERM "$pid"
    for ((i = 0; i < 120; i++)); do [ -d "/proc/$pid" ] || break; sleep 0.5; done
    if [ -d "/proc/$pid" ]; then say "dockerd $pid still up after 60 s: SIGKILL"; kill -KILL "$pid"; fi
    say "dockerd $pid stopped"
  fi
  # What a killed daemon may leave: mounts under its directories, then its run directory.
  awk -v a="$DOCKER_RUN/" -v b="$DOCKER_DATA/" 'index($5 "/", a) == 1 || index($5, b) == 1 { print $5 }' \
    /proc/self/mountinfo | sort -r | while read -r mnt; do umount "$mnt" 2>/dev/null || umount -l "$mnt"; done
  rm -rf --one-file-system "$DOCKER_RUN"
}

status() {
  local host
  if our_pid >/dev/null && answers "$ours_host"; then echo "the project's dockerd: DOCKER_HOST=$ours_host"
  elif host=$(machine_host); then echo "the machine's Docker: DOCKER_HOST=$host"
  else echo "no Docker answers"; return 1; fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env)
    if our_pid >/dev/null; then echo "DOCKER_HOST=$ours_host"
    elif host=$(machine_host); then echo "DOCKER_HOST=$host"
    else die "no Docker answers (tools/kind/docker.sh start)"; fi
    ;;
  status) status ;;
  missing-caps) missing_caps ;;
  -h | --help | help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
