"""What a person new to the driver meets in the README's local session, on a real driver.

What a person new to the driver meets in the README's local session, against a real driver:
a busy report that outlives its cause, sizes written the way people write them, an unmount given
the volume's name, and a mount over a directory that holds files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from csi_hostpath.core.sizes import format_bytes
from tests.support import helpers as h
from tests.support.volume_cli_runner import Cli


def _inspect(cli: Cli, name: str) -> str:
    state = Path(cli.env["CSI_HOSTPATH_ENDPOINT"].removeprefix("unix://")).parent / "drv-state"
    return cli.command("inspect", name, "--state-dir", str(state)).out


@contextmanager
def _mounted_beneath(cli: Cli) -> Iterator[tuple[Path, Path]]:
    """Volume v mounted at ./v and volume w at ./v/w; both unmounted and deleted afterwards."""
    cli.json("create", "v", "--size", "32Mi")
    cli.json("create", "w", "--size", "32Mi")
    outer, inner = cli.root / "v", cli.root / "v" / "w"
    cli.json("mount", "v", str(outer))
    cli.json("mount", "w", str(inner))
    try:
        yield outer, inner
    finally:
        for path in (inner, outer):
            if h.mounted(path):
                cli("unmount", str(path), ok=False)
    for name in ("v", "w"):
        cli.json("delete", name)


def test_a_busy_report_goes_once_the_mount_beneath_is_gone(cli: Cli) -> None:
    with _mounted_beneath(cli) as (outer, inner):
        busy = cli("unmount", str(outer), ok=False)
        assert busy.rc == 4
        assert "stuck" in _inspect(cli, "v")
        cli.json("unmount", str(inner))
        # v stays mounted, as the person now wants: nothing holds it any more.
        inspected = _inspect(cli, "v")
        assert "stuck" not in inspected and "busy" not in inspected, inspected


def test_unmount_takes_the_volumes_name(cli: Cli) -> None:
    cli.json("create", "v", "--size", "32Mi")
    one, two = cli.root / "one", cli.root / "two"
    cli.json("mount", "v", str(one))
    try:
        done = cli("unmount", "v")  # no ./v here: the name
        assert f"unmounted v from {one}" in done.out
        assert not h.mounted(one)
        cli.json("mount", "v", str(one))
        cli.json("mount", "v", str(two))
        both = cli("unmount", "v", ok=False)
        assert both.rc == 2 and "v is mounted at 2 places" in both.err, both.err
        assert f"unmount {one}" in both.err and f"unmount {two}" in both.err
        never = cli("unmount", "nothing-here", ok=False)
        assert never.rc == 3 and "no volume is mounted at" in never.err
    finally:
        for path in (one, two):
            if h.mounted(path):
                cli("unmount", str(path), ok=False)
    cli.json("delete", "v")


def test_a_busy_unmount_names_the_mount_beneath(cli: Cli) -> None:
    with _mounted_beneath(cli) as (outer, inner):
        busy = cli("unmount", str(outer), ok=False)
        assert busy.rc == 4 and f"{inner} is mounted beneath it" in busy.err, busy.err
        assert f"csi-hostpath volume unmount {inner}" in busy.err, busy.err
        assert f"{inner} is mounted beneath it" in _inspect(cli, "v")


def test_a_mount_over_files_is_refused_and_hides_nothing(cli: Cli) -> None:
    cli.json("create", "v", "--size", "32Mi")
    full = cli.root / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    try:
        refused = cli("mount", "v", str(full), ok=False)
        assert refused.rc == 7 and f"{full} holds 1 entry (notes.txt)" in refused.err, refused.err
        assert "an empty directory" in refused.err
        assert not h.mounted(full) and (full / "notes.txt").read_text() == "mine"
        [listed] = cli.json("list")
        assert listed["mounts"] == []
    finally:
        if h.mounted(full):
            cli("unmount", str(full), ok=False)
    cli.json("delete", "v")


def test_list_says_what_df_says_while_a_grow_waits_for_the_next_mount(cli: Cli) -> None:
    cli.json("create", "g", "--size", "64Mi")
    mnt = cli.root / "g"
    cli.json("mount", "g", str(mnt))
    try:
        grown = cli.json("expand", "g", "--size", "128Mi")
        if grown["filesystem"] != "on-next-mount":
            pytest.skip("the driver grows a mounted ext4 here (it has CAP_SYS_RESOURCE)")
        st = os.statvfs(mnt)
        df_size = format_bytes(st.f_blocks * st.f_frsize)
        listed = cli("list").out
        assert f"g: 128Mi, but its mounted filesystem is {df_size} (what df shows)" in listed, (
            listed
        )
        cli.json("unmount", str(mnt))
        cli.json("mount", "g", str(mnt))
        assert "what df shows" not in cli("list").out
    finally:
        if h.mounted(mnt):
            cli("unmount", str(mnt), ok=False)
    cli.json("delete", "g")


def test_inspect_gives_a_volume_made_here_the_volume_commands_steps(cli: Cli) -> None:
    cli.json("create", "v", "--size", "32Mi")
    said = _inspect(cli, "v")
    assert "VolumeAttachment" not in said and "kubelet" not in said, said
    assert "csi-hostpath volume mount v ./v" in said, said
    cli.json("delete", "v")


def test_the_ledger_names_the_volumes_made_here(cli: Cli) -> None:
    volume_id = cli.json("create", "named", "--size", "32Mi")["volume_id"]
    mnt = cli.root / "named"
    cli.json("mount", "named", str(mnt))
    state = Path(cli.env["CSI_HOSTPATH_ENDPOINT"].removeprefix("unix://")).parent / "drv-state"
    try:
        [header, row] = cli.command("ledger", "list", "--state-dir", str(state)).out.splitlines()
        assert header.split()[:2] == ["VOLUME", "NODE"] and header.split()[-1] == "NAME", header
        assert row.split()[:2] == [volume_id, "node-a"] and row.split()[-1] == "named", row
    finally:
        cli("unmount", str(mnt), ok=False)
    cli.json("delete", "named")
