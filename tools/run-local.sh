#!/usr/bin/env bash
# `make run`'s recipe: serve the driver in the foreground until Ctrl-C, or SIGTERM or SIGINT (to
# make or to this script), then say which volumes are still mounted and how to unmount them.
#
#   tools/run-local.sh RUN_DIR PYTHON SERVE-COMMAND...
#
# GNU make passes a SIGTERM on to its recipe, but not a SIGINT: on a SIGINT sent to make alone
# (a terminal's Ctrl-C reaches the whole process group instead) make only waits for its recipe to
# end, so the driver would serve on and make would never exit. make drops its SIGINT handler as it
# takes the signal, so a watcher that sees make stop catching SIGINT stops the driver.
set -u

run_dir=$1
py=$2
shift 2
# The checkout's package for the run-dir checks: the venv may be gone (make clean) at the stop.
pypath=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}

# A second `make run` on the same RUN_DIR: say where the first one runs, and start nothing (the
# driver's own refusal would be followed by the stop report of a driver that never ran).
PYTHONPATH=$pypath "$py" -m csi_hostpath run-dir running --run-dir "$run_dir" || exit 1

"$@" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true' INT TERM HUP

# make_pid: the nearest ancestor that is make (the recipe may run under a shell of make's).
make_pid=""
pid=$PPID
for _ in 1 2 3; do
  [ -r "/proc/$pid/comm" ] || break
  if [ "$(cat "/proc/$pid/comm")" = make ]; then make_pid=$pid; break; fi
  pid=$(awk '/^PPid:/ {print $2}' "/proc/$pid/status")
done

# catches_sigint PID: does PID have a handler for SIGINT (bit 2 of SigCgt, counting from 1)?
catches_sigint() {
  local caught
  caught=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
  [ -n "$caught" ] && (( (16#$caught >> 1) & 1 ))
}

watcher=""
if [ -n "$make_pid" ] && catches_sigint "$make_pid"; then
  (
    while kill -0 "$server" 2>/dev/null; do
      if ! catches_sigint "$make_pid"; then kill -TERM "$server" 2>/dev/null; exit 0; fi
      sleep 0.5
    done
  ) &
  watcher=$!
fi

# wait returns early when a trapped signal arrives; the driver is still stopping then.
while kill -0 "$server" 2>/dev/null; do wait "$server"; done
wait "$server"
rc=$?
if [ -n "$watcher" ]; then kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null; fi

PYTHONPATH=$pypath "$py" -m csi_hostpath run-dir mounted --run-dir "$run_dir"
exit "$rc"
