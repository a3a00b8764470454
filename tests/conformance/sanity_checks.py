"""The checks csi-sanity's cases make: is a path there, does the driver advertise a capability,
did a call fail with exactly this code, is a snapshot's information complete. Over gRPC only, as
csi-sanity asks."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client


def path_exists(path: str) -> bool:
    """csi-sanity's default CheckPath, reduced to what its cases ask: is anything there? (lstat,
    so a dangling symlink or a leftover mount point counts as present)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    return True


# ---- capabilities --------------------------------------------------------------------------
# Looked up by *name*: a capability this CSI v1.13 proto does not define (csi-sanity's newest
# copies know a few from later spec versions) is one the driver cannot advertise.
def enum_value(enum: Any, name: str) -> int | None:
    try:
        return int(enum.Value(name))
    except ValueError:
        return None


def controller_cap(client: Client, name: str) -> bool:
    wanted = enum_value(pb.ControllerServiceCapability.RPC.Type, name)
    if wanted is None:
        return False
    caps = client.controller.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest())
    return any(c.rpc.type == wanted for c in caps.capabilities)


def node_cap(client: Client, name: str) -> bool:
    wanted = enum_value(pb.NodeServiceCapability.RPC.Type, name)
    if wanted is None:
        return False
    caps = client.node.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest())
    return any(c.rpc.type == wanted for c in caps.capabilities)


def plugin_service(client: Client, name: str) -> bool:
    wanted = enum_value(pb.PluginCapability.Service.Type, name)
    if wanted is None:
        return False
    caps = client.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest())
    return any(
        c.WhichOneof("type") == "service" and c.service.type == wanted for c in caps.capabilities
    )


# ---- assertions ----------------------------------------------------------------------------
def expect_error_code(code: grpc.StatusCode, call: Callable[[Any], Any], request: Any) -> None:
    """csi-sanity's ExpectErrorCode: the call fails, with a gRPC status, of exactly `code`."""
    try:
        response = call(request)
    except grpc.RpcError as err:
        got = err.code()
        assert got == code, f"expected {code.name}, got {got.name}: {err.details()}"
        return
    raise AssertionError(f"expected {code.name}, but the call succeeded: {response!r}")


def verify_snapshot_info(snapshot: pb.Snapshot) -> None:
    assert snapshot.snapshot_id, "snapshot_id is empty"
    assert snapshot.source_volume_id, "source_volume_id is empty"
    assert snapshot.HasField("creation_time"), "creation_time is missing"
    ct = snapshot.creation_time
    assert ct.seconds or ct.nanos, "creation_time is zero"
