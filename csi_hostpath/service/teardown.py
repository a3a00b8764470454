"""Teardown works on a full disk: run the use-case, and when it fails because the disk is full,
give back the reserved headroom and run it once more.

Every teardown use-case (NodeUnpublish, NodeUnstage, ControllerUnpublish, DeleteVolume) does its
system step before its commit and is idempotent, so the second run finds the system step done and
needs only the room to commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from csi_hostpath.core.fullness import is_disk_full
from csi_hostpath.store.headroom import Headroom

T = TypeVar("T")


def retry_when_full(headroom: Headroom | None, action: Callable[[], T]) -> T:
    try:
        return action()
    except Exception as e:
        if headroom is None or not is_disk_full(e) or not headroom.release():
            raise
    return action()
