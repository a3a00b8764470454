"""A real `csi-hostpath serve` process for the benchmarks, the stubs to talk to it, request
builders, and the leak accounting that does not trust the driver.

Everything a run creates lives under one work directory (/tmp/csihp-bench-*), and every loop
device the driver attaches carries the tag prefix of the run's own node ID, so the leak counts
only ever see this run's devices, mounts and files, even while other test runs share the kernel.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.client.csi_requests import block_cap, mount_cap
from csi_hostpath.core.naming import loop_tag_prefix
from csi_hostpath.system.linux import LinuxLoop

GiB = 1 << 30
MiB = 1 << 20

# --- stubs ---------------------------------------------------------------------------------------


@dataclass
class Stubs:
    """Stubs on one channel. private=True gives the channel its own connection (gRPC otherwise
    shares one subchannel between channels to the same address), so concurrent clients really
    are concurrent connections."""

    socket: Path
    private: bool = False
    channel: grpc.Channel = field(init=False)
    identity: pb_grpc.IdentityStub = field(init=False)
    controller: pb_grpc.ControllerStub = field(init=False)
    node: pb_grpc.NodeStub = field(init=False)

    def __post_init__(self) -> None:
        options = [("grpc.use_local_subchannel_pool", 1)] if self.private else []
        self.channel = grpc.insecure_channel(f"unix://{self.socket}", options=options)
        self.identity = pb_grpc.IdentityStub(self.channel)
        self.controller = pb_grpc.ControllerStub(self.channel)
        self.node = pb_grpc.NodeStub(self.channel)

    def wait_ready(self, timeout: float = 20.0) -> None:
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def close(self) -> None:
        self.channel.close()


def cap_for(kind: str) -> pb.VolumeCapability:
    """kind is "ext4", "xfs" or "block"."""
    return block_cap() if kind == "block" else mount_cap(kind)


# --- the plugin process --------------------------------------------------------------------------


@dataclass
class Plugin:
    """`python -m csi_hostpath serve` in mode all, local scope, at the default log level."""

    root: Path
    node_id: str
    log_level: str = "INFO"
    proc: subprocess.Popen[bytes] | None = None
    pool: Path | None = None  # elsewhere than the default (an xfs reflink pool, say)
    extra: tuple[str, ...] = ()  # more serve flags
    env: dict[str, str] | None = None  # the process's environment (None: this one's)

    @property
    def socket(self) -> Path:
        return self.root / "csi.sock"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def pool_dir(self) -> Path:
        # The driver's default: the pool lives in the state directory.
        return self.pool or self.state_dir / "pool"

    @property
    def log_path(self) -> Path:
        return self.root / "plugin.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "csi_hostpath",
            "serve",
            "--endpoint",
            f"unix://{self.socket}",
            "--node-id",
            self.node_id,
            "--state-dir",
            str(self.state_dir),
            "--pool-dir",
            str(self.pool_dir),
            "--log-level",
            self.log_level,
            *self.extra,
        ]

    def start(self, timeout: float = 30.0) -> Stubs:
        self.root.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, env=self.env
            )
        deadline = time.monotonic() + timeout
        while not self.socket.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"plugin exited {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"plugin did not create its socket:\n{self.log_tail()}")
            time.sleep(0.02)
        stubs = Stubs(self.socket)
        stubs.wait_ready(timeout)
        return stubs

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


# --- leak accounting (independent of the driver's own bookkeeping) -------------------------------

_OCTAL = re.compile(r"\\([0-7]{3})")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below root, from /proc/self/mountinfo."""
    with open("/proc/self/mountinfo", "rb") as handle:
        text = handle.read().decode("utf-8", errors="surrogateescape")
    points = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            point = _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
            if _under(point, str(root)):
                points.append(point)
    return points


def loops_under(root: Path, node_id: str) -> list[str]:
    """Loop devices `losetup -a` shows backed by a file below root, plus any device carrying the
    run's node tag (found with LOOP_GET_STATUS64, whatever its backing path says)."""
    found: set[str] = set()
    listing = subprocess.run(
        ["losetup", "-a"], capture_output=True, text=True, check=False, timeout=30
    ).stdout
    for line in listing.splitlines():
        # /dev/loop3: [2049]:1234 (/tmp/csihp-bench-x/pool/volumes/vol-....img)
        device, _, rest = line.partition(":")
        start, end = rest.find("("), rest.rfind(")")
        if start >= 0 and end > start:
            backing = rest[start + 1 : end].removesuffix(" (deleted)")
            if _under(backing, str(root)):
                found.add(device)
    with contextlib.suppress(OSError):
        found.update(d.path for d in LinuxLoop().list(loop_tag_prefix(node_id)))
    return sorted(found)


def files_in(directory: Path) -> list[str]:
    """Regular files left below directory (a missing directory has none)."""
    if not directory.exists():
        return []
    return sorted(
        os.path.join(base, name) for base, _dirs, names in os.walk(directory) for name in names
    )


@dataclass(frozen=True)
class Leaks:
    loops: list[str]
    mounts: list[str]
    files: list[str]

    @property
    def total(self) -> int:
        return len(self.loops) + len(self.mounts) + len(self.files)

    def as_dict(self) -> dict[str, object]:
        return {
            "loop_devices": len(self.loops),
            "mounts": len(self.mounts),
            "files": len(self.files),
            "details": {"loops": self.loops, "mounts": self.mounts, "files": self.files},
        }


def leaks(root: Path, node_id: str, file_dirs: list[Path]) -> Leaks:
    files: list[str] = []
    for directory in file_dirs:
        files += files_in(directory)
    return Leaks(loops_under(root, node_id), mounts_under(root), files)


def force_cleanup(root: Path, node_id: str) -> None:
    """The safety net after the counts are taken: unmount and detach whatever is below root."""
    for _ in range(10):
        points = mounts_under(root)
        if not points:
            break
        for point in sorted(points, key=len, reverse=True):
            if subprocess.run(["umount", point], capture_output=True, check=False).returncode:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    for _ in range(50):
        devices = loops_under(root, node_id)
        if not devices:
            return
        for device in devices:
            subprocess.run(["losetup", "-d", device], capture_output=True, check=False)
        time.sleep(0.05)


def rss_idle(pid: int, seconds: float = 1.0) -> int:
    """Median RSS over a quiet second."""
    process = psutil.Process(pid)
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(process.memory_info().rss)
        time.sleep(0.05)
    return int(statistics.median(samples))
