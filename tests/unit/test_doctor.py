"""`csi-hostpath doctor`'s checks on this machine as it is and on prepared failures.

`csi-hostpath doctor`: each check on this machine as it is, and on prepared failures (a PATH
without a tool, a held lock, a loose socket, a kernel without xfs, a process without
CAP_SYS_RESOURCE)."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from csi_hostpath.doctor import Finding, diagnose, exit_code, machine, render
from tests.support.needs import packages, skip_unless_tools

TOOLS = (
    "mkfs.ext4",
    "mkfs.xfs",
    "blkid",
    "mount",
    "umount",
    "e2fsck",
    "resize2fs",
    "xfs_growfs",
)


@pytest.fixture
def scratch() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="csihp-test-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def state(scratch: Path) -> Path:
    path = scratch / "state"
    path.mkdir()
    return path


def checks_by_name(findings: list[Finding]) -> dict[str, Finding]:
    named = {finding.check: finding for finding in findings}
    assert len(named) == len(findings), "check names must be unique"
    return named


def real_tools() -> dict[str, str]:
    found = {name: shutil.which(name) for name in TOOLS}
    skip_unless_tools(*TOOLS)
    return {name: path for name, path in found.items() if path is not None}


def needs_loop_control() -> None:
    if os.geteuid() != 0 or not os.path.exists("/dev/loop-control"):
        pytest.skip("needs root and /dev/loop-control")


def test_a_path_without_mkfs_xfs_is_a_warning_that_names_it(state: Path, scratch: Path) -> None:
    bin_dir = scratch / "bin"
    bin_dir.mkdir()
    for name, path in real_tools().items():
        if name != "mkfs.xfs":
            (bin_dir / name).symlink_to(path)

    findings = diagnose(state, state, path_env=str(bin_dir))
    by_check = checks_by_name(findings)

    xfs = by_check["tool:mkfs.xfs"]
    assert xfs.status == "warn"
    assert "mkfs.xfs not found on PATH" in xfs.detail
    assert "xfs volumes can't be staged" in xfs.detail
    assert "apt-get install xfsprogs" in xfs.fix
    assert str(bin_dir) in xfs.fix  # says where it looked
    for name in TOOLS:
        if name != "mkfs.xfs":
            assert by_check[f"tool:{name}"].status == "ok"
            assert by_check[f"tool:{name}"].detail == str(bin_dir / name)

    text = render(findings)
    row = next(line for line in text.splitlines() if "tool:mkfs.xfs" in line)
    assert row.startswith("WARN ")
    assert "mkfs.xfs not found on PATH" in row
    fix_line = text.splitlines()[text.splitlines().index(row) + 1]
    assert fix_line.lstrip().startswith("fix: install it: `apt-get install xfsprogs`")


def test_an_empty_path_fails_on_the_tools_the_node_cannot_live_without(
    state: Path, scratch: Path
) -> None:
    findings = diagnose(state, state, path_env=str(scratch / "nothing-here"))
    by_check = checks_by_name(findings)

    for name in ("mkfs.ext4", "blkid", "mount", "umount"):
        assert by_check[f"tool:{name}"].status == "fail", by_check[f"tool:{name}"]
        assert f"{name} not found on PATH" in by_check[f"tool:{name}"].detail
    for name in ("mkfs.xfs", "xfs_growfs", "e2fsck", "resize2fs"):
        assert by_check[f"tool:{name}"].status == "warn"
    assert "apt-get install e2fsprogs" in by_check["tool:mkfs.ext4"].fix
    assert "util-linux" in by_check["tool:mount"].fix
    assert exit_code(findings) == 1


def test_a_held_lock_means_a_daemon_is_running(state: Path) -> None:
    with open(state / ".lock", "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock = checks_by_name(diagnose(state, state))["state-lock"]
        assert lock.status == "ok"
        assert "a csi-hostpath daemon is running on it (lock held)" in lock.detail
        assert f"pid {os.getpid()}" in lock.detail  # found in /proc/locks
        fcntl.flock(held, fcntl.LOCK_UN)

    lock = checks_by_name(diagnose(state, state))["state-lock"]
    assert lock == Finding("state-lock", "ok", "no daemon holds it")
    # The doctor let go of its own test lock: a daemon could take it now.
    with open(state / ".lock", "ab") as again:
        fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_missing_state_dir_is_reported_and_never_created(scratch: Path) -> None:
    state_dir = scratch / "not" / "yet"
    findings = checks_by_name(diagnose(state_dir, state_dir / "pool", f"unix://{scratch}/csi.sock"))

    assert findings["state-dir"].status == "warn"
    assert "will be created" in findings["state-dir"].detail
    assert findings["state-lock"].status == "ok"
    assert findings["socket"].status == "warn"  # no daemon, so no socket is expected
    assert "does not exist" in findings["socket"].detail
    assert findings["pool-dir"].status == "warn"
    assert not (scratch / "not").exists()
    assert os.listdir(scratch) == []  # the reflink probe cleaned up after itself


def test_a_socket_anyone_can_use_is_flagged(state: Path, scratch: Path) -> None:
    path = scratch / "csi.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()
        path.chmod(0o644)
        with open(state / ".lock", "ab") as held:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            findings = diagnose(state, state, f"unix://{path}")
    sock = checks_by_name(findings)["socket"]

    assert sock.status == "warn"
    assert "mode 0644, not 0600" in sock.detail
    assert f"chmod 0600 {path}" in sock.fix
    assert "fix: " in render(findings)


@pytest.mark.skipif(os.geteuid() != 0, reason="the socket must be owned by root")
def test_a_root_socket_with_mode_0600_and_a_daemon_behind_it_is_ok(
    state: Path, scratch: Path
) -> None:
    path = scratch / "csi.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()
        path.chmod(0o600)
        with open(state / ".lock", "ab") as held:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            sock = checks_by_name(diagnose(state, state, f"unix://{path}"))["socket"]
            assert sock.status == "ok", sock
        # The same socket without the daemon's lock: served by something with another state dir.
        sock = checks_by_name(diagnose(state, state, f"unix://{path}"))["socket"]
        assert sock.status == "warn"
        assert "no daemon holds" in sock.detail
    # Bound but no longer listening: a stale socket left by a daemon that died.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        path.unlink()
        dead.bind(str(path))
        path.chmod(0o600)
        sock = checks_by_name(diagnose(state, state, f"unix://{path}"))["socket"]
    assert sock.status == "warn"
    assert "nothing listens" in sock.detail


def test_a_missing_socket_while_a_daemon_runs_fails(state: Path, scratch: Path) -> None:
    with open(state / ".lock", "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        findings = diagnose(state, state, f"unix://{scratch}/elsewhere.sock")
    sock = checks_by_name(findings)["socket"]
    assert sock.status == "fail"
    assert "does not exist, but a daemon holds" in sock.detail
    assert exit_code(findings) == 1

    bad = checks_by_name(diagnose(state, state, "tcp://127.0.0.1:1"))["socket"]
    assert bad.status == "fail"
    assert "unix:///absolute/path" in bad.detail


def test_no_loop_control_fails_with_modprobe_and_privileged_in_the_fix(
    state: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No node, and a kernel without the loop driver: nothing to make the node from.
    monkeypatch.setattr(machine, "LOOP_CONTROL", str(scratch / "loop-control"))
    monkeypatch.setattr(machine, "SYS_LOOP_CONTROL", str(scratch / "no-sys" / "dev"))
    findings = checks_by_name(diagnose(state, state))

    control = findings["loop-control"]
    assert control.status == "fail"
    assert "does not exist" in control.detail
    assert "modprobe loop" in control.fix
    assert "privileged" in control.fix
    assert "/dev" in control.fix
    assert findings["loop-devices"].status == "warn"


def test_a_missing_loop_control_node_is_made_from_sysfs(
    state: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A static /dev (a kind node's) may lack loop-control although the kernel has it: the
    driver makes the node, and so does the doctor, from the kernel's numbers."""
    needs_loop_control()
    made = scratch / "loop-control"
    monkeypatch.setattr(machine, "LOOP_CONTROL", str(made))
    findings = checks_by_name(diagnose(state, state))

    assert findings["loop-control"].status == "ok", findings["loop-control"]
    assert "made here" in findings["loop-control"].detail
    assert made.is_char_device()
    assert made.stat().st_rdev == os.stat("/dev/loop-control").st_rdev


def test_kernel_filesystems_from_proc_and_modules(
    state: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = scratch / "filesystems"
    modules = scratch / "modules"
    (modules / os.uname().release).mkdir(parents=True)
    monkeypatch.setattr(machine, "PROC_FILESYSTEMS", str(proc))
    monkeypatch.setattr(machine, "MODULES_DIR", str(modules))

    proc.write_text("nodev\tproc\nnodev\ttmpfs\n\text4\n")
    findings = checks_by_name(diagnose(state, state))
    assert findings["kernel-fs:ext4"].status == "ok"
    assert findings["kernel-fs:xfs"].status == "warn"
    assert "modprobe xfs" in findings["kernel-fs:xfs"].fix

    # Not loaded, but a module the kernel can load on the first mount: fine.
    proc.write_text("nodev\tproc\n")
    (modules / os.uname().release / "modules.dep").write_text(
        "kernel/fs/xfs/xfs.ko.zst: kernel/lib/libcrc32c.ko.zst\n"
    )
    findings = checks_by_name(diagnose(state, state))
    assert findings["kernel-fs:xfs"].status == "ok"
    assert "loads on the first mount" in findings["kernel-fs:xfs"].detail
    assert findings["kernel-fs:ext4"].status == "fail"
    assert exit_code(list(findings.values())) == 1


def test_cap_sys_resource_is_read_from_capeff(
    state: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status = scratch / "status"
    monkeypatch.setattr(machine, "PROC_STATUS", str(status))

    status.write_text("Name:\tpython\nCapPrm:\t000001ffffffffff\nCapEff:\t000001fffeffffff\n")
    cap = checks_by_name(diagnose(state, state))["cap-sys-resource"]
    assert cap.status == "warn"
    assert "online ext4 expansion will be refused" in cap.detail
    assert "privileged" in cap.fix

    status.write_text("CapEff:\t0000000001000000\n")  # bit 24 alone
    assert checks_by_name(diagnose(state, state))["cap-sys-resource"].status == "ok"


def test_render_aligns_columns_and_puts_a_fix_under_each_problem() -> None:
    findings = [
        Finding("loop-control", "ok", "fine"),
        Finding("tool:mkfs.xfs", "warn", "mkfs.xfs not found on PATH", "apt-get install xfsprogs"),
        Finding("x", "fail", "broken", "mend it"),
    ]
    lines = render(findings).splitlines()

    assert lines[0].split() == ["STATUS", "CHECK", "DETAIL"]
    detail_column = lines[0].index("DETAIL")
    rows = [lines[1], lines[2], lines[4]]
    assert [row[:detail_column].split() for row in rows] == [
        ["OK", "loop-control"],
        ["WARN", "tool:mkfs.xfs"],
        ["FAIL", "x"],
    ]
    assert [row[detail_column:] for row in rows] == ["fine", "mkfs.xfs not found on PATH", "broken"]
    assert lines[3] == " " * detail_column + "fix: apt-get install xfsprogs"
    assert lines[5] == " " * detail_column + "fix: mend it"
    assert lines[-1] == "1 ok, 1 warn, 1 fail"
    assert render([]).splitlines()[-1] == "0 ok, 0 warn, 0 fail"


def test_exit_code_is_one_only_when_something_fails() -> None:
    ok = Finding("a", "ok", "fine")
    warn = Finding("b", "warn", "limited", "do this")
    fail = Finding("c", "fail", "broken", "do that")
    assert exit_code([]) == 0
    assert exit_code([ok, warn]) == 0
    assert exit_code([ok, warn, fail]) == 1
    assert exit_code(iter([fail])) == 1
    with pytest.raises(ValueError, match="status must be one of"):
        Finding("d", "error", "typo")  # type: ignore[arg-type]


def test_files_in_the_pool_named_like_no_volume_are_reported_and_kept(workdir: Path) -> None:
    """adopt_pool takes only vol-<id>.img and snap-<id>.img; anything else in volumes/ or
    snapshots/ was neither adopted nor quarantined nor reported. Doctor names it; nothing
    deletes it, a controller's restart included."""
    from csi_hostpath.doctor.pool_checks import check_strays
    from csi_hostpath.system.fake import fake_system
    from tests.conftest import in_process
    from tests.support import helpers as h

    pool = workdir / "d-state" / "pool"
    with in_process(workdir, "d", system=fake_system) as client:
        volume_id = h.create(client, "kept", h.block_cap(), 16 << 20).volume_id
    assert check_strays(pool).status == "ok"
    strays = [
        pool / "volumes" / "backup.img",
        pool / "volumes" / "vol-123.img",  # not a volume ID
        pool / "volumes" / f"{volume_id}.img.bak",
        pool / "snapshots" / "notes.txt",
    ]
    for path in strays:
        path.write_bytes(b"someone's data")
    with in_process(workdir, "d", system=fake_system):
        pass  # a controller's start: adopts and quarantines what is the driver's, no more
    found = check_strays(pool)
    assert found.status == "warn", found
    for path in strays:
        assert f"{path.parent.name}/{path.name}" in found.detail
        assert path.read_bytes() == b"someone's data"
    assert f"volumes/{volume_id}.img" not in found.detail.replace(".img.bak", "")
    assert "4 file(s)" in found.detail and "rename it back" in found.fix
    assert "pool-strays" in {f.check for f in diagnose(workdir / "d-state", pool)}


def test_doctor_names_the_package_tools_system_deps_installs() -> None:
    """Doctor's fix line and the installer (tools/system-deps.txt) never disagree on a package:
    the image carries no tools/ folder, so doctor keeps its own table, held to that one here."""
    table = packages()
    assert {tool.name: tool.package for tool in machine.TOOLS} == {
        tool.name: table[tool.name] for tool in machine.TOOLS
    }
