"""proto/csi.proto as a file: its name, package, imports and custom options, and its stubs.

The stubs round-trip a request, and regenerate byte for byte from the pinned grpcio-tools."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from csi_hostpath._pb import csi_pb2
from tests.unit.csi_descriptors import FILE, message

ROOT = Path(__file__).resolve().parents[2]
PB_DIR = ROOT / "csi_hostpath" / "_pb"
GENERATED_FILES = tuple(
    f"{proto}{suffix}"
    for proto in ("csi", "pluginregistration")
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
)


def test_file_identity() -> None:
    assert FILE.name == "csi.proto"
    assert FILE.package == "csi.v1"
    assert [d.name for d in FILE.dependencies] == [
        "google/protobuf/descriptor.proto",
        "google/protobuf/timestamp.proto",
        "google/protobuf/wrappers.proto",
    ]


def test_custom_options() -> None:
    extensions = {
        "alpha_enum": ("google.protobuf.EnumOptions", 1060),
        "alpha_enum_value": ("google.protobuf.EnumValueOptions", 1060),
        "csi_secret": ("google.protobuf.FieldOptions", 1059),
        "alpha_field": ("google.protobuf.FieldOptions", 1060),
        "alpha_message": ("google.protobuf.MessageOptions", 1060),
        "alpha_method": ("google.protobuf.MethodOptions", 1060),
        "alpha_service": ("google.protobuf.ServiceOptions", 1060),
    }
    assert set(FILE.extensions_by_name) == set(extensions)
    for name, (extendee, number) in extensions.items():
        ext = FILE.extensions_by_name[name]
        assert ext.number == number
        assert ext.containing_type is not None
        assert ext.containing_type.full_name == extendee

    secrets = message("csi.v1.CreateVolumeRequest").fields_by_name["secrets"]
    assert secrets.GetOptions().Extensions[csi_pb2.csi_secret] is True
    get_snapshot = FILE.services_by_name["Controller"].methods_by_name["GetSnapshot"]
    assert get_snapshot.GetOptions().Extensions[csi_pb2.alpha_method] is True
    snapshot_metadata = FILE.services_by_name["SnapshotMetadata"]
    assert snapshot_metadata.GetOptions().Extensions[csi_pb2.alpha_service] is True


def test_round_trip() -> None:
    request = csi_pb2.CreateVolumeRequest(
        name="pvc-1",
        capacity_range=csi_pb2.CapacityRange(required_bytes=1 << 20),
        parameters={"k": "v"},
    )
    decoded = csi_pb2.CreateVolumeRequest.FromString(request.SerializeToString())
    assert decoded == request


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpc_tools is not installed")
    env = dict(os.environ)
    env["PYTHON"] = sys.executable
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    subprocess.run(
        ["bash", str(ROOT / "tools" / "genproto.sh"), str(tmp_path)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(GENERATED_FILES)
    for name in GENERATED_FILES:
        assert (tmp_path / name).read_bytes() == (PB_DIR / name).read_bytes(), name
