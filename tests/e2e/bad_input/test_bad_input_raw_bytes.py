"""Raw malformed protobuf bytes to every method, and a message past the limit, never crash it.

What does not parse is refused by gRPC itself; what parses gets a spec code. The driver lives and
Probe answers ready.
"""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import message as pb_message
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message_factory import GetMessageClass
from hypothesis import given
from hypothesis import strategies as st

from tests.e2e.bad_input.fuzz_target import (
    METHODS,
    RPC_TIMEOUT,
    SPEC_CODES,
    Target,
    fuzz_settings,
    probe_ok,
)

C = grpc.StatusCode


RAW_GARBAGE = [
    b"",
    b"\x00",
    b"\xff" * 16,
    b"\x08" + b"\xff" * 10 + b"\x01",  # a varint of 11 bytes
    b"\x0a\xff\xff\xff\xff\x0f",  # a length far past the end
    b"\x0a\x05ab",  # a length past the end
    b"\x0a\x02\xff\xfe",  # field 1 as a string of invalid UTF-8
    b"\x0d\x00\x00\x00\x00",  # field 1 with the fixed32 wire type
    b"\x0b\x0c",  # a group start and end
    b"\x0b" * 200,  # groups never closed
    b"\x0c",  # a group end with no start
    b"\x00\x01",  # field number 0
    b"\xf8\xff\xff\xff\x0f\x01",  # the largest field number
    b"\x0f",  # wire type 7 (none such)
    b"\x12\x03\x0a\x01" + b"\x12\x7f" * 60,  # nested messages cut short
    b"\x1a\x80\x80\x80\x80\x10",  # a length over 4 GiB
    bytes(range(256)),
]


@pytest.mark.parametrize("method", METHODS, ids=[m.name for m in METHODS])
def test_raw_garbage_bytes_never_crash_it(fresh: Target, method: MethodDescriptor) -> None:
    path = f"/csi.v1.{method.containing_service.name}/{method.name}"
    call = fresh.client.channel.unary_unary(
        path, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )

    @fuzz_settings(fresh.raw_examples)
    @given(payload=st.one_of(st.sampled_from(RAW_GARBAGE), st.binary(max_size=512)))
    def one(payload: bytes) -> None:
        code = C.OK
        try:
            call(payload, timeout=RPC_TIMEOUT)
        except grpc.RpcError as e:
            code = e.code()
        assert fresh.alive(), f"the driver died on raw bytes to {method.name}:\n{fresh.log()}"
        try:
            GetMessageClass(method.input_type).FromString(payload)
        except pb_message.DecodeError:
            # gRPC itself refuses what does not parse, before the driver sees it.
            assert code != C.OK, f"{method.name} accepted bytes that do not parse"
        else:
            assert code in SPEC_CODES, f"{method.name} answered {code.name} to {payload!r}"

    one()


def test_an_oversized_message_is_refused_and_the_driver_lives(target: Target) -> None:
    """5 MiB, past gRPC's default 4 MiB receive limit."""
    call = target.client.channel.unary_unary(
        "/csi.v1.Controller/CreateVolume",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as info:
        call(b"\x0a" + b"\x80\x80\x40" + b"x" * (5 << 20), timeout=RPC_TIMEOUT)
    assert info.value.code() == C.RESOURCE_EXHAUSTED
    probe_ok(target)
