"""--self-publish on a real loop device: NodeStage takes the node's own hold, none left after.

--self-publish on a real loop device and ext4: NodeStage takes the node's own hold with no
attach, NodeUnstage returns it, and nothing stays mounted or attached. On the fake layer:
tests/unit/test_self_publish.py."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import in_process
from tests.support import helpers as h
from tests.unit.test_self_publish import holders


def test_stage_mount_and_release_without_an_attach(workdir: Path) -> None:
    """The same path on a real loop device and ext4: the kubelet's calls only, no attach."""
    from tests.support.kernel import loops_backed_under, mounts_under

    with in_process(workdir, "real", "--self-publish") as client:
        cap = h.mount_cap(mode=h.Mode.SINGLE_NODE_WRITER)
        volume = h.create(client, "r1", cap, 32 * h.MiB)
        staging = workdir / "kubelet" / "globalmount"
        target = workdir / "pods" / "uid1" / "mount"
        staging.mkdir(parents=True)
        target.parent.mkdir(parents=True)
        h.stage(client, volume, staging, cap, {})
        h.node_publish(client, volume.volume_id, staging, target, cap)
        assert h.mounted(target)
        (target / "proof").write_text("local")
        assert holders(client, volume.volume_id) == ["node-a"]
        h.node_unpublish(client, volume.volume_id, target)
        h.unstage(client, volume.volume_id, staging)
        assert holders(client, volume.volume_id) == []
        assert not loops_backed_under(workdir) and not mounts_under(workdir)
        h.delete(client, volume.volume_id)
