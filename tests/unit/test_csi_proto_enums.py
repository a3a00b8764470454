"""proto/csi.proto's enums keep the CSI v1.13.0 value tables, and no enum is missing or extra.

The v1.12 capabilities keep their numbers: v1.13 reserved them."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import EnumDescriptor

from tests.unit.csi_descriptors import FILE, walk

# Every enum in the spec file, with its complete value table.
ENUMS: dict[str, dict[str, int]] = {
    "csi.v1.BlockMetadataType": {"UNKNOWN": 0, "FIXED_LENGTH": 1, "VARIABLE_LENGTH": 2},
    "csi.v1.VolumeHealthErrorType": {
        "UNKNOWN_VOLUME_HEALTH_TYPE": 0,
        "DEGRADED": 1,
        "INACCESSIBLE": 2,
        "DATA_LOSS": 3,
    },
    "csi.v1.StorageHealthErrorType": {
        "UNKNOWN_STORAGE_HEALTH_ERROR_TYPE": 0,
        "STORAGE_DEGRADED": 1,
        "STORAGE_UNREACHABLE": 2,
    },
    "csi.v1.PluginCapability.Service.Type": {
        "UNKNOWN": 0,
        "CONTROLLER_SERVICE": 1,
        "VOLUME_ACCESSIBILITY_CONSTRAINTS": 2,
        "GROUP_CONTROLLER_SERVICE": 3,
        "SNAPSHOT_METADATA_SERVICE": 4,
        "SNAPSHOT_ACCESSIBILITY_CONSTRAINTS": 5,
    },
    "csi.v1.PluginCapability.VolumeExpansion.Type": {"UNKNOWN": 0, "ONLINE": 1, "OFFLINE": 2},
    "csi.v1.VolumeCapability.AccessMode.Mode": {
        "UNKNOWN": 0,
        "SINGLE_NODE_WRITER": 1,
        "SINGLE_NODE_READER_ONLY": 2,
        "MULTI_NODE_READER_ONLY": 3,
        "MULTI_NODE_SINGLE_WRITER": 4,
        "MULTI_NODE_MULTI_WRITER": 5,
        "SINGLE_NODE_SINGLE_WRITER": 6,
        "SINGLE_NODE_MULTI_WRITER": 7,
    },
    "csi.v1.ControllerServiceCapability.RPC.Type": {
        "UNKNOWN": 0,
        "CREATE_DELETE_VOLUME": 1,
        "PUBLISH_UNPUBLISH_VOLUME": 2,
        "LIST_VOLUMES": 3,
        "GET_CAPACITY": 4,
        "CREATE_DELETE_SNAPSHOT": 5,
        "LIST_SNAPSHOTS": 6,
        "CLONE_VOLUME": 7,
        "PUBLISH_READONLY": 8,
        "EXPAND_VOLUME": 9,
        "LIST_VOLUMES_PUBLISHED_NODES": 10,
        "VOLUME_CONDITION": 11,
        "GET_VOLUME": 12,
        "SINGLE_NODE_MULTI_WRITER": 13,
        "MODIFY_VOLUME": 14,
        "GET_SNAPSHOT": 15,
        "GET_VOLUME_HEALTH": 16,
        "LIST_VOLUME_HEALTH": 17,
    },
    "csi.v1.VolumeUsage.Unit": {"UNKNOWN": 0, "BYTES": 1, "INODES": 2},
    "csi.v1.NodeServiceCapability.RPC.Type": {
        "UNKNOWN": 0,
        "STAGE_UNSTAGE_VOLUME": 1,
        "GET_VOLUME_STATS": 2,
        "EXPAND_VOLUME": 3,
        "VOLUME_CONDITION": 4,
        "SINGLE_NODE_MULTI_WRITER": 5,
        "VOLUME_MOUNT_GROUP": 6,
        "GET_VOLUME_HEALTH": 7,
        "GET_STORAGE_HEALTH": 8,
    },
    "csi.v1.GroupControllerServiceCapability.RPC.Type": {
        "UNKNOWN": 0,
        "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT": 1,
    },
}


def _our_enums() -> dict[str, EnumDescriptor]:
    enums = {e.full_name: e for e in FILE.enum_types_by_name.values()}
    for message in walk(FILE.message_types_by_name.values()):
        enums.update({e.full_name: e for e in message.enum_types})
    return enums


@pytest.mark.parametrize("enum_name", sorted(ENUMS))
def test_enum_values(enum_name: str) -> None:
    enum = _our_enums()[enum_name]
    assert {v.name: v.number for v in enum.values} == ENUMS[enum_name]


def test_enum_set_is_exact() -> None:
    assert set(_our_enums()) == set(ENUMS)
