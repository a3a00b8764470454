"""csi-sanity's Identity Service cases: GetPluginCapabilities, Probe and GetPluginInfo."""

from __future__ import annotations

import re

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.conformance.sanity import (
    Sanity,
)

C = grpc.StatusCode

# =============================================================================================
# Identity Service
# =============================================================================================
KNOWN_PLUGIN_SERVICES = {
    "CONTROLLER_SERVICE",
    "VOLUME_ACCESSIBILITY_CONSTRAINTS",
    "GROUP_CONTROLLER_SERVICE",
    # CSI 1.10 added it; the driver serves SnapshotMetadata on the same socket.
    "SNAPSHOT_METADATA_SERVICE",
    # CSI 1.13; csi-test v5.6.0's identity.go knows it.
    "SNAPSHOT_ACCESSIBILITY_CONSTRAINTS",
}
KNOWN_EXPANSION_MODES = {"ONLINE", "OFFLINE"}
# csi-sanity's pattern for plugin names: a letter, then letters, digits, '-', '.', '_' (and, as
# its raw Go string reads, '\'), ending in a letter; 63 characters at most.
PLUGIN_NAME = re.compile(r"^[a-zA-Z][A-Za-z0-9\-\\._]{0,61}[a-zA-Z]$")


def test_identity_service_get_plugin_capabilities_should_return_appropriate_capabilities(
    sanity: Sanity,
) -> None:
    """Identity Service / GetPluginCapabilities / should return appropriate capabilities"""
    res = sanity.client.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest())
    for cap in res.capabilities:
        kind = cap.WhichOneof("type")
        if kind == "service":
            name = pb.PluginCapability.Service.Type.Name(cap.service.type)
            assert name in KNOWN_PLUGIN_SERVICES, f"Unknown service: {name}"
        elif kind == "volume_expansion":
            name = pb.PluginCapability.VolumeExpansion.Type.Name(cap.volume_expansion.type)
            assert name in KNOWN_EXPANSION_MODES, f"Unknown volume expansion mode: {name}"
        else:
            pytest.fail(f"Unknown capability: {cap}")


def test_identity_service_probe_should_return_appropriate_information(sanity: Sanity) -> None:
    """Identity Service / Probe / should return appropriate information"""
    # csi-sanity requires the call to succeed; `ready`, when set, may be either value.
    res = sanity.client.identity.Probe(pb.ProbeRequest())
    assert res is not None
    if res.HasField("ready"):
        assert res.ready.value in (True, False)


def test_identity_service_get_plugin_info_should_return_appropriate_information(
    sanity: Sanity,
) -> None:
    """Identity Service / GetPluginInfo / should return appropriate information"""
    res = sanity.client.identity.GetPluginInfo(pb.GetPluginInfoRequest())
    assert res.name, "plugin name is empty"
    assert len(res.name) <= 63
    assert PLUGIN_NAME.match(res.name), f"plugin name {res.name!r} has the wrong form"
