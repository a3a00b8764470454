"""`csi-hostpath volume` and the operator commands on input that isn't what they expect.

`csi-hostpath volume` and the operator commands where a person's input is not what the
command expects, against a real driver: a shrink, a blank read-only volume, sizes that change on
the way, a clone smaller than its source, a user's own mount directory, a volume mounted twice,
and a driver found from another directory or through a bare socket path."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import helpers as h
from tests.support.kernel import mounts_under, released_after_teardown
from tests.support.make_run import MakeRun, make_run_session
from tests.support.volume_cli_runner import Cli

MiB = h.MiB


def test_expand_refuses_a_shrink_and_says_when_there_is_nothing_to_do(cli: Cli) -> None:
    cli.json("create", "v", "--size", "100Mi")
    shrink = cli("expand", "v", "--size", "50Mi", ok=False)
    assert shrink.rc == 2 and "v is 100Mi, more than the 50Mi asked for" in shrink.err
    assert "next: ask for more than 100Mi" in shrink.err
    same = cli("expand", "v", "--size", "100Mi")
    assert same.out == "v is 100Mi already; nothing to do\n"
    assert cli.json("expand", "v", "--size", "100Mi")["filesystem"] == "not-needed"
    [listed] = cli.json("list")
    assert listed["capacity_bytes"] == 100 * MiB
    cli.json("delete", "v")


def test_a_blank_rox_volume_is_refused_with_the_way_out(cli: Cli) -> None:
    blank = cli("create", "r", "--mode", "rox", "--size", "32Mi", ok=False)
    assert blank.rc == 2 and "a blank ext4 volume can't be rox" in blank.err
    assert "--from-snapshot SNAP" in blank.err
    assert cli.json("list") == []  # nothing was created
    # The way out: a snapshot of a volume that was mounted (so formatted) and written.
    cli.json("create", "src", "--size", "32Mi")
    source = cli.root / "src"
    cli.json("mount", "src", str(source))
    (source / "data.txt").write_text("data")
    cli.json("unmount", str(source))
    cli.json("snapshot", "src", "snap")
    cli.json("create", "r", "--mode", "rox", "--from-snapshot", "snap")
    target = cli.root / "r"
    assert cli.json("mount", "r", str(target))["readonly"] is True
    assert (target / "data.txt").read_text() == "data"
    cli.json("unmount", str(target))
    for name in ("r", "snap", "src"):
        cli.json("delete", name)


def test_sizes_say_when_they_change_and_a_clone_is_never_smaller(cli: Cli) -> None:
    tiny = cli("create", "a", "--size", "1")
    assert "asked for 1 byte: rounded up to 16Mi, the smallest ext4 volume" in tiny.out
    decimal = cli("create", "b", "--size", "1G")
    assert "created b: 954Mi" in decimal.out
    assert "953.7Mi (1000000000 bytes): rounded up to 954Mi, a volume is a whole number" in (
        decimal.out
    )
    exact = cli("create", "c", "--size", "64Mi")
    assert "rounded" not in exact.out

    milli = cli("create", "d", "--size", "100m", ok=False)
    assert milli.rc == 2 and "did you mean 100Mi?" in milli.err
    negative = cli("create", "d", "--size", "-5Gi", ok=False)
    assert negative.rc == 2 and "a size can't be negative" in negative.err

    small = cli("create", "clone", "--from-volume", "c", "--size", "16Mi", ok=False)
    assert small.rc == 5 and "OUT_OF_RANGE" in small.err
    assert "the source holds 64Mi, more than the 16Mi asked for" in small.err
    assert "next: ask for at least 64Mi, the size of c" in small.err
    cli.json("snapshot", "c", "s")
    restore = cli("create", "r", "--from-snapshot", "s", "--size", "16Mi", ok=False)
    assert restore.rc == 5 and "ask for at least 64Mi" in restore.err
    assert cli.json("create", "clone", "--from-volume", "c")["capacity_bytes"] == 64 * MiB

    # The pool's refusal in quantities, not 15-digit byte counts.
    too_big = cli("create", "big", "--size", "100Ti", ok=False)
    assert too_big.rc == 5 and "100Ti was asked for" in too_big.err
    for name in ("a", "b", "c", "clone", "s"):
        cli.json("delete", name)


def test_unmount_removes_only_what_mount_made(cli: Cli, workdir: Path) -> None:
    cli.json("create", "v", "--size", "32Mi")
    mine = cli.root / "mine"
    mine.mkdir(mode=0o750)
    os.chmod(mine, 0o750)
    cli.json("mount", "v", "mine")
    made = cli.root / "made" / "by" / "mount"
    cli.json("mount", "v", str(made))
    cli.json("unmount", "mine")
    cli.json("unmount", str(made))
    assert mine.is_dir() and stat.S_IMODE(mine.stat().st_mode) == 0o750
    assert not (cli.root / "made").exists()
    cli.json("delete", "v")
    assert mounts_under(workdir) == [] and released_after_teardown(workdir) == []


def test_delete_of_a_volume_mounted_twice_names_both_unmounts(cli: Cli) -> None:
    cli.json("create", "v", "--size", "32Mi")
    one, two = cli.root / "one", cli.root / "two"
    cli.json("mount", "v", str(one))
    cli.json("mount", "v", str(two))
    refused = cli("delete", "v", ok=False)
    assert refused.rc == 4
    [next_step] = [line for line in refused.err.splitlines() if "next:" in line]
    assert f"unmount {one}" in next_step and f"unmount {two}" in next_step
    cli.json("unmount", str(one))
    cli.json("unmount", str(two))
    cli.json("delete", "v")


def test_expand_of_a_block_volume_speaks_of_its_device_not_a_filesystem(cli: Cli) -> None:
    blk = cli.root / "blk"
    cli.json("create", "b", "--fs", "block", "--size", "32Mi")
    cli.json("mount", "b", str(blk))
    try:
        online = cli("expand", "b", "--size", "64Mi").out
        assert f"the block device at {blk} grew online" in online, online
        assert "filesystem" not in online, online
    finally:
        cli("unmount", str(blk), ok=False)
    later = cli("expand", "b", "--size", "96Mi").out
    assert "the block device has the new size from its next mount" in later, later
    assert "filesystem" not in later, later
    cli.json("delete", "b")


def test_a_block_volume_lists_no_used_bytes_it_cannot_know(cli: Cli, workdir: Path) -> None:
    blk = cli.root / "blk"
    cli.json("create", "b", "--fs", "block", "--size", "32Mi")
    cli.json("mount", "b", str(blk))
    try:
        with open(blk, "r+b") as dev:
            dev.write(b"written" * MiB)
        # A raw device has no filesystem to count what is used: the pool's allocation is known.
        [listed] = cli.json("list", f"--pool-dir={workdir}/drv-state/pool")
        assert listed["used_bytes"] is None, listed
        assert listed["allocated_bytes"] >= 7 * MiB, listed
        header, row = (line.split() for line in cli("list").out.splitlines()[:2])
        assert row[header.index("USED")] == "-", (header, row)
    finally:
        cli("unmount", str(blk), ok=False)
    cli.json("delete", "b")


@pytest.fixture
def make_run(workdir: Path) -> Iterator[tuple[Cli, MakeRun]]:
    """`make run` in a checkout-like directory, and a shell in a subdirectory of it with no
    variable saying where the driver is."""
    checkout = workdir / "checkout"
    below = checkout / "src" / "deep"
    below.mkdir(parents=True)
    log = workdir / "make-run.log"
    with make_run_session(checkout / ".run", below, log, run_dir_env=False) as (cli, run):
        yield cli, run.start()


def test_the_driver_and_the_names_are_found_as_a_person_points_at_them(
    make_run: tuple[Cli, MakeRun], workdir: Path
) -> None:
    cli, run = make_run
    run_dir = run.run_dir
    volume_id = cli.json("create", "d", "--size", "32Mi")["volume_id"]  # .run found upwards
    target = cli.root / "d"
    cli.json("mount", "d", str(target))

    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    lost = cli("list", cwd=elsewhere, ok=False)
    assert lost.rc == 6 and "no .run of `make run` is here or above" in lost.err
    assert "--run-dir" in lost.err
    # The socket's bare path (csi-sanity's form), the option before the subcommand; the records
    # are the ones beside that socket, so the volume keeps its name.
    [listed] = cli.json("list", "--endpoint", str(run_dir / "csi.sock"), cwd=elsewhere)
    assert listed["name"] == "d" and listed["volume_id"] == volume_id
    before = cli("--endpoint", str(run_dir / "csi.sock"), "--json", "list", cwd=elsewhere)
    assert [v["name"] for v in before.doc["volumes"]] == ["d"]
    bad = cli("list", "--endpoint", "foo", cwd=elsewhere, ok=False)
    assert bad.rc == 2 and "is not a unix:// URL" in bad.err

    # The operator commands find `make run`'s state the same way, and take the volume's name.
    held = cli.command("ledger", "list", "--volume", "d")
    assert volume_id in held.out and "node-a" in held.out
    assert volume_id in cli.command("ledger", "list").out
    inspected = cli.command("inspect", "d")
    assert volume_id in inspected.out and str(target) in inspected.out
    state = f"--state-dir={run_dir / 'state'}"
    assert str(target) in cli.command("inspect", "d", state, cwd=elsewhere).out
    assert cli.command("inspect", "nope", ok=False).rc == 3
    assert cli.command("inspect", "vol-00000000000000000000000000000000", ok=False).rc == 3
    assert cli.command("ledger", "list", "--volume", "nope", ok=False).rc == 3

    cli.json("unmount", str(target))
    cli.json("delete", "d")
    run.stop()
    assert mounts_under(workdir) == [] and released_after_teardown(workdir) == []


def test_unmount_from_inside_the_mount_does_not_hold_it_itself(cli: Cli) -> None:
    cli.json("create", "v", "--size", "32Mi")
    mnt = cli.root / "mnt"
    cli.json("mount", "v", str(mnt))
    (mnt / "f").write_text("f")
    # The command starts in the mount and with a descriptor on a file in it, both inherited:
    # neither may keep the mount busy, and nothing else holds it.
    shell = f"cd {mnt} && exec 3< f && exec {sys.executable} -m csi_hostpath volume unmount ."
    done = subprocess.run(
        ["bash", "-c", shell], env=cli.env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert not h.mounted(mnt)
    cli.json("delete", "v")
