"""What the experiments do to a kind node that kubectl can't: run a command inside it (`docker
exec`), stop and start its kubelet, kill a container, read its mounts; and the host's view of the
loop devices, which every node shares (the kernel's)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _run(argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 120) -> str:
    done = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, list(argv), done.stdout, done.stderr)
    return done.stdout


@dataclass(frozen=True)
class LoopDevice:
    name: str
    back_dev: int
    back_ino: int


class Nodes:
    """The nodes of a kind cluster, each a Docker container (DOCKER_HOST: tools/kind/docker.sh)."""

    def __init__(self, pool_dir: Path) -> None:
        # The shared pool as the host sees it (every node's /var/lib/csi-hostpath/pool).
        self.pool_dir = pool_dir

    def exec_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        return ["docker", "exec", node, *argv]

    def exec(self, node: str, argv: Sequence[str], timeout: float = 120) -> str:
        return _run(self.exec_argv(node, argv), timeout=timeout)

    def spawn(self, node: str, argv: Sequence[str]) -> subprocess.Popen[str]:
        """A process of our own inside the node, outside any pod: the kubelet neither sees nor
        kills it. Its output comes back on stdout."""
        return subprocess.Popen(
            self.exec_argv(node, argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def stop_kubelet(self, node: str) -> None:
        self.exec(node, ["systemctl", "stop", "kubelet"])

    def start_kubelet(self, node: str) -> None:
        self.exec(node, ["systemctl", "start", "kubelet"], timeout=300)

    def kill_container(self, node: str, container_id: str) -> None:
        """SIGKILL to the container's task, through the node's own containerd."""
        cid = container_id.split("://", 1)[-1]
        self.exec(node, ["ctr", "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", cid])

    def csi_mounts(self, node: str) -> list[str]:
        """Every mount inside the node that the kubelet made for a CSI volume (staging or pod)."""
        out = self.exec(node, ["findmnt", "-rn", "-o", "TARGET"])
        return [
            t
            for t in out.split()
            if "/kubernetes.io~csi/" in t or "/plugins/kubernetes.io/csi/" in t
        ]

    def pool_loop_devices(self) -> list[LoopDevice]:
        """The loop devices whose backing file is (by device and inode) a file of the pool."""
        ours = set()
        for root, _dirs, files in os.walk(self.pool_dir):
            for f in files:
                st = os.stat(os.path.join(root, f), follow_symlinks=False)
                ours.add((st.st_dev, st.st_ino))
        return [d for d in host_loop_devices() if (d.back_dev, d.back_ino) in ours]


def host_loop_devices() -> list[LoopDevice]:
    out = _run(["losetup", "-J", "-l", "-O", "NAME,BACK-INO,BACK-MAJ:MIN"])
    found = []
    for d in (json.loads(out) if out.strip() else {}).get("loopdevices") or []:
        maj_min = str(d.get("back-maj:min") or "0:0")
        major, _, minor = maj_min.partition(":")
        found.append(
            LoopDevice(
                str(d["name"]), os.makedev(int(major), int(minor or 0)), int(d.get("back-ino") or 0)
            )
        )
    return found
