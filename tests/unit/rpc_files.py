"""Which of the driver's files one RPC passes through, measured with sys.settrace.

A call is traced from its servicer's method (api/*.py) to its return, in the thread that runs it,
and in the copy pool's threads (api/runtime/copy_pool.py), to which CreateSnapshot, CreateVolume
from a source and CreateVolumeGroupSnapshot hand their work. The gRPC runtime around the method
(api/runtime/: the adapter, the body deadline, the call's log line, and the call pipeline with
its checks of the request, its mount-lookup scope, its disk-full retry and its error mapping) is
not the call's way and is not traced; nor are the background loops.

The fake system layer (system/fake/) stands in for the kernel's face on Linux: each fake class
is counted as the Linux class it stands in for (and system/base.py's nothing_missing, the fake's
machine check, as Linux's machine_problems), and FakeKernel, the kernel itself, is not counted,
as the kernel is where the way ends. The Linux layer's helpers below its classes (mountinfo.py,
statmount.py, devnodes.py, runner.py, and loop_ioctl.py but for the tag the fake encodes with
it) are not reached through the fake, so a row names a Linux file only where the fake's class,
or real Linux code the fake calls, ran.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from csi_hostpath.api.controller import ControllerServicer
from csi_hostpath.api.group_controller import GroupControllerServicer
from csi_hostpath.api.identity import IdentityServicer
from csi_hostpath.api.node import NodeServicer
from csi_hostpath.api.snapshot_metadata import SnapshotMetadataServicer
from csi_hostpath.system.linux import machine_problems
from csi_hostpath.system.linux.fs import LinuxFs
from csi_hostpath.system.linux.linux_mounts import LinuxMounts
from csi_hostpath.system.linux.linux_pool import LinuxPool
from csi_hostpath.system.linux.loop import LinuxDevices, LinuxLoop

PACKAGE = Path(__file__).resolve().parents[2] / "csi_hostpath"
SERVICERS = (
    IdentityServicer,
    ControllerServicer,
    NodeServicer,
    GroupControllerServicer,
    SnapshotMetadataServicer,
)
# api/runtime/copy_pool.py names its threads so: the copies a servicer hands on run there.
COPY_THREAD_PREFIX = "copy"

# Each fake class, by name, and the Linux class it stands in for (System's same field).
STANDS_IN_FOR: dict[str, type] = {
    "FakePool": LinuxPool,
    "FakeLoop": LinuxLoop,
    "FakeFs": LinuxFs,
    "FakeDevices": LinuxDevices,
    "FakeMounts": LinuxMounts,
}
# The fake system's default machine check (a fake kernel lacks nothing), in place of Linux's.
STANDS_IN_FOR_FUNCTIONS: dict[tuple[str, str], Callable[..., Any]] = {
    ("system/base.py", "nothing_missing"): machine_problems,
}
KERNEL_CLASSES = frozenset({"FakeKernel", "_Device", "_FsHeader", "_Mount"})
FAKE_KERNEL_FILE = "system/fake/fake_kernel.py"
FAKE_MOUNTS_FILE = "system/fake/fake_mounts.py"

# The document's rule: files whose code runs but that a reader of the call's way does not open.
LEFT_OUT: dict[str, str] = {
    "core/errors.py": "error classes",
    "system/system_errors.py": "error classes",
    "core/model.py": "data types",
    "system/base.py": "data types (LoopDevice, MountEntry, FsStats) and the layer's protocols",
    "api/status.py": "the error table the call pipeline applies",
}
LEFT_OUT_PATTERNS: dict[str, str] = {
    r"(^|/)_log\.py$": "the logger",
    r"^_pb/": "the generated protobuf messages (data types)",
}


def served_rpcs() -> dict[str, CodeType]:
    """Every RPC the driver serves, with the code of its servicer's own method."""
    served: dict[str, CodeType] = {}
    for cls in SERVICERS:
        for name, value in vars(cls).items():
            if name[:1].isupper() and callable(value):
                served[name] = inspect.unwrap(value).__code__
    return served


def relative(filename: str) -> str | None:
    """The file's path under csi_hostpath/, or None for a file outside it."""
    try:
        return Path(filename).resolve().relative_to(PACKAGE).as_posix()
    except ValueError:
        return None


def left_out_reason(path: str) -> str | None:
    if path in LEFT_OUT:
        return LEFT_OUT[path]
    for pattern, reason in LEFT_OUT_PATTERNS.items():
        if re.search(pattern, path):
            return reason
    return None


def _source(obj: Any) -> str:
    path = relative(inspect.getsourcefile(obj) or "")
    assert path is not None, obj
    return path


def linux_file(path: str, qualname: str) -> str | None:
    """The file a reader opens for code that ran in path: the Linux counterpart for the fake
    layer (None for the fake kernel), path itself otherwise."""
    if (path, qualname) in STANDS_IN_FOR_FUNCTIONS:
        return _source(STANDS_IN_FOR_FUNCTIONS[path, qualname])
    if not path.startswith("system/fake/"):
        return path
    owner = qualname.split(".", 1)[0]
    if owner in STANDS_IN_FOR:
        return _source(STANDS_IN_FOR[owner])
    if owner in KERNEL_CLASSES or path == FAKE_KERNEL_FILE:
        return None
    if path == FAKE_MOUNTS_FILE:  # its module-level helpers serve FakeMounts only
        return linux_file(path, "FakeMounts")
    raise AssertionError(f"{path}: {qualname} ran, and no Linux counterpart is named for it")


@dataclass
class Measured:
    """What one call ran: the counted files, and the files left out with the reason."""

    files: set[str] = field(default_factory=set)
    left_out: dict[str, str] = field(default_factory=dict)


def apply_rule(ran: Iterable[tuple[str, str]]) -> Measured:
    """ran: (file under csi_hostpath/, qualname) of every function that ran."""
    measured = Measured()
    for path, qualname in ran:
        # A stand-in is counted as what it stands in for, even in a file the rule leaves out.
        reason = None if (path, qualname) in STANDS_IN_FOR_FUNCTIONS else left_out_reason(path)
        if reason is not None:
            measured.left_out[path] = reason
            continue
        counted = linux_file(path, qualname)
        if counted is None:
            measured.left_out[path] = "the fake kernel: where the call's way ends"
        else:
            measured.files.add(counted)
    return measured


class Tracer:
    """Records the functions of csi_hostpath that run in one armed call.

    Installed before the driver starts, so every thread it starts carries the trace function;
    until armed, that function returns at once and costs one call per Python call."""

    def __init__(self) -> None:
        self._target: CodeType | None = None
        self._active: set[int] = set()  # threads inside the armed servicer method
        self._ran: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def install(self) -> None:
        threading.settrace(self._on_call)

    def uninstall(self) -> None:
        threading.settrace(None)

    def _record(self, code: CodeType) -> None:
        path = relative(code.co_filename)
        if path is not None:
            with self._lock:
                self._ran.add((path, code.co_qualname))

    def _on_call(self, frame: FrameType, event: str, arg: Any) -> Any:
        target = self._target
        if target is None:
            return None
        me = threading.get_ident()
        if me in self._active:
            self._record(frame.f_code)
            return None
        if frame.f_code is target:
            self._active.add(me)
            self._record(frame.f_code)
            frame.f_trace_lines = False
            return self._until_return
        if threading.current_thread().name.startswith(COPY_THREAD_PREFIX):
            self._record(frame.f_code)
        return None

    def _until_return(self, frame: FrameType, event: str, arg: Any) -> Any:
        # A generator's frame returns at each yield and is called again at each resume.
        if event == "return":
            self._active.discard(threading.get_ident())
        return self._until_return

    def measure(self, code: CodeType, call: Callable[[], Any]) -> tuple[Any, set[tuple[str, str]]]:
        """call()'s result, and what ran in the servicer method whose code is code."""
        self._ran = set()
        self._target = code
        try:
            result = call()
        finally:
            self._target = None
            self._active.clear()
        return result, self._ran


ROW = re.compile(r"^\| (?P<rpc>[^|]+?) \| (?P<count>\d+) \| (?P<files>[^|]*?) \|$")


def doc_rows(text: str, heading: str) -> dict[str, tuple[int, set[str]]]:
    """The table under heading: RPC -> (its count, its files), files written as
    `dir/: a.py, b.py; other/c.py` (a folder's files after it, groups apart by semicolons)."""
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    rows: dict[str, tuple[int, set[str]]] = {}
    for line in section.splitlines():
        match = ROW.match(line.strip())
        if match is None:
            continue
        files: set[str] = set()
        for group in filter(None, (g.strip() for g in match["files"].split(";"))):
            folder, sep, names = group.partition(": ")
            if sep and folder.endswith("/"):
                files |= {folder + name.strip() for name in names.split(",")}
            else:
                files.add(group)
        rows[match["rpc"].strip("` ")] = (int(match["count"]), files)
    return rows


def doc_cell(files: Iterable[str]) -> str:
    """files as doc_rows reads them: grouped by folder, folders and names in sorted order."""
    by_folder: dict[str, list[str]] = {}
    for path in sorted(files):
        folder, _, name = path.rpartition("/")
        by_folder.setdefault(folder + "/" if folder else "", []).append(name)
    groups = []
    for folder, names in sorted(by_folder.items()):
        groups.append(f"{folder}: {', '.join(names)}" if len(names) > 1 else folder + names[0])
    return "; ".join(groups)
