"""A ListVolumes page is one indexed query, and its answer is what it was.

ListVolumes used to load the whole ledger (every publication of every volume) for
each page. A page is now one indexed query: its volumes by seq, joined to only their
publications. The answer is what it was: the holders of each volume, pages that chain."""

from __future__ import annotations

import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.daemon.server import Driver
from csi_hostpath.store.pool_layout import PoolLayout
from tests.conftest import Client
from tests.support import helpers as h


def test_a_page_is_one_query_with_its_holders(
    drv: tuple[Driver, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    driver, client = drv
    PoolLayout(driver.config.pool_dir).touch("node-b")  # a second node, alive
    reader = h.block_cap(pb.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY)
    ids = [h.create(client, f"v{i}", reader, 16 * h.MiB).volume_id for i in range(5)]
    h.publish(client, ids[1], "node-b", reader, readonly=True)
    h.publish(client, ids[1], "node-a", reader, readonly=True)
    h.publish(client, ids[4], "node-a", reader, readonly=True)
    expected: dict[str, list[str]] = {v: [] for v in ids} | {
        ids[1]: ["node-b", "node-a"],
        ids[4]: ["node-a"],
    }

    def whole_ledger(*args: object, **kwargs: object) -> None:
        raise AssertionError("ListVolumes loaded every publication")

    monkeypatch.setattr(driver.store, "publications", whole_ledger)
    queries: list[str] = []
    read = driver.store._read

    def counted(sql: str, args: tuple[object, ...] = ()) -> object:
        queries.append(sql)
        return read(sql, args)

    monkeypatch.setattr(driver.store, "_read", counted)
    seen: dict[str, list[str]] = {}
    token, pages = "", 0
    while True:
        queries.clear()
        reply = client.controller.ListVolumes(
            pb.ListVolumesRequest(max_entries=2, starting_token=token)
        )
        assert len(queries) == 1, queries
        pages += 1
        for entry in reply.entries:
            seen[entry.volume.volume_id] = list(entry.status.published_node_ids)
        token = reply.next_token
        if not token:
            break
    assert pages == 3
    assert seen == expected
    everything = client.controller.ListVolumes(pb.ListVolumesRequest())
    assert [e.volume.volume_id for e in everything.entries] == ids and not everything.next_token
