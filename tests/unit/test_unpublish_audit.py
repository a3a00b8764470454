"""ControllerUnpublishVolume for every node judges each holder's row on its own.

A ControllerUnpublishVolume with an empty node_id removes every holder, and each row is judged
on its own: an orderly detach stays `unpublish`, a holder that is silent (or still lists the
volume as staged) is `revoke`d. A silent node's new publish is refused, naming the silence. On
the fake system layer, in --mode all."""

from __future__ import annotations

import json
import time

import grpc
import pytest

from csi_hostpath.core.naming import node_key
from csi_hostpath.daemon.server import Driver
from tests.conftest import Client
from tests.support import helpers as h

Mode = h.Mode


def _heartbeat(driver: Driver, node_id: str, age: float) -> None:
    """A heartbeat as another node's plugin writes it, age seconds old."""
    path = driver.layout.nodes / f"{node_key(node_id)}.json"
    body = {"node_id": node_id, "at": time.time() - age, "pid": 1, "volumes": {}}
    path.write_text(json.dumps(body))


def test_unpublish_from_every_node_judges_each_holder(drv: tuple[Driver, Client]) -> None:
    driver, client = drv
    cap = h.block_cap(Mode.MULTI_NODE_READER_ONLY)
    vol = h.create(client, "shared-readers", cap, 8 * h.MiB)
    _heartbeat(driver, "node-x", 0.0)
    h.publish(client, vol.volume_id, "node-a", cap, readonly=True)
    h.publish(client, vol.volume_id, "node-x", cap, readonly=True)
    _heartbeat(driver, "node-x", 300.0)  # node-x falls silent, past the 60 s grace

    h.unpublish(client, vol.volume_id, "")
    rows = {(a.node_id, a.action): a.reason for a in driver.store.audit(vol.volume_id)}
    assert ("node-a", "unpublish") in rows
    reason = rows[("node-x", "revoke")]
    assert "node-x" in reason and "silent for 300s" in reason and "NodeUnstage" in reason

    # node-x, still silent, is refused a new hold; node-a is not.
    with pytest.raises(grpc.RpcError) as refused:
        h.publish(client, vol.volume_id, "node-x", cap, readonly=True)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no heartbeat for 300s" in (refused.value.details() or "")
    h.publish(client, vol.volume_id, "node-a", cap, readonly=True)
    h.unpublish(client, vol.volume_id, "node-a")
    h.delete(client, vol.volume_id)
