"""--self-publish on the fake layer: NodeStage takes the node's own hold, NodeUnstage returns it.

--self-publish: with no attach (the chart's local shape, CSIDriver attachRequired: false),
NodeStage takes the node's own hold and NodeUnstage returns it (service/node/self_publish.py)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.cli import build_parser, config_from_args
from tests.conftest import Client, driver_args, in_process
from tests.support import helpers as h


def _fake(pool: Path) -> object:
    from csi_hostpath.system.fake import fake_system

    return fake_system(pool, capacity_bytes=64 << 20)


@pytest.fixture
def local(workdir: Path) -> Iterator[Client]:
    with in_process(workdir, "sp", "--self-publish", system=_fake) as client:
        yield client


def holders(client: Client, volume_id: str) -> list[str]:
    for entry in client.controller.ListVolumes(pb.ListVolumesRequest()).entries:
        if entry.volume.volume_id == volume_id:
            return list(entry.status.published_node_ids)
    raise AssertionError(f"{volume_id} is not listed")


def test_stage_without_an_attach_takes_and_returns_the_hold(local: Client, workdir: Path) -> None:
    cap = h.mount_cap(mode=h.Mode.SINGLE_NODE_WRITER)
    volume = h.create(local, "v1", cap, 16 * h.MiB)
    staging, target = workdir / "staging", workdir / "target"
    h.stage(local, volume, staging, cap, {})  # the kubelet's NodeStage, with no attach before it
    h.stage(local, volume, staging, cap, {})  # a repeat stays idempotent
    assert holders(local, volume.volume_id) == ["node-a"]
    h.node_publish(local, volume.volume_id, staging, target, cap)
    h.node_unpublish(local, volume.volume_id, target)
    h.unstage(local, volume.volume_id, staging)
    assert holders(local, volume.volume_id) == []
    h.delete(local, volume.volume_id)  # nothing holds it any more


def test_without_the_flag_stage_still_needs_the_attach(workdir: Path) -> None:
    with in_process(workdir, "plain", system=_fake) as client:
        cap = h.mount_cap(mode=h.Mode.SINGLE_NODE_WRITER)
        volume = h.create(client, "v2", cap, 16 * h.MiB)
        err = h.expect_code(
            grpc.StatusCode.FAILED_PRECONDITION, h.stage, client, volume, workdir / "s", cap, {}
        )
        assert "call ControllerPublishVolume first" in (err.details() or "")
        assert holders(client, volume.volume_id) == []


@pytest.mark.parametrize("extra", [["--pool-scope", "shared"], ["--mode", "node"]])
def test_the_flag_needs_local_scope_and_mode_all(workdir: Path, extra: list[str]) -> None:
    args: argparse.Namespace = build_parser().parse_args(
        ["serve", *driver_args(workdir, "x"), "--self-publish", *extra]
    )
    with pytest.raises(ValueError, match="--self-publish needs --pool-scope local and --mode all"):
        config_from_args(args)
