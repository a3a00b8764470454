"""What the tables of CSI spec rules over gRPC share: a volume ID this driver never issued, the
ext4 capability, and the stub method a table row names ("controller.CreateVolume")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Client
from tests.support import helpers as h

UNKNOWN_VOLUME = "vol-" + "0" * 32
CAP = h.mount_cap("ext4")


def stub_method(client: Client, dotted: str) -> Callable[[Any], Any]:
    service, name = dotted.split(".")
    return getattr(getattr(client, service), name)  # type: ignore[no-any-return]
