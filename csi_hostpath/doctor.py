"""`csi-hostpath doctor`: check a node for everything the driver needs, and say how to fix what
is missing.

Each check is independent, so one broken prerequisite does not hide the others, and each non-ok
finding carries a concrete fix. The checks change nothing that matters: the lock is tested with a
non-blocking flock released at once, the reflink test writes two small temporary files and removes
them, and asking the kernel for a free loop device may add an unused /dev/loopN node. The state
and pool directories are never created: a missing one is reported, as `serve` would create it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from csi_hostpath.system.base import MountEntry
from csi_hostpath.system.linux import (
    FICLONE,
    LOOP_CONTROL,
    LOOP_CTL_GET_FREE,
    MountRecord,
    read_mountinfo,
    topmost,
)

Status = Literal["ok", "warn", "fail"]
_STATUSES = ("ok", "warn", "fail")

# Where the checks look; module attributes so that tests can point them at prepared files.
SYS_BLOCK = "/sys/block"
PROC_FILESYSTEMS = "/proc/filesystems"
PROC_STATUS = "/proc/self/status"
PROC_LOCKS = "/proc/locks"
MODULES_DIR = "/lib/modules"

CAP_SYS_RESOURCE = 24  # linux/capability.h
LOW_SPACE_BYTES = 1 << 30
# devtmpfs creates /dev/loopN when the kernel adds the disk, which can trail LOOP_CTL_GET_FREE;
# the driver waits as long before it gives up on the node.
_NODE_WAIT_SECONDS = 2.0
_SOCKET_TIMEOUT_SECONDS = 1.0
# FICLONE's answers when the filesystem (or the pair of files) cannot share extents.
_NO_REFLINK_ERRNOS = (errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.EXDEV)

_PRIVILEGED = (
    "in a container, run it privileged (securityContext.privileged: true) with the host's /dev "
    "mounted (hostPath /dev)"
)
_PRIVILEGED_ROOT = "run it as root; " + _PRIVILEGED


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's verdict. `fix` says what to do; it is empty only for "ok"."""

    check: str
    status: Status
    detail: str
    fix: str = ""

    def __post_init__(self) -> None:
        # Status drives the exit code, so a typo must fail loudly rather than count as "ok".
        if self.status not in _STATUSES:
            raise ValueError(f"status must be one of {_STATUSES}, got {self.status!r}")


@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    missing: Status
    consequence: str
    package: str  # Debian/Ubuntu; the same name on RHEL and Alpine unless `elsewhere` says
    elsewhere: str = ""


# What the driver runs, how bad its absence is, and where to get it (Debian/Ubuntu first).
TOOLS: tuple[_Tool, ...] = (
    _Tool("mkfs.ext4", "fail", "ext4 volumes can't be formatted", "e2fsprogs"),
    _Tool(
        "blkid",
        "fail",
        "the driver can't tell a formatted volume from an empty one, so no filesystem volume "
        "can be staged",
        "util-linux",
    ),
    _Tool("mount", "fail", "no volume can be staged or published", "mount", "util-linux"),
    _Tool("umount", "fail", "no volume can be unstaged or unpublished", "mount", "util-linux"),
    _Tool("mkfs.xfs", "warn", "xfs volumes can't be staged", "xfsprogs"),
    _Tool("xfs_growfs", "warn", "xfs volumes can't be expanded", "xfsprogs"),
    _Tool(
        "e2fsck",
        "warn",
        "ext4 volumes can't be grown offline (expanded, restored or cloned larger)",
        "e2fsprogs",
    ),
    _Tool("resize2fs", "warn", "ext4 volumes can't be expanded", "e2fsprogs"),
)


def diagnose(
    state_dir: Path, pool_dir: Path, endpoint: str | None = None, *, path_env: str | None = None
) -> list[Finding]:
    """Check this node for the driver; `path_env` is the PATH to look tools up on (default: ours).

    Run it where the daemon runs (the node plugin's container): device nodes, capabilities, PATH
    and mounts are what this process sees, and the daemon sees the same.
    """
    search_path = os.environ.get("PATH", os.defpath) if path_env is None else path_env
    findings: list[Finding] = []
    findings += _guarded("loop-control", _check_loop_control)
    findings += _guarded("loop-devices", lambda: _check_loop_devices(pool_dir))
    findings += _guarded("kernel-fs", _check_kernel_filesystems)
    findings += _guarded("cap-sys-resource", _check_capabilities)
    findings += _guarded("tools", lambda: _check_tools(search_path))
    findings += _guarded("state-dir", lambda: [_check_state_dir(state_dir)])
    daemon_running = False
    try:
        lock, daemon_running = _check_lock(state_dir)
        findings.append(lock)
    except Exception as exc:  # noqa: BLE001 - a crashed check is reported, not raised
        findings.append(_crashed("state-lock", exc))
    if endpoint is not None:
        findings += _guarded(
            "socket", lambda: [_check_socket(endpoint, state_dir, daemon_running=daemon_running)]
        )
    findings += _guarded("pool", lambda: _check_pool(pool_dir))
    return findings


def render(findings: Sequence[Finding]) -> str:
    """An aligned table, STATUS  CHECK  DETAIL, with a `fix:` line under each non-ok finding."""
    width_status = max([len("STATUS"), *(len(f.status) for f in findings)])
    width_check = max([len("CHECK"), *(len(f.check) for f in findings)])
    indent = " " * (width_status + 2 + width_check + 2)
    lines = [f"{'STATUS':<{width_status}}  {'CHECK':<{width_check}}  DETAIL"]
    for finding in findings:
        status = finding.status.upper()
        lines.append(f"{status:<{width_status}}  {finding.check:<{width_check}}  {finding.detail}")
        if finding.status != "ok" and finding.fix:
            lines.append(f"{indent}fix: {finding.fix}")
    counts = {status: sum(f.status == status for f in findings) for status in _STATUSES}
    lines += ["", ", ".join(f"{counts[status]} {status}" for status in _STATUSES)]
    return "\n".join(lines)


def exit_code(findings: Iterable[Finding]) -> int:
    """1 if anything fails (the driver would not work), else 0; warnings are limits, not errors."""
    return 1 if any(finding.status == "fail" for finding in findings) else 0


# --- helpers ---------------------------------------------------------------------------------


def _crashed(check: str, exc: BaseException) -> Finding:
    # A check that could not run proves nothing, so it must not let the node pass.
    return Finding(
        check,
        "fail",
        f"the check itself failed: {exc!r}",
        "this is a doctor bug or a very unusual node; run the check's steps by hand and report it",
    )


def _guarded(check: str, run: Callable[[], list[Finding]]) -> list[Finding]:
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
        return [_crashed(check, exc)]


def _nearest_existing(path: Path) -> Path:
    """path itself, or its closest ancestor that exists (the root always does)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable: the loop returns at TiB")


def _mount_of(path: Path) -> MountEntry | None:
    """The mount that holds path: the longest mount point above it, topmost if mounts stack."""
    real = os.path.realpath(path)
    records: list[MountRecord] = read_mountinfo()
    best = ""
    for record in records:
        point = record.entry.mount_point
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best = point
    return topmost(records, best) if best else None


def _describe_fs(path: Path) -> str:
    entry = _mount_of(path)
    if entry is None:
        return "filesystem unknown"
    return f"{entry.fs_type} on {entry.source}, mounted at {entry.mount_point}"


# --- loop devices ----------------------------------------------------------------------------


def _check_loop_control() -> list[Finding]:
    path = LOOP_CONTROL
    fix = f"load the loop driver on the host: `modprobe loop`; {_PRIVILEGED}"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return [Finding("loop-control", "fail", f"{path} does not exist", fix)]
    if not stat.S_ISCHR(st.st_mode):
        return [Finding("loop-control", "fail", f"{path} is not a character device", fix)]
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        # As root, a refusal comes from the container's device rules, not from file modes.
        fix = _PRIVILEGED_ROOT if os.geteuid() != 0 else f"{_PRIVILEGED}; or `modprobe loop`"
        detail = f"{path} can't be opened read-write: {exc.strerror}"
        return [Finding("loop-control", "fail", detail, fix)]
    os.close(fd)
    return [Finding("loop-control", "ok", f"{path} opens read-write")]


def _loop_counts() -> tuple[int, int]:
    """(loop devices the kernel has, how many of them are attached to a file)."""
    present = configured = 0
    try:
        names = os.listdir(SYS_BLOCK)
    except OSError:
        return 0, 0
    for name in names:
        if name.startswith("loop") and name[4:].isdigit():
            present += 1
            if os.path.exists(os.path.join(SYS_BLOCK, name, "loop", "backing_file")):
                configured += 1
    return present, configured


def _check_loop_devices(pool_dir: Path) -> list[Finding]:
    present, configured = _loop_counts()
    counts = f"{present} loop devices, {configured} attached"
    try:
        control = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        detail = f"{counts}; can't ask the kernel for a free one: {LOOP_CONTROL}: {exc.strerror}"
        return [Finding("loop-devices", "warn", detail, "fix loop-control first (above)")]
    try:
        # Hands out an unattached device, adding one if there is none; nothing stays attached.
        index = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
    except OSError as exc:
        detail = f"{counts}; the kernel has no free loop device: {exc.strerror}"
        fix = (
            "`losetup -l` lists what holds them (this driver's are backed by "
            f"{pool_dir}/volumes/*.img); detach leaked ones with `losetup -d /dev/loopN`, or "
            "allow more: `modprobe loop max_loop=N` (boot option max_loop=N if built in)"
        )
        return [Finding("loop-devices", "warn", detail, fix)]
    finally:
        os.close(control)
    device = f"/dev/loop{index}"
    deadline = time.monotonic() + _NODE_WAIT_SECONDS
    while not os.path.exists(device):
        if time.monotonic() > deadline:
            # The kernel made the device but no node appeared: /dev is a static tmpfs (an
            # unprivileged container), so every attach would fail the same way.
            detail = f"{counts}; the kernel offers loop{index} but {device} never appeared"
            fix = f"/dev is not the host's devtmpfs: {_PRIVILEGED}"
            return [Finding("loop-devices", "fail", detail, fix)]
        time.sleep(0.02)
    return [Finding("loop-devices", "ok", f"{counts}; {device} is free")]


# --- kernel ----------------------------------------------------------------------------------


def _registered_filesystems() -> set[str]:
    # Lines are "nodev\tproc" or "\text4": the name is always the last field.
    with open(PROC_FILESYSTEMS, encoding="utf-8") as handle:
        return {line.split()[-1] for line in handle if line.strip()}


def _find_module(release: str, fs: str) -> str | None:
    """The module file for fs under /lib/modules/RELEASE, if the kernel could load one."""
    root = Path(MODULES_DIR) / release
    try:
        # modules.dep lists every loadable module wherever the distribution put it.
        text = (root / "modules.dep").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        module = line.split(":", 1)[0].strip()
        if os.path.basename(module).split(".ko", 1)[0] == fs:
            return str(root / module)
    found = sorted(root.glob(f"kernel/fs/{fs}/{fs}.ko*"))
    return str(found[0]) if found else None


def _check_kernel_filesystems() -> list[Finding]:
    registered = _registered_filesystems()
    release = os.uname().release
    wanted: tuple[tuple[str, Status, str], ...] = (
        (
            "ext4",
            "fail",
            "load it on the host: `modprobe ext4`; a kernel built without ext4 (CONFIG_EXT4_FS) "
            "can't serve this driver's default volumes",
        ),
        (
            "xfs",
            "warn",
            "load it on the host: `modprobe xfs` (Ubuntu ships it in "
            "linux-modules-extra-$(uname -r)); until then use fsType ext4",
        ),
    )
    findings = []
    for fs, missing, fix in wanted:
        check = f"kernel-fs:{fs}"
        if fs in registered:
            findings.append(Finding(check, "ok", f"{fs} is registered ({PROC_FILESYSTEMS})"))
            continue
        module = _find_module(release, fs)
        if module is not None:
            # Mounting asks the kernel to load it, from the host even when run in a container.
            detail = f"{fs} is not loaded yet; {module} loads on the first mount"
            findings.append(Finding(check, "ok", detail))
            continue
        detail = (
            f"{fs} is not in {PROC_FILESYSTEMS} and no {fs} module is under {MODULES_DIR}/{release}"
        )
        findings.append(Finding(check, missing, detail, fix))
    return findings


def _check_capabilities() -> list[Finding]:
    # This process's capabilities stand for the daemon's: run the doctor in the daemon's
    # container (kubectl exec) and both get the same set.
    with open(PROC_STATUS, encoding="utf-8") as handle:
        lines = [line for line in handle if line.startswith("CapEff:")]
    if not lines:
        return [
            Finding(
                "cap-sys-resource",
                "warn",
                f"no CapEff line in {PROC_STATUS}",
                "check by hand: `grep CapEff /proc/self/status` (bit 24 is CAP_SYS_RESOURCE)",
            )
        ]
    effective = int(lines[0].split()[1], 16)
    if effective >> CAP_SYS_RESOURCE & 1:
        return [Finding("cap-sys-resource", "ok", "CAP_SYS_RESOURCE: yes (ext4 grows online)")]
    return [
        Finding(
            "cap-sys-resource",
            "warn",
            "CAP_SYS_RESOURCE is not in CapEff: online ext4 expansion will be refused; ext4 "
            "grows on next stage",
            "run the node plugin privileged (securityContext.privileged: true), or add the "
            "SYS_RESOURCE capability",
        )
    ]


# --- tools -----------------------------------------------------------------------------------


def _check_tools(search_path: str) -> list[Finding]:
    findings = []
    for tool in TOOLS:
        check = f"tool:{tool.name}"
        found = shutil.which(tool.name, path=search_path)
        if found is not None:
            findings.append(Finding(check, "ok", found))
            continue
        detail = f"{tool.name} not found on PATH: {tool.consequence}"
        elsewhere = f" ({tool.elsewhere} on RHEL and Alpine)" if tool.elsewhere else ""
        fix = (
            f"install it: `apt-get install {tool.package}`{elsewhere}, or add the directory "
            f"holding {tool.name} to PATH (searched: {search_path or '(empty)'})"
        )
        findings.append(Finding(check, tool.missing, detail, fix))
    return findings


# --- state directory, lock and socket --------------------------------------------------------


def _check_state_dir(state_dir: Path) -> Finding:
    if not state_dir.exists():
        parent = _nearest_existing(state_dir)
        if not _writable_dir(parent):
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
    if not os.access(state_dir, os.W_OK | os.X_OK):
        return Finding(
            "state-dir",
            "fail",
            f"{state_dir} is not writable (read-only mount, or owned by another user)",
            f"make {state_dir} writable by root (mount it read-write); the sqlite state and the "
            "daemon's lock live there",
        )
    db = "with state.db" if (state_dir / "state.db").exists() else "no state.db yet"
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


def _check_lock(state_dir: Path) -> tuple[Finding, bool]:
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


def _check_socket(endpoint: str, state_dir: Path, *, daemon_running: bool) -> Finding:
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
        return Finding(
            "socket",
            "warn",
            f"{path} does not exist: no daemon serves this endpoint",
            f"start one: `csi-hostpath serve --endpoint {endpoint} --state-dir {state_dir} ...`",
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
    return Finding("socket", "ok", f"{path}: mode 0600, owner root, {serving}")


# --- pool ------------------------------------------------------------------------------------


def _check_pool(pool_dir: Path) -> list[Finding]:
    # A missing pool is measured where `serve` would create it: its nearest existing parent.
    probe = _nearest_existing(pool_dir)
    fs = _describe_fs(probe)
    findings = [_check_pool_dir(pool_dir, probe, fs)]
    st = os.statvfs(probe)
    free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    where = "" if probe == pool_dir.absolute() else f" (measured at {probe})"
    space = f"{_size(free)} free of {_size(total)}{where}"
    if free < LOW_SPACE_BYTES:
        findings.append(
            Finding(
                "pool-space",
                "warn",
                f"only {space}",
                "free space there or pass a --pool-dir on a bigger filesystem: volumes are thin, "
                "so writes inside them fail with ENOSPC once the pool fills",
            )
        )
    else:
        findings.append(Finding("pool-space", "ok", space))
    findings.append(_check_reflink(probe, fs))
    return findings


def _check_pool_dir(pool_dir: Path, probe: Path, fs: str) -> Finding:
    if probe == pool_dir.absolute():
        if not _writable_dir(pool_dir):
            return Finding(
                "pool-dir",
                "fail",
                f"{pool_dir} is not a writable directory ({fs})",
                f"make {pool_dir} a directory writable by root (mount it read-write), or pass "
                "another --pool-dir; the volumes' backing files live there",
            )
        return Finding("pool-dir", "ok", f"{pool_dir} is writable ({fs})")
    if not _writable_dir(probe):
        return Finding(
            "pool-dir",
            "fail",
            f"{pool_dir} does not exist and can't be created: {probe} is not writable",
            f"create it (`mkdir -p {pool_dir}`) or pass a writable --pool-dir",
        )
    return Finding(
        "pool-dir",
        "warn",
        f"{pool_dir} does not exist; it will be created when `serve` starts ({fs})",
        "nothing to do on a new node; in shared scope, mount the shared filesystem there first",
    )


def _check_reflink(directory: Path, fs: str) -> Finding:
    if not _writable_dir(directory):
        return Finding(
            "pool-reflink",
            "warn",
            f"not tested: {directory} is not writable",
            "fix pool-dir first (above)",
        )
    made: list[tuple[int, str]] = []
    try:
        made.append(tempfile.mkstemp(prefix=".csihp-doctor-", dir=directory))
        made.append(tempfile.mkstemp(prefix=".csihp-doctor-", dir=directory))
        (src_fd, _), (dst_fd, _) = made
        # One block of real data: a reflink of an empty file would prove nothing.
        os.write(src_fd, b"csi-hostpath doctor\n" * 205)
        fcntl.ioctl(dst_fd, FICLONE, src_fd)
    except OSError as exc:
        if exc.errno in _NO_REFLINK_ERRNOS:
            detail = f"reflink: no (snapshots copy data extents; still sparse) on {fs}"
            return Finding("pool-reflink", "ok", detail)
        return Finding(
            "pool-reflink",
            "warn",
            f"reflink could not be tested in {directory}: {exc.strerror}",
            "check that the pool filesystem has free space and accepts writes",
        )
    finally:
        for fd, name in made:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
    return Finding("pool-reflink", "ok", f"reflink: yes (snapshots are instant) on {fs}")
