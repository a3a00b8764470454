"""What the commands print: one JSON document per command with `--json` (a stable, versioned
schema: SCHEMA below, documented in docs/volume-cli.md and pinned by a test), else lines for a
person; errors always on stderr too; a spinner on a terminal while a copy runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from csi_hostpath.core.request_text import shown
from csi_hostpath.core.sizes import format_bytes
from csi_hostpath.volume_cli.cli_errors import CliError
from csi_hostpath.volume_cli.records import SnapshotRecord, VolumeRecord

SCHEMA_VERSION = "csi-hostpath.volume/v1"

# The objects' fields. Adding a field is a compatible change; renaming or removing one needs a
# new SCHEMA_VERSION. tests/unit/test_volume_cli_schema.py pins these sets.
VOLUME_FIELDS = ("name", "volume_id", "fs", "mode", "capacity_bytes", "source", "mounts")
MOUNT_FIELDS = ("path", "readonly")
LIST_FIELDS = (
    *VOLUME_FIELDS,
    "allocated_bytes",
    "used_bytes",
    "published_nodes",
    "health",
)
HEALTH_FIELDS = ("abnormal", "message")
SNAPSHOT_FIELDS = (
    "name",
    "snapshot_id",
    "source_volume",
    "source_volume_id",
    "size_bytes",
    "ready_to_use",
    "created_at",
)
MOUNT_RESULT_FIELDS = ("volume", "volume_id", "path", "readonly", "fs", "staging_path")
UNMOUNT_RESULT_FIELDS = (*MOUNT_RESULT_FIELDS, "unstaged")
EXPAND_FIELDS = ("volume", "volume_id", "capacity_bytes", "filesystem")
EXPAND_FILESYSTEM_STATES = ("grown", "not-needed", "on-next-mount")
DELETED_FIELDS = ("kind", "name", "id")
ERROR_FIELDS = ("exit_code", "grpc_code", "message", "next_step")
ENVELOPE_FIELDS = ("schema", "command", "ok")

# command -> (top-level key, its fields, a list or one object)
SCHEMA: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "create": ("volume", VOLUME_FIELDS, False),
    "mount": ("mount", MOUNT_RESULT_FIELDS, False),
    "unmount": ("mount", UNMOUNT_RESULT_FIELDS, False),
    "list": ("volumes", LIST_FIELDS, True),
    "snapshot": ("snapshot", SNAPSHOT_FIELDS, False),
    "snapshots": ("snapshots", SNAPSHOT_FIELDS, True),
    "expand": ("expand", EXPAND_FIELDS, False),
    "delete": ("deleted", DELETED_FIELDS, False),
}


def volume_json(v: VolumeRecord) -> dict[str, Any]:
    return {
        "name": v.name,
        "volume_id": v.volume_id,
        "fs": v.fs,
        "mode": v.mode,
        "capacity_bytes": v.capacity_bytes,
        "source": v.source,
        "mounts": [{"path": m.path, "readonly": m.readonly} for m in v.mounts],
    }


def snapshot_json(s: SnapshotRecord, ready: bool) -> dict[str, Any]:
    return {
        "name": s.name,
        "snapshot_id": s.snapshot_id,
        "source_volume": s.source_volume,
        "source_volume_id": s.source_volume_id,
        "size_bytes": s.size_bytes,
        "ready_to_use": ready,
        "created_at": s.created_at,
    }


class Output:
    def __init__(self, command: str, as_json: bool, out: TextIO, err: TextIO) -> None:
        self.command = command
        self.as_json = as_json
        self.out = out
        self.err = err

    def result(self, payload: Any, human: str) -> None:
        if self.as_json:
            key = SCHEMA[self.command][0]
            doc = {"schema": SCHEMA_VERSION, "command": self.command, "ok": True, key: payload}
            self.out.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        elif human:
            self.out.write(human.rstrip("\n") + "\n")

    def note(self, text: str) -> None:
        """A remark for a person (never on stdout under --json, which must stay parseable)."""
        (self.err if self.as_json else self.out).write(text.rstrip("\n") + "\n")

    def error(self, e: CliError) -> None:
        lines = [f"csi-hostpath volume {self.command}: {e.message}"]
        if e.grpc_code:
            lines[0] += f" [{e.grpc_code}]"
        if e.next_step:
            lines.append(f"  next: {e.next_step}")
        self.err.write("\n".join(lines) + "\n")
        if self.as_json:
            doc = {
                "schema": SCHEMA_VERSION,
                "command": self.command,
                "ok": False,
                "error": {
                    "exit_code": e.exit_code,
                    "grpc_code": e.grpc_code,
                    "message": e.message,
                    "next_step": e.next_step,
                },
            }
            self.out.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")

    def progress(self, what: str, detail: Callable[[], str] | None = None) -> Progress:
        return Progress(what, self.err if self.as_json else self.out, detail)


class Progress:
    """A spinner with the elapsed time, only on a terminal (a pipe or a log gets nothing)."""

    FRAMES = "|/-\\"

    def __init__(self, what: str, stream: TextIO, detail: Callable[[], str] | None = None) -> None:
        self.what = what
        self.stream = stream
        self.detail = detail
        self.enabled = stream.isatty()
        self.frame = 0
        self.shown = False

    def tick(self, elapsed: float) -> None:
        if not self.enabled or elapsed < 0.5:
            return
        self.frame = (self.frame + 1) % len(self.FRAMES)
        extra = self.detail() if self.detail else ""
        line = f"{self.FRAMES[self.frame]} {self.what} {elapsed:5.1f}s"
        if extra:
            line += f"  {extra}"
        self.stream.write(f"\r{line}\033[K")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    # A cell may hold a name from a request (a PVC's, another client's): one line each.
    rows = [[shown(c) for c in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def size(n: int | None) -> str:
    return format_bytes(n)
