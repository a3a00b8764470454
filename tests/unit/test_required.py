"""api/runtime/required.py, the one table of CSI's REQUIRED request fields.

api/runtime/required.py, the one owner of CSI's REQUIRED request fields: the table names real fields
of real CSI requests, and each missing field is reported by name as an InvalidRequest (which
api/status.py maps to INVALID_ARGUMENT). tests/unit/test_rpc_required_fields.py checks the same
over gRPC."""

from __future__ import annotations

import pytest
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.api.runtime.required import REQUIRED, check
from csi_hostpath.core.errors import InvalidRequest

REQUESTS = {
    m.input_type.name: m.input_type
    for s in pb.DESCRIPTOR.services_by_name.values()
    for m in s.methods
}
# A value that makes each kind of field present.
CAP = pb.VolumeCapability(
    mount=pb.VolumeCapability.MountVolume(),
    access_mode=pb.VolumeCapability.AccessMode(
        mode=pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
    ),
)


def _filled(name: str) -> Message:
    """A request with every REQUIRED field set."""
    request = GetMessageClass(REQUESTS[name])()
    for field in REQUIRED[name]:
        value = getattr(request, field)
        if field == "volume_capability":
            value.CopyFrom(CAP)
        elif field == "volume_capabilities":
            value.append(CAP)
        elif field == "capacity_range":
            value.SetInParent()
        elif field == "source_volume_ids":
            value.append("vol-1")
        else:
            setattr(request, field, "x")
    return request


def test_the_table_names_real_requests_and_fields() -> None:
    for name, fields in REQUIRED.items():
        assert name in REQUESTS, f"{name} is no request of any CSI RPC"
        for field in fields:
            assert field in REQUESTS[name].fields_by_name, f"{name} has no field {field}"


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_a_request_with_its_required_fields_passes(name: str) -> None:
    check(_filled(name))


@pytest.mark.parametrize(
    ("name", "field"), [(n, f) for n, fields in sorted(REQUIRED.items()) for f in fields]
)
def test_each_missing_field_is_named(name: str, field: str) -> None:
    request = _filled(name)
    request.ClearField(field)
    with pytest.raises(InvalidRequest, match=rf"^{field} (is|are) required$"):
        check(request)


def test_the_first_missing_field_is_reported_first() -> None:
    with pytest.raises(InvalidRequest, match=r"^volume_id is required$"):
        check(pb.NodeStageVolumeRequest())


def test_requests_without_required_fields_pass_empty() -> None:
    for request in (pb.ProbeRequest(), pb.ListVolumesRequest(), pb.GetCapacityRequest()):
        check(request)
