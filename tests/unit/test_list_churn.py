"""ListVolumes pages stay right while volumes come and go between the pages."""

from __future__ import annotations

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client
from tests.support import helpers as h


def test_pagination_while_volumes_are_added_and_deleted(fake_driver: Client) -> None:
    ids = [h.create(fake_driver, f"v{i}", h.block_cap(), 1 * h.MiB).volume_id for i in range(8)]
    first = fake_driver.controller.ListVolumes(pb.ListVolumesRequest(max_entries=3))
    seen = [e.volume.volume_id for e in first.entries]
    assert seen == ids[:3] and first.next_token
    h.delete(fake_driver, ids[1])  # already served
    h.delete(fake_driver, ids[4])  # not served yet
    added = [h.create(fake_driver, f"n{i}", h.block_cap(), h.MiB).volume_id for i in range(2)]
    token = first.next_token
    while token:
        page = fake_driver.controller.ListVolumes(
            pb.ListVolumesRequest(max_entries=3, starting_token=token)
        )
        seen += [e.volume.volume_id for e in page.entries]
        token = page.next_token
    assert len(seen) == len(set(seen)), "no volume is served twice"
    survivors = [v for v in ids if v != ids[4]] + added
    assert seen == survivors, "nothing skipped; new volumes come last; deleted ones vanish"
