"""proto/pluginregistration.proto keeps the kubelet's plugin registration wire contract.

proto/pluginregistration.proto keeps the kubelet's plugin registration wire contract (the
pluginregistration v1 API of k8s.io/kubelet v0.35.4): the package without a version suffix, the
two methods, and every field's name, number and type."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from csi_hostpath._pb import pluginregistration_pb2 as pb
from csi_hostpath._pb import pluginregistration_pb2_grpc as pb_grpc

FILE = pb.DESCRIPTOR

# (message, field) -> (number, type, repeated)
FIELDS = {
    ("PluginInfo", "type"): (1, FieldDescriptor.TYPE_STRING, False),
    ("PluginInfo", "name"): (2, FieldDescriptor.TYPE_STRING, False),
    ("PluginInfo", "endpoint"): (3, FieldDescriptor.TYPE_STRING, False),
    ("PluginInfo", "supported_versions"): (4, FieldDescriptor.TYPE_STRING, True),
    ("RegistrationStatus", "plugin_registered"): (1, FieldDescriptor.TYPE_BOOL, False),
    ("RegistrationStatus", "error"): (2, FieldDescriptor.TYPE_STRING, False),
}


def test_package_and_methods_are_the_kubelets() -> None:
    assert FILE.package == "pluginregistration"
    service = FILE.services_by_name["Registration"]
    assert service.full_name == "pluginregistration.Registration"
    methods = {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}
    assert methods == {
        "GetInfo": ("InfoRequest", "PluginInfo"),
        "NotifyRegistrationStatus": ("RegistrationStatus", "RegistrationStatusResponse"),
    }
    assert all(not m.client_streaming and not m.server_streaming for m in service.methods)
    assert hasattr(pb_grpc, "RegistrationStub")
    assert hasattr(pb_grpc, "add_RegistrationServicer_to_server")


def test_every_field_number_and_type() -> None:
    seen = {
        (message.name, field.name): (
            field.number,
            field.type,
            field.is_repeated,
        )
        for message in FILE.message_types_by_name.values()
        for field in message.fields
    }
    assert seen == FIELDS
    assert set(FILE.message_types_by_name) == {
        "PluginInfo",
        "RegistrationStatus",
        "RegistrationStatusResponse",
        "InfoRequest",
    }


def test_a_kubelet_encoding_decodes() -> None:
    """The bytes a Go PluginInfo with these values marshals to, written out by hand from the
    field numbers (tag = number << 3 | wire type 2), decode to the same values here."""
    wire = b"\x0a\x09CSIPlugin\x12\x15loop.hostpath.csi.dev\x1a\x04/s.k\x22\x051.0.0"
    info = pb.PluginInfo.FromString(wire)
    assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
        "CSIPlugin",
        "loop.hostpath.csi.dev",
        "/s.k",
        ["1.0.0"],
    )
    assert info.SerializeToString() == wire
