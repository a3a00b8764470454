"""Doctor checks of the state directory, its lock, and the endpoint socket."""

from __future__ import annotations

import fcntl
import os
import socket
import stat
from pathlib import Path

from csi_hostpath.doctor.finding import Finding, nearest_existing, writable_dir
from csi_hostpath.store.private import denied

PROC_LOCKS = "/proc/locks"
_SOCKET_TIMEOUT_SECONDS = 1.0


def check_state_dir(state_dir: Path) -> Finding:
    if not state_dir.exists():
        parent = nearest_existing(state_dir)
        if not writable_dir(parent):
            return Finding(
                "state-dir",
                "fail",
                f"{state_dir} does not exist and can't be created: {parent} is not writable",
                f"create it (`mkdir -p {state_dir}`) or pass a writable --state-dir",
            )
        return Finding(
            "state-dir",
            "warn",
            f"{state_dir} does not exist; it will be created when `serve` starts",
            "nothing to do on a new node; if a daemon already ran here, check --state-dir: "
            "its volumes are recorded in the directory it used",
        )
    if not state_dir.is_dir():
        return Finding(
            "state-dir",
            "fail",
            f"{state_dir} is not a directory",
            "pass a directory as --state-dir, or move what is there away",
        )
    problem = denied(state_dir, write=True)
    if problem is not None and state_dir.stat().st_uid != os.geteuid():
        what, _, step = problem.partition("\n  next: ")
        return Finding("state-dir", "fail", what, step)
    if not os.access(state_dir, os.W_OK | os.X_OK):
        return Finding(
            "state-dir",
            "fail",
            f"{state_dir} is not writable (read-only mount, or owned by another user)",
            f"make {state_dir} writable by root (mount it read-write); the sqlite state and the "
            "daemon's lock live there",
        )
    db = "with state.db" if (state_dir / "state.db").exists() else "no state.db yet"
    # Only a ledger to read is worth a warning: `serve` makes a new directory 0700 itself.
    files = sorted(state_dir.glob("state.db*"))
    open_to = [
        f"{p.name} {stat.S_IMODE(p.stat().st_mode):04o}"
        for p in ([state_dir, *files] if files else [])
        if p.stat().st_mode & 0o077
    ]
    if open_to:
        return Finding(
            "state-dir",
            "warn",
            f"{state_dir} is writable ({db}), but other users may read the ledger: "
            + ", ".join(open_to),
            "restart the driver (it makes the directory 0700 and its files 0600), or: "
            f"chmod 700 {state_dir} && chmod 600 {state_dir}/state.db*",
        )
    return Finding("state-dir", "ok", f"{state_dir} is writable ({db})")


def _lock_holder(fd: int) -> int | None:
    """The pid that holds a flock on fd's file, from /proc/locks (best effort)."""
    st = os.fstat(fd)
    # The kernel prints the device as hex major:minor, then the inode number.
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open(PROC_LOCKS, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK ADVISORY WRITE PID DEV:INODE 0 EOF"; waiters have "->" and don't hold it.
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == key:
            pid = int(fields[4])
            return pid if pid > 0 else None
    return None


def check_lock(state_dir: Path) -> tuple[Finding, bool]:
    """The lock finding, and whether a daemon holds the state directory."""
    if not state_dir.is_dir():
        return Finding("state-lock", "ok", "no state directory, so no daemon uses it"), False
    lock_path = state_dir / ".lock"
    try:
        # Read-only is enough for flock and never creates anything: a missing lock file means
        # no daemon has ever started here.
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Finding("state-lock", "ok", "no daemon holds it (no lock file yet)"), False
    except OSError as exc:
        detail = f"can't open {lock_path}: {exc.strerror}"
        return Finding("state-lock", "warn", detail, "run the doctor as root"), False
    try:
        # Held for an instant only: a daemon starting in that instant would find the directory
        # locked and exit, so never hold it longer.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _lock_holder(fd)
        detail = "a csi-hostpath daemon is running on it (lock held)"
        if pid is not None:
            detail += f"; pid {pid}"
        return Finding("state-lock", "ok", detail), True
    except OSError as exc:
        detail = f"can't test the lock on {lock_path}: {exc.strerror}"
        fix = "put --state-dir on a local filesystem: the daemon's lock needs flock"
        return Finding("state-lock", "warn", detail, fix), False
    finally:
        os.close(fd)  # closing the only descriptor releases our lock at once
    return Finding("state-lock", "ok", "no daemon holds it"), False


def _listening(path: str) -> bool | None:
    """Whether something accepts connections on the unix socket at path (None: can't tell)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(_SOCKET_TIMEOUT_SECONDS)
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            return False
        except OSError:
            return None
    return True


def check_socket(endpoint: str, state_dir: Path, *, daemon_running: bool) -> Finding:
    path = endpoint[len("unix://") :] if endpoint.startswith("unix://") else ""
    if not path.startswith("/"):
        return Finding(
            "socket",
            "fail",
            f"endpoint must be unix:///absolute/path, got {endpoint!r}",
            "pass --endpoint like unix:///csi/csi.sock",
        )
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if daemon_running:
            return Finding(
                "socket",
                "fail",
                f"{path} does not exist, but a daemon holds {state_dir}",
                "the daemon serves another --endpoint (compare its command line) or lost its "
                "socket; restart it with this endpoint: the kubelet finds the driver only there",
            )
        # `make run`'s layout (RUN_DIR/csi.sock beside RUN_DIR/state): start it the same way.
        run_dir = state_dir.parent
        start = (
            f"start it: `make run` in the checkout (RUN_DIR={run_dir} if that is not its ./.run)"
            if Path(path) == run_dir / "csi.sock" and state_dir.name == "state"
            else f"start one: `csi-hostpath serve --endpoint {endpoint} --state-dir {state_dir} "
            "...`"
        )
        return Finding(
            "socket", "warn", f"{path} does not exist: no daemon serves this endpoint", start
        )
    if not stat.S_ISSOCK(st.st_mode):
        return Finding(
            "socket",
            "warn",
            f"{path} is not a socket",
            "check --endpoint: `serve` deletes whatever is at that path when it starts",
        )
    problems: list[str] = []
    fixes: list[str] = []
    mode = stat.S_IMODE(st.st_mode)
    if mode != 0o600:
        problems.append(f"mode {mode:04o}, not 0600: other local users can call the driver")
        fixes.append(f"`chmod 0600 {path}` (the daemon sets 0600 at start; something changed it)")
    if st.st_uid != 0:
        problems.append(f"owned by uid {st.st_uid}, not root")
        fixes.append(f"`chown root {path}`, and run the daemon as root")
    listening = _listening(path)
    if listening is False:
        problems.append("nothing listens on it (left by a daemon that died)")
        fixes.append("start the daemon again: `serve` replaces a stale socket")
    elif listening and not daemon_running:
        problems.append(f"something serves it, but no daemon holds {state_dir}")
        fixes.append("pass the daemon's own --state-dir to the doctor (compare its command line)")
    if problems:
        return Finding("socket", "warn", f"{path}: " + "; ".join(problems), "; ".join(fixes))
    serving = "a daemon is listening" if listening else "not probed"
    if listening is None and not os.access(path, os.W_OK):
        serving = f"not probed: permission denied to uid {os.geteuid()} (run doctor as root)"
    return Finding("socket", "ok", f"{path}: mode 0600, owner root, {serving}")
