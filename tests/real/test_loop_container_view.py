"""Loop devices after a node-plugin restart inside a container, on real devices.

Loop devices after a node-plugin restart inside a container (a kind node's plugin pod), on real
devices.

The kernel reports a loop device's backing file (/sys/block/loopN/loop/backing_file) as the path
seen from the mount namespace and root of the process that attached it. Once that container is
gone its mounts are detached, and every reader, the host included, sees only the path inside the
pool's own mount: "/volumes/<id>.img". The restarted plugin must still claim its devices, by
their tag and by the backing file's device and inode, never by that path.

The model of a kind node: a long-lived mount namespace (the node) whose kubelet directory is a
shared mount; each plugin incarnation is a container made from it (its own mount namespace,
chroot into a copy of / with the pool bound at another path), whose staging mounts propagate
back to the node (mountPropagation: Bidirectional).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from csi_hostpath.core.naming import loop_tag
from csi_hostpath.system.base import LoopDevice
from csi_hostpath.system.linux.loop import LinuxLoop
from tests.conftest import Client, DriverProcess
from tests.support import helpers as h

# The container: its own mount namespace (copied from the node's, so the kubelet directory stays
# a peer), a copy of / with the pool bound elsewhere, and the plugin chrooted into it.
CONTAINER = (
    'mount --rbind / "$ROOT" && mount --bind "$POOL" "$ROOT$ELSEWHERE" && exec chroot "$ROOT" "$@"'
)


def container(node_pid: int, root: Path, pool: Path, elsewhere: Path) -> list[str]:
    root.mkdir()
    return [
        "nsenter", "-t", str(node_pid), "-m", "--",
        "unshare", "--mount", "--propagation", "unchanged", "--",
        "env", f"ROOT={root}", f"POOL={pool}", f"ELSEWHERE={elsewhere}",
        "sh", "-c", CONTAINER, "container",
    ]  # fmt: skip


def node_mounts(node_pid: int) -> list[str]:
    lines = Path(f"/proc/{node_pid}/mountinfo").read_text().splitlines()
    return [line.split()[4] for line in lines]


def on_kernel(tag: str) -> LoopDevice | None:
    """The device carrying tag, by a scan of every loop device. Not LinuxLoop().find(): that
    believes this process's tag index, which the first scan in the pytest process built (an
    earlier test's) and which never learns of a device another process (the plugin) tags
    later, so the find missed the plugin's device whenever a real test ran before this one."""
    return next((d for d in LinuxLoop().list(tag) if d.tag == tag), None)


def test_a_restarted_plugin_in_a_new_container_claims_its_devices(
    spawn: Any, workdir: Path
) -> None:
    pool, elsewhere, kubelet = workdir / "pool", workdir / "pool-in-container", workdir / "kubelet"
    for d in (pool, elsewhere, kubelet):
        d.mkdir()
    # The kind node: a mount namespace whose kubelet directory is shared with its containers.
    node = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
         f'mount --bind "{kubelet}" "{kubelet}" && mount --make-shared "{kubelet}" && '
         "exec sleep 3600"]
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while str(kubelet) not in node_mounts(node.pid):
            assert time.monotonic() < deadline, "the node namespace did not come up"
            time.sleep(0.05)

        shared = ["--pool-scope", "shared", "--heartbeat-interval", "0.3"]
        _, ctrl = spawn("ctrl", "--mode", "controller", *shared, "--pool-dir", str(pool),
                        node_id="controller")  # fmt: skip
        plugin_args = ("node", "--mode", "node", *shared, "--pool-dir", str(elsewhere))

        def plugin(n: int) -> tuple[DriverProcess, Client]:
            prefix = container(node.pid, workdir / f"root-{n}", pool, elsewhere)
            started: tuple[DriverProcess, Client | None]
            started = spawn(*plugin_args, node_id="node-a", prefix=prefix)
            handle, client = started
            assert client is not None  # spawn starts it unless told start=False
            return handle, client

        first, client = plugin(1)
        cap = h.mount_cap("ext4")
        vol = h.create(ctrl, "in-a-container", cap, 32 * h.MiB)
        vid = vol.volume_id
        staging = kubelet / "globalmount"
        staging.mkdir()
        h.stage(client, vol, staging, cap, h.publish(ctrl, vid, "node-a", cap))
        assert str(staging) in node_mounts(node.pid), "the stage reached the node (Bidirectional)"
        device = on_kernel(loop_tag("node-a", vid))
        assert device is not None

        # The container dies. What every reader now sees is the path inside the pool's mount.
        client.close()
        first.kill(signal.SIGKILL)
        seen = Path(f"/sys/block/{Path(device.path).name}/loop/backing_file").read_text().strip()
        assert seen == f"/volumes/{vid}.img", seen
        assert device.backed_by(pool / "volumes" / f"{vid}.img")

        # A restart in a new container, records intact: the device is the volume's by its tag.
        second, client = plugin(2)
        h.stage(client, vol, staging, cap, h.publish(ctrl, vid, "node-a", cap))  # idempotent
        found = on_kernel(loop_tag("node-a", vid))
        assert found is not None and found.path == device.path
        assert "re-attached" not in second.log()
        client.close()
        second.kill(signal.SIGKILL)

        # A restart in a new container with the records lost: re-adopted from the heartbeat,
        # recognised by the tag and the backing file's inode, then torn down by NodeUnstage.
        for db in (workdir / "node-state").glob("state.db*"):
            db.unlink()
        third, client = plugin(3)
        assert "RE-ADOPTED" in third.log(), third.log()
        h.unstage(client, vid, staging)
        assert str(staging) not in node_mounts(node.pid)
        deadline = time.monotonic() + 10
        while on_kernel(loop_tag("node-a", vid)) is not None:
            assert time.monotonic() < deadline, "NodeUnstage did not detach the re-adopted device"
            time.sleep(0.05)
        client.close()
    finally:
        node.kill()
        node.wait(timeout=30)
