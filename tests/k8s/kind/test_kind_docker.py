"""tools/kind/docker.sh for real: the project's own dockerd leaves the host as it found it.

tools/kind/docker.sh for real: the project's own dockerd, started in a data root and a run
directory of the test's own, runs a privileged container on a network of its own while the
host's firewall (iptables legacy and nft, the nftables ruleset), ip_forward and network devices
stay as they were; stopped, it leaves no process, mount, directory or device behind.

Skips, naming the reason, where a Docker answers already (the script then uses that one as it
is, and never starts its own) or where no dockerd can be had (not root, no apt)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# It starts a dockerd and a privileged container: `make unit` (-m 'not real') leaves it out.
pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[3]
DOCKER_SH = ROOT / "tools" / "kind" / "docker.sh"


def host_network() -> list[str]:
    """The host's firewall, forwarding and devices, as text to compare (packet counters out)."""
    out: list[str] = []
    for argv in (
        ["iptables-legacy-save"],
        ["iptables-nft-save"],
        ["ip6tables-legacy-save"],
        ["ip6tables-nft-save"],
        ["nft", "list", "ruleset"],
    ):
        if shutil.which(argv[0]):
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            out += [
                line.split(" [")[0]
                for line in done.stdout.splitlines()
                if line and not line.startswith("#")
            ]
    for knob in ("net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"):
        out.append(f"{knob} {Path('/proc/sys', knob).read_text().strip()}")
    out += sorted(f"link {p.name}" for p in Path("/sys/class/net").iterdir())
    return out


@pytest.fixture
def ours() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("starting dockerd needs root")
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    status = subprocess.run(
        ["bash", str(DOCKER_SH), "status"], capture_output=True, text=True, env=env, check=False
    )
    if "the machine's Docker" in status.stdout:
        pytest.skip(f"a Docker answers here already ({status.stdout.strip()}): used as it is")
    data = tempfile.mkdtemp(prefix="csihp-docker-")
    run = f"/run/csihp-docker-test-{os.getpid()}"
    env.update(CSI_HOSTPATH_DOCKER_DATA=data, CSI_HOSTPATH_DOCKER_RUN=run)
    try:
        yield env
    finally:
        subprocess.run(["bash", str(DOCKER_SH), "stop"], env=env, check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", data], check=False)


def docker(env: dict[str, str], *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        ["docker", *args], input=stdin, capture_output=True, env=env, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def busybox_root() -> bytes:
    """A one-program image's root as a tar: Debian's static busybox and a shell link."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("no busybox here (Debian's busybox-static) to make an image from")
    with tempfile.TemporaryDirectory() as root:
        Path(root, "bin").mkdir()
        shutil.copy(busybox, Path(root, "bin", "busybox"))
        Path(root, "bin", "sh").symlink_to("busybox")
        return subprocess.run(
            ["tar", "-C", root, "-c", "."], capture_output=True, check=True
        ).stdout


def test_own_dockerd_leaves_the_host_as_it_was(ours: dict[str, str]) -> None:
    before = host_network()
    started = subprocess.run(
        ["bash", str(DOCKER_SH), "start"], capture_output=True, text=True, env=ours, check=False
    )
    if started.returncode != 0 and "no way to install it" in started.stderr:
        pytest.skip(f"no dockerd can be had here: {started.stderr.strip()}")
    assert started.returncode == 0, started.stderr
    run = ours["CSI_HOSTPATH_DOCKER_RUN"]
    assert started.stdout.strip() == f"DOCKER_HOST=unix://{run}/docker.sock"
    env = {**ours, "DOCKER_HOST": f"unix://{run}/docker.sock"}
    pid = Path(run, "dockerd.pid").read_text().strip()

    bnd = int(
        next(
            line.split()[1]
            for line in Path("/proc/self/status").read_text().splitlines()
            if line.startswith("CapBnd:")
        ),
        16,
    )
    runtime = docker(env, "info", "--format", "{{.DefaultRuntime}}").strip()
    # The wrapper only where the bounding set lacks CAP_SYS_RESOURCE (bit 24), never assumed.
    assert runtime == ("runc" if bnd >> 24 & 1 else "csi-hostpath-runc")

    docker(env, "import", "-", "csihp-test/busybox:1", stdin=busybox_root())
    docker(env, "network", "create", "csihp-test-net")
    out = docker(
        env,
        "run", "--rm", "--privileged", "--network", "csihp-test-net", "csihp-test/busybox:1",
        "/bin/busybox", "sh", "-c", "grep CapBnd /proc/self/status; ip -4 -o addr show eth0",
    )  # fmt: skip
    assert "CapBnd:" in out and "inet " in out
    # While it runs, the firewall and forwarding are the host's own (the network's bridge and
    # its veth are the only new devices).
    during = [line for line in host_network() if not line.startswith("link ")]
    assert during == [line for line in before if not line.startswith("link ")]
    docker(env, "network", "rm", "csihp-test-net")

    subprocess.run(["bash", str(DOCKER_SH), "stop"], env=ours, check=True)
    assert not Path(f"/proc/{pid}").exists()
    assert host_network() == before
    assert not Path(run).exists()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert run not in mounts and ours["CSI_HOSTPATH_DOCKER_DATA"] not in mounts
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert run not in procs.stdout
