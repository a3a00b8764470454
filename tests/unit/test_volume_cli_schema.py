"""`csi-hostpath volume`'s --json schema and exit codes, pinned as a contract with scripts.

`csi-hostpath volume`: the --json schema and the exit codes are a contract with scripts. This
pins both to literal copies, and pins the documentation to them; the parts that need no driver
(quantities, where things are, records, the spinner) are checked here too."""

from __future__ import annotations

import argparse
import io
import re
from pathlib import Path

import pytest

from csi_hostpath.cli import build_parser
from csi_hostpath.core.sizes import QuantityError, format_bytes
from csi_hostpath.volume_cli import exit_codes
from csi_hostpath.volume_cli.args import places, typed_size
from csi_hostpath.volume_cli.copywatch import CopyWatch
from csi_hostpath.volume_cli.output import (
    ENVELOPE_FIELDS,
    ERROR_FIELDS,
    EXPAND_FILESYSTEM_STATES,
    HEALTH_FIELDS,
    MOUNT_FIELDS,
    SCHEMA,
    SCHEMA_VERSION,
    Progress,
)
from csi_hostpath.volume_cli.records import Records, RecordsFile, VolumeMount, VolumeRecord

DOC = Path(__file__).resolve().parents[2] / "docs" / "volume-cli.md"

VOLUME = ["name", "volume_id", "fs", "mode", "capacity_bytes", "source", "mounts"]
MOUNT_RESULT = ["volume", "volume_id", "path", "readonly", "fs", "staging_path"]
SNAPSHOT = [
    "name",
    "snapshot_id",
    "source_volume",
    "source_volume_id",
    "size_bytes",
    "ready_to_use",
    "created_at",
]
# A field may be added (add it here too); renaming or removing one needs a new SCHEMA_VERSION.
PINNED: dict[str, tuple[str, list[str], bool]] = {
    "create": ("volume", VOLUME, False),
    "mount": ("mount", MOUNT_RESULT, False),
    "unmount": ("mount", [*MOUNT_RESULT, "unstaged"], False),
    "list": (
        "volumes",
        [*VOLUME, "allocated_bytes", "used_bytes", "published_nodes", "health"],
        True,
    ),
    "snapshot": ("snapshot", SNAPSHOT, False),
    "snapshots": ("snapshots", SNAPSHOT, True),
    "expand": ("expand", ["volume", "volume_id", "capacity_bytes", "filesystem"], False),
    "delete": ("deleted", ["kind", "name", "id"], False),
}


def test_the_json_schema_is_pinned() -> None:
    assert SCHEMA_VERSION == "csi-hostpath.volume/v1"
    assert {c: (k, sorted(f), m) for c, (k, f, m) in SCHEMA.items()} == {
        c: (k, sorted(f), m) for c, (k, f, m) in PINNED.items()
    }
    assert ENVELOPE_FIELDS == ("schema", "command", "ok")
    assert ERROR_FIELDS == ("exit_code", "grpc_code", "message", "next_step")
    assert MOUNT_FIELDS == ("path", "readonly")
    assert HEALTH_FIELDS == ("abnormal", "message")
    assert EXPAND_FILESYSTEM_STATES == ("grown", "not-needed", "on-next-mount")


def test_the_exit_codes_are_pinned() -> None:
    assert (
        exit_codes.OK,
        exit_codes.FAILED,
        exit_codes.USAGE,
        exit_codes.NOT_FOUND,
        exit_codes.BUSY,
        exit_codes.NO_SPACE,
        exit_codes.NO_DRIVER,
        exit_codes.EXISTS,
    ) == (0, 1, 2, 3, 4, 5, 6, 7)


def test_the_documentation_names_every_field_and_exit_code() -> None:
    text = DOC.read_text()
    assert SCHEMA_VERSION in text
    documented = set(re.findall(r"`([a-z_]+)`", text))
    every = {f for _, fields, _ in SCHEMA.values() for f in fields}
    every |= {k for k, _, _ in SCHEMA.values()}
    every |= set(ERROR_FIELDS) | set(MOUNT_FIELDS) | set(HEALTH_FIELDS)
    missing = every - documented
    assert not missing, f"docs/volume-cli.md does not name {sorted(missing)}"
    for state in EXPAND_FILESYSTEM_STATES:
        assert f"`{state}`" in text
    for code in exit_codes.EXIT_CODES:
        assert re.search(rf"^\| {code} \|", text, re.MULTILINE), f"exit code {code}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1Gi", 1 << 30),
        ("512Mi", 512 << 20),
        ("10G", 10 * 10**9),
        ("1.5Gi", 3 << 29),
        ("100k", 100_000),
        ("1e9", 10**9),
        ("4096", 4096),
        ("0.5Ki", 512),
    ],
)
def test_sizes_are_kubernetes_quantities(text: str, expected: int) -> None:
    assert typed_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "1GB", "1K", "-1Gi", "0", "0Mi", "1 Gi Gi"])
def test_a_bad_size_says_what_a_size_looks_like(text: str) -> None:
    with pytest.raises(QuantityError):
        typed_size(text)


def test_sizes_print_short() -> None:
    assert [format_bytes(n) for n in (None, 512, 1 << 20, 3 << 29, 64 << 30)] == [
        "-",
        "512B",
        "1Mi",
        "1.5Gi",
        "64Gi",
    ]


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["volume", "list", *argv])


def test_flags_beat_the_environment_which_beats_make_runs_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CSI_HOSTPATH_ENDPOINT", raising=False)
    monkeypatch.delenv("CSI_HOSTPATH_RUN_DIR", raising=False)
    p = places(_parse())
    assert p.run_dir == tmp_path / ".run"
    assert p.endpoint == f"unix://{tmp_path}/.run/csi.sock"  # the Makefile's ENDPOINT
    assert p.pool_dir == tmp_path / ".run" / "state" / "pool"
    monkeypatch.setenv("CSI_HOSTPATH_RUN_DIR", "/srv/r")
    monkeypatch.setenv("CSI_HOSTPATH_ENDPOINT", "unix:///env.sock")
    p = places(_parse())
    assert (p.run_dir, p.endpoint) == (Path("/srv/r"), "unix:///env.sock")
    p = places(_parse("--run-dir", "/flag", "--endpoint", "unix:///flag.sock"))
    assert (p.run_dir, p.endpoint) == (Path("/flag"), "unix:///flag.sock")
    assert p.records_dir == Path("/flag/volume-cli")


def test_records_round_trip_and_replace_the_file_whole(tmp_path: Path) -> None:
    rf = RecordsFile(tmp_path / "volume-cli")
    with rf.locked() as records:
        vol = VolumeRecord("data", "vol-1", "ext4", "rwo", 1 << 30)
        vol.mounts.append(VolumeMount("/mnt/data", False, 1.0))
        records.volumes["data"] = vol
    again = rf.read()
    assert again.volumes["data"] == vol
    assert again.mount_at("/mnt/data") == (vol, vol.mounts[0])
    assert [p.name for p in rf.base.iterdir() if p.name.endswith(".tmp")] == []
    assert Records.from_json(again.to_json()) == again


def test_a_failed_command_keeps_the_steps_it_did(tmp_path: Path) -> None:
    rf = RecordsFile(tmp_path)
    with pytest.raises(RuntimeError), rf.locked() as records:
        records.volumes["a"] = VolumeRecord("a", "vol-a", "xfs", "rwo", 1)
        raise RuntimeError("a later step failed")
    assert "a" in rf.read().volumes


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_spinner_shows_on_a_terminal_only() -> None:
    tty, pipe = _Tty(), io.StringIO()
    for stream in (tty, pipe):
        p = Progress("snapshotting data", stream)
        p.tick(0.1)  # too soon to bother anyone
        p.tick(1.5)
        p.done()
    assert "snapshotting data   1.5s" in tty.getvalue() and tty.getvalue().endswith("\033[K")
    assert pipe.getvalue() == ""


def test_the_spinner_says_how_far_a_copy_in_the_pool_has_got(tmp_path: Path) -> None:
    source, dest = tmp_path / "volumes" / "vol-1.img", tmp_path / "snapshots"
    source.parent.mkdir()
    dest.mkdir()
    source.write_bytes(b"x" * (1 << 20))
    watch = CopyWatch(source, dest)
    assert watch.detail() == "0B of 1Mi (0%)"
    (dest / "snap-1.img.tmp").write_bytes(b"x" * (1 << 19))
    (dest / "snap-0.img").write_bytes(b"x" * (1 << 20))  # a finished snapshot does not count
    assert watch.detail() == "512Ki of 1Mi (50%)"
    tty = _Tty()
    p = Progress("snapshotting data", tty, watch.detail)
    p.tick(2.0)
    assert "snapshotting data   2.0s  512Ki of 1Mi (50%)" in tty.getvalue()
    assert CopyWatch(tmp_path / "missing.img", dest).detail() == ""  # no pool: no figure
