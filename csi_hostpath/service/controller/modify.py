"""ControllerModifyVolume: validate, merge, record (CreateVolume's mutable_parameters are
recorded by ControllerService.create_volume, and removed by its delete_volume).

The controller only records what a VolumeAttributesClass asks for; the node that stages the
volume applies it (service/node/tuning.py), at stage time and on its fence pass after a change."""

from __future__ import annotations

from collections.abc import Mapping

from csi_hostpath.core.errors import VolumeNotFound
from csi_hostpath.core.mutable import Tuning, parse_mutable
from csi_hostpath.core.naming import is_volume_id
from csi_hostpath.service.controller._log import log
from csi_hostpath.service.controller.controller_context import ControllerContext
from csi_hostpath.store.mutable_records import MutableRecords


class ModifyService:
    def __init__(self, ctx: ControllerContext) -> None:
        self.store = ctx.store
        self.records = MutableRecords(ctx.layout.root)  # in the pool, where the node reads them

    def modify(self, volume_id: str, parameters: Mapping[str, str]) -> Tuning:
        change = parse_mutable(parameters)
        if not is_volume_id(volume_id) or self.store.get_volume(volume_id) is None:
            raise VolumeNotFound(f"volume {volume_id!r} does not exist")
        merged = self.records.read(volume_id).merged(change)
        self.records.write(volume_id, merged)
        log.info("volume %s: mutable parameters now %s", volume_id, merged.as_parameters())
        return merged
