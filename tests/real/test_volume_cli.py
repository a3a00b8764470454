"""`csi-hostpath volume` against a real driver: a volume's whole life and bad inputs.

`csi-hostpath volume` against a real `csi-hostpath serve` process on real loop devices: a
volume's whole life, and the bad inputs a person or a script will give it. Every command runs as
a subprocess, as a person would run it, so a traceback anywhere would show."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support import helpers as h
from tests.support.kernel import loops_backed_under, mounts_under, released_after_teardown
from tests.support.needs import needs_fs
from tests.support.volume_cli_runner import Cli

MiB = h.MiB


def df_bytes(path: Path) -> int:
    out = subprocess.run(
        ["df", "-B1", "--output=size", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[-1])


def read_back(path: Path) -> bytes:
    return path.read_bytes()


@needs_fs("xfs")
def test_a_volumes_whole_life_leaves_nothing_behind(cli: Cli, workdir: Path) -> None:
    # The pool of a driver started by `spawn` is not RUN_DIR/state/pool: say where it is.
    pool = f"--pool-dir={workdir}/drv-state/pool"
    data_dir, restored_dir, clone_dir = (cli.root / n for n in ("data", "restored", "clone"))

    vol = cli.json("create", "data", "--size", "64Mi")
    assert vol["capacity_bytes"] == 64 * MiB and vol["fs"] == "ext4" and vol["mounts"] == []

    mounted = cli.json("mount", "data", "data")  # relative to the cwd, as a person types it
    assert mounted["path"] == str(data_dir) and not mounted["readonly"]
    assert h.mounted(data_dir)
    payload = h.write_pattern(data_dir / "payload.bin", 3 * MiB)

    [listed] = cli.json("list", pool)
    assert listed["name"] == "data" and listed["mounts"] == [
        {"path": str(data_dir), "readonly": False}
    ]
    assert listed["allocated_bytes"] >= 3 * MiB  # the sparse file holds the written data
    assert listed["used_bytes"] >= 3 * MiB
    assert listed["health"]["abnormal"] is False
    assert listed["published_nodes"] == ["node-a"]

    snap = cli.json("snapshot", "data", "s1")
    assert snap["ready_to_use"] and snap["source_volume"] == "data"
    [snap_listed] = cli.json("snapshots")
    assert snap_listed["snapshot_id"] == snap["snapshot_id"]

    # Restore into a larger volume: the filesystem grows to it on its first stage.
    restored = cli.json("create", "restored", "--from-snapshot", "s1", "--size", "96Mi")
    assert restored["source"] == "snapshot:s1" and restored["fs"] == "ext4"
    cli.json("mount", "restored", str(restored_dir))
    assert read_back(restored_dir / "payload.bin") == payload
    assert df_bytes(restored_dir) > 80 * MiB

    cli.json("create", "clone", "--from-volume", "data")
    cli.json("mount", "clone", str(clone_dir), "--read-only")
    assert read_back(clone_dir / "payload.bin") == payload
    with pytest.raises(OSError):
        (clone_dir / "new").write_text("read-only mount")

    # Online expansion, ext4: online where the driver may resize a mounted ext4 (it needs
    # CAP_SYS_RESOURCE), else the command says it grows on the next mount, and it does.
    before = df_bytes(data_dir)
    grown = cli.json("expand", "data", "--size", "128Mi")
    assert grown["capacity_bytes"] == 128 * MiB
    assert grown["filesystem"] in ("grown", "on-next-mount")
    if grown["filesystem"] == "on-next-mount":
        cli.json("unmount", str(data_dir))
        cli.json("mount", "data", str(data_dir))
    assert df_bytes(data_dir) > 1.8 * before
    assert read_back(data_dir / "payload.bin") == payload

    # xfs grows while mounted everywhere: df shows it without an unmount.
    xfs_dir = cli.root / "xfs"
    cli.json("create", "x", "--fs", "xfs", "--size", "320Mi")
    cli.json("mount", "x", str(xfs_dir))
    (xfs_dir / "keep").write_text("kept")
    before = df_bytes(xfs_dir)
    grown = cli.json("expand", "x", "--size", "640Mi")
    assert grown["filesystem"] == "grown"
    assert df_bytes(xfs_dir) > 1.8 * before
    assert (xfs_dir / "keep").read_text() == "kept"

    # A block volume: PATH becomes the device itself.
    blk = cli.root / "blk"
    cli.json("create", "b", "--fs", "block", "--size", "32Mi")
    cli.json("mount", "b", str(blk))
    assert blk.is_block_device()
    with open(blk, "r+b") as dev:
        dev.write(b"block!")
    with open(blk, "rb") as dev:
        assert dev.read(6) == b"block!"
    assert cli.json("expand", "b", "--size", "64Mi")["filesystem"] in ("grown", "not-needed")
    size = subprocess.run(
        ["blockdev", "--getsize64", str(blk)], capture_output=True, text=True, check=True
    ).stdout
    assert int(size) == 64 * MiB

    for path in (data_dir, restored_dir, clone_dir, xfs_dir, blk):
        done = cli.json("unmount", str(path))
        assert done["unstaged"] is True
        assert not h.mounted(path) and not path.exists()
    for name in ("restored", "clone", "x", "b", "s1", "data"):
        deleted = cli.json("delete", name)
        assert deleted["name"] == name
    assert cli.json("list", pool) == []
    assert cli.json("snapshots") == []

    # Nothing left: no mount, no loop device on a pool file, no file in the pool.
    assert mounts_under(workdir) == []
    assert released_after_teardown(workdir) == []
    state_pool = workdir / "drv-state" / "pool"
    assert list((state_pool / "volumes").iterdir()) == []
    assert list((state_pool / "snapshots").iterdir()) == []
    assert list((workdir / "run" / "volume-cli" / "staging").iterdir()) == []
    assert sorted(p.name for p in cli.root.iterdir()) == []


def test_bad_input_gets_a_message_and_an_exit_code(cli: Cli, workdir: Path) -> None:
    unknown = cli("mount", "nope", "x", ok=False)
    assert unknown.rc == 3 and "no volume named 'nope'" in unknown.err and "next:" in unknown.err
    assert cli("delete", "nope", ok=False).rc == 3
    assert cli("unmount", "nowhere", ok=False).rc == 3

    too_big = cli("create", "big", "--size", "100Ti", ok=False)
    assert too_big.rc == 5 and "RESOURCE_EXHAUSTED" in too_big.err

    bad_size = cli("create", "bad", "--size", "lots", ok=False)
    assert bad_size.rc == 2 and "is not a quantity like" in bad_size.err

    # The same under --json: a parseable error document on stdout.
    doc = cli("create", "big", "--size", "100Ti", "--json", ok=False).doc
    assert doc["ok"] is False and set(doc["error"]) == {
        "exit_code",
        "grpc_code",
        "message",
        "next_step",
    }
    assert doc["error"]["exit_code"] == 5 and doc["error"]["grpc_code"] == "RESOURCE_EXHAUSTED"

    cli.json("create", "a", "--size", "32Mi")
    cli.json("create", "b", "--size", "32Mi")
    assert cli("create", "a", "--size", "32Mi", ok=False).rc == 7
    mnt = cli.root / "mnt"
    cli.json("mount", "a", str(mnt))

    # A path that already has a mount: ours, or anything else's.
    taken = cli("mount", "b", str(mnt), ok=False)
    assert taken.rc == 7 and "already has volume a mounted" in taken.err
    other = cli.root / "other"
    other.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(other)], check=True)
    try:
        foreign = cli("mount", "b", str(other), ok=False)
        assert foreign.rc == 7 and "already a mount point" in foreign.err
        # ...and unmount refuses a mount that is not one of ours, and leaves it.
        assert cli("unmount", str(other), ok=False).rc == 3
        assert h.mounted(other)
    finally:
        subprocess.run(["umount", str(other)], check=True)

    assert cli("delete", "a", ok=False).rc == 4  # still mounted

    # A mount the driver refuses after the stage (a target inside its state directory) is
    # rolled back: b is neither staged nor attached afterwards.
    refused = cli("mount", "b", str(workdir / "drv-state" / "inside"), ok=False)
    assert refused.rc == 2 and "INVALID_ARGUMENT" in refused.err
    [b] = [v for v in cli.json("list") if v["name"] == "b"]
    assert b["mounts"] == [] and b["published_nodes"] == []
    assert len(loops_backed_under(workdir)) == 1  # a's alone

    # A busy unmount names who holds the path; once released, it goes through.
    holder = subprocess.Popen(["sleep", "60"], cwd=mnt)
    try:
        busy = cli("unmount", str(mnt), ok=False)
        assert busy.rc == 4, busy.err
        assert "busy" in busy.err and f"pid {holder.pid} (sleep, cwd)" in busy.err
        assert "FAILED_PRECONDITION" in busy.err and h.mounted(mnt)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    cli.json("unmount", str(mnt))
    cli.json("delete", "a")
    cli.json("delete", "b")

    # No driver: a socket path that does not exist, and one nobody listens on.
    gone = cli("list", "--endpoint", f"unix://{workdir}/none.sock", ok=False)
    assert gone.rc == 6 and "make run" in gone.err
    stale = workdir / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()
    dead = cli("snapshots", "--endpoint", f"unix://{stale}", ok=False)
    assert dead.rc == 6 and "nothing answers" in dead.err

    assert mounts_under(workdir) == [] and released_after_teardown(workdir) == []


def _forget_mounts(run_dir: Path, name: str) -> None:
    """The records as a `mount` killed -9 after the driver's calls, before its write, leaves
    them: the volume is staged and bound, and the records know nothing of it."""
    path = run_dir / "volume-cli" / "records.json"
    records = json.loads(path.read_text())
    records["volumes"][name].update(mounts=[], staging_path="", publish_context={})
    path.write_text(json.dumps(records))


def test_a_mount_the_records_lost_is_taken_back_not_refused(cli: Cli, workdir: Path) -> None:
    run_dir = workdir / "run"
    mnt = cli.root / "mnt"
    cli.json("create", "v", "--size", "32Mi")
    cli.json("mount", "v", str(mnt))
    (mnt / "kept").write_text("kept")

    _forget_mounts(run_dir, "v")
    again = cli.json("mount", "v", str(mnt))  # the retry a person makes
    assert again["path"] == str(mnt)
    [listed] = cli.json("list")
    assert listed["mounts"] == [{"path": str(mnt), "readonly": False}]

    _forget_mounts(run_dir, "v")
    done = cli.json("unmount", str(mnt))
    assert done["unstaged"] is True and not h.mounted(mnt)
    assert mounts_under(workdir) == [] and released_after_teardown(workdir) == []
    cli.json("delete", "v")
