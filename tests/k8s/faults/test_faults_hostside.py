"""A node's processes and mounts read from the host's /proc, checked on a /proc of our own."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from tests.k8s.faults import hostside
from tests.k8s.faults.phases import Subject


def proc_entry(root: Path, pid: int, ppid: int, nspids: list[int], start: int = 100) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    nspid = " ".join(str(p) for p in nspids)
    (d / "status").write_text(f"Name:\tx\nPPid:\t{ppid}\nNSpid:\t{nspid}\n")
    fields = " ".join(["S", str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 5)
    (d / "stat").write_text(f"{pid} (a b) {fields}\n")


def test_the_host_pid_is_the_one_below_this_nodes_init(tmp_path: Path) -> None:
    proc_entry(tmp_path, 1, 0, [1])
    proc_entry(tmp_path, 100, 1, [100, 1])  # node one's init
    proc_entry(tmp_path, 200, 1, [200, 1])  # node two's init
    proc_entry(tmp_path, 110, 100, [110, 42])  # node one's kubelet, pid 42 in the node
    proc_entry(tmp_path, 210, 200, [210, 42])  # node two's, also 42
    proc_entry(tmp_path, 120, 100, [120, 50])  # a shim in node one
    proc_entry(tmp_path, 130, 120, [130, 57, 1])  # etcd in its pod: 57 in the node
    assert hostside.host_pid(100, 42, tmp_path) == 110
    assert hostside.host_pid(200, 42, tmp_path) == 210
    assert hostside.host_pid(100, 57, tmp_path) == 130
    assert hostside.host_pid(200, 57, tmp_path) == 0
    assert hostside.host_pid(999, 42, tmp_path) == 0
    assert hostside.start_of(130, tmp_path) == "100"


def test_a_kill_on_the_host_shoots_only_the_process_that_started_then() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        start = hostside.start_of(child.pid)
        assert not hostside.kill_on_host(child.pid, str(int(start) + 1))
        assert child.poll() is None
        assert hostside.kill_on_host(child.pid, start)
        assert child.wait(timeout=10) == -9
        assert not hostside.kill_on_host(child.pid, start)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_mount_points_are_the_fifth_field(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "mountinfo").write_text(
        "22 1 0:21 / /proc rw - proc proc rw\n"
        "30 22 7:2 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount rw"
        " - ext4 /dev/loop2 rw\n"
    )
    assert hostside.mount_points(7, tmp_path) == [
        "/proc",
        "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount",
    ]


def test_the_unstage_window_is_the_target_gone_and_the_staging_mount_there() -> None:
    subject = Subject.__new__(Subject)  # only the names the window reads
    subject.uid, subject.handle, subject.pv = "u1", "vol-1", "pv-1"
    sha = hashlib.sha256(b"vol-1").hexdigest()
    stage = f"/var/lib/kubelet/plugins/kubernetes.io/csi/d/{sha}/globalmount"
    target = "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-1/mount"
    assert subject.unstage_window([stage, target]) == "before"
    assert subject.unstage_window([stage]) == "in"
    assert subject.unstage_window(["/proc"]) == "after"
