"""The descriptors of proto/csi.proto's stubs, for the tests that hold them to the CSI spec: the
file, every message nested or not, and a message by its full name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from google.protobuf.descriptor import Descriptor

from csi_hostpath._pb import csi_pb2

FILE = csi_pb2.DESCRIPTOR


def walk(messages: Iterable[Descriptor]) -> Iterator[Descriptor]:
    for message in messages:
        yield message
        yield from walk(message.nested_types)


def message(full_name: str) -> Descriptor:
    return FILE.pool.FindMessageTypeByName(full_name)
