"""Request strategies for one RPC, generated from its protobuf descriptor: wholly random
messages, and plausible requests (drawn from what the seed holds) with a hostile twist."""

from __future__ import annotations

import os
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import message as pb_message
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

from csi_hostpath._pb import csi_pb2 as pb
from tests.e2e.bad_input.fuzz_target import Seed
from tests.e2e.bad_input.hostile_values import (
    INT32,
    INT64,
    SAFE_MOUNT_FLAGS,
    UINT32,
    UINT64,
    VALID_CAPS,
    ephemeral_size_ok,
    hostile_map,
    hostile_text,
    refusable,
    unknown_fields,
)
from tests.e2e.bad_input.known_bugs import KNOWN_BUGS, int_bug, nests, path_type_bug, shrinks

EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"


@dataclass
class Strategies:
    """Request strategies for one RPC, aimed at what the seed holds. mounted() lists the mount
    points in the driver's namespace under its work directory."""

    seed: Seed
    method: str
    mounted: Callable[[], set[str]] = set

    def paths(self) -> st.SearchStrategy[str]:
        root = str(self.seed.fuzz_root)
        component = st.text(string.ascii_letters + string.digits + "-_.", min_size=1, max_size=12)
        inside = st.lists(component.filter(lambda c: c not in (".", "..")), min_size=1, max_size=3)
        hostile = [
            "",
            ".",
            "..",
            "relative",
            "rel/x",
            "/etc/../x",
            "/tmp/../etc/csihp-fuzz",
            "/../../etc/csihp-fuzz",
            f"{root}/../escape",
            f"{root}/a/../../escape",
            f"{root}/./../x",
            f"{root}/nul\x00x",
            "\x00",
            "../../../../etc/passwd",
        ]
        return st.one_of(
            inside.map(lambda parts: os.path.join(root, *parts)),
            st.sampled_from(self.seed.paths),
            st.sampled_from(hostile),
            st.text(max_size=40).map(refusable),
        )

    def text(self, name: str) -> st.SearchStrategy[str]:
        seed = self.seed
        if name in ("volume_id", "source_volume_id"):
            well_formed = st.binary(min_size=16, max_size=16).map(lambda b: "vol-" + b.hex())
            return st.one_of(
                hostile_text(),
                st.sampled_from(seed.volume_ids),
                well_formed,
                st.sampled_from(["csi-inline-1", "csi-inline-2"]),
            )
        if name == "snapshot_id":
            well_formed = st.binary(min_size=16, max_size=16).map(lambda b: "snap-" + b.hex())
            return st.one_of(hostile_text(), st.sampled_from(seed.snapshot_ids), well_formed)
        if name == "node_id":
            return st.one_of(hostile_text(), st.just(seed.node_id))
        if name == "name":
            names = [*seed.names.values(), seed.snapshot_name, "fz-1"]
            return st.one_of(hostile_text(), st.sampled_from(names))
        if name in ("target_path", "staging_target_path", "volume_path", "staging_path"):
            return self.paths()
        if name == "starting_token":
            token = st.one_of(hostile_text(), st.integers(0, 10**20).map(str))
            if "non-decimal-digit-token" in KNOWN_BUGS:
                token = token.filter(lambda s: not int_bug(s))
            return token
        if name == "fs_type":
            return st.one_of(hostile_text(), st.sampled_from(["ext4", "xfs", "", "btrfs"]))
        return hostile_text()

    def string_map(self, name: str) -> st.SearchStrategy[dict[str, str]]:
        seed = self.seed
        if name == "publish_context":
            generation = st.one_of(hostile_text(), st.integers(0, 10**6).map(str))
            if "non-decimal-digit-generation" in KNOWN_BUGS:
                generation = generation.filter(lambda s: not int_bug(s))
            return st.one_of(
                hostile_map(),
                st.sampled_from(seed.contexts),
                generation.map(lambda g: {"generation": g}),
            )
        if name == "volume_context":
            size = st.one_of(
                st.sampled_from(
                    ["16Mi", "100Mi", "1Gi", "0", "", "abc", "-1", "1.5Gi", "٣Mi", "9" * 20 + "Ti"]
                ),
                st.text(max_size=8),
            ).filter(ephemeral_size_ok)
            ephemeral = st.fixed_dictionaries(
                {EPHEMERAL_KEY: st.sampled_from(["true", "True", "false", ""])},
                optional={"size": size, "fsType": st.sampled_from(["ext4", "xfs", "ntfs", ""])},
            )
            return st.one_of(hostile_map(), st.sampled_from(seed.volume_contexts), ephemeral)
        if name == "segments":
            key = "topology.loop.hostpath.csi.dev/node"
            return st.one_of(hostile_map(), st.just({key: seed.node_id}))
        return hostile_map()

    def value(self, f: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
        t = f.type
        if t == FieldDescriptor.TYPE_STRING:
            flags_bug = "mount-flags-rejected-by-mount" in KNOWN_BUGS
            # NodePublish mounts too: an inline ephemeral volume is formatted and mounted there.
            mounting = self.method in ("NodeStageVolume", "NodePublishVolume")
            if f.name == "mount_flags" and mounting and flags_bug:
                return st.sampled_from(SAFE_MOUNT_FLAGS)
            return self.text(f.name)
        if t == FieldDescriptor.TYPE_BYTES:
            return st.binary(max_size=64)
        if t == FieldDescriptor.TYPE_BOOL:
            return st.booleans()
        if t == FieldDescriptor.TYPE_ENUM:
            assert f.enum_type is not None, f.full_name  # an enum field always names its enum
            known = [v.number for v in f.enum_type.values]
            return st.one_of(st.sampled_from(known), INT32)
        if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64):
            return INT64
        if t in (FieldDescriptor.TYPE_SFIXED64,):
            return INT64
        if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32):
            return INT32
        if t in (FieldDescriptor.TYPE_SFIXED32,):
            return INT32
        if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            return UINT32
        if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
            return UINT64
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return st.floats(width=32 if t == FieldDescriptor.TYPE_FLOAT else 64)
        assert t == FieldDescriptor.TYPE_MESSAGE and f.message_type is not None, f.full_name
        return self.message(f.message_type, depth + 1)

    def message(self, desc: Descriptor, depth: int = 0) -> st.SearchStrategy[Any]:
        cls = GetMessageClass(desc)
        if depth > 4:
            return st.just(cls())
        generic = self._generic(desc, depth)
        if desc.full_name == "csi.v1.VolumeCapability":
            return st.one_of(VALID_CAPS, generic)
        return generic

    def _generic(self, desc: Descriptor, depth: int) -> st.SearchStrategy[Any]:
        cls = GetMessageClass(desc)
        if not desc.fields:
            return st.builds(cls)

        @st.composite
        def build(draw: st.DrawFn) -> Any:
            msg = cls()
            for oneof in desc.oneofs:  # one member, or none at all
                chosen = draw(st.sampled_from([None, *oneof.fields]))
                if chosen is not None:
                    _assign(msg, chosen, draw(self.field_value(chosen, depth)))
            for f in desc.fields:
                if f.containing_oneof is None and draw(st.booleans()):
                    _assign(msg, f, draw(self.field_value(f, depth)))
            return msg

        return build()

    def field_value(self, f: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
        if f.is_repeated and f.message_type is not None and f.message_type.GetOptions().map_entry:
            value_field = f.message_type.fields_by_name["value"]
            if value_field.type == FieldDescriptor.TYPE_STRING:
                return self.string_map(f.name)
            return st.dictionaries(hostile_text(), self.value(value_field, depth), max_size=3)
        if f.is_repeated:
            return st.lists(self.value(f, depth), max_size=3)
        return self.value(f, depth)

    # ----- plausible requests, then a few hostile changes -----
    def inside_path(self) -> st.SearchStrategy[str]:
        root = str(self.seed.fuzz_root)
        names = st.sampled_from(["a", "b", "c", "pod", "mount", "globalmount"])
        return st.lists(names, min_size=1, max_size=3).map(lambda p: os.path.join(root, *p))

    def plausible(self, f: FieldDescriptor) -> st.SearchStrategy[Any] | None:
        """A value that gets past the first checks, for the fields the driver acts on; None
        for the others, which the template leaves unset."""
        seed, name = self.seed, f.name
        caps = VALID_CAPS
        topology = st.just(
            pb.Topology(segments={"topology.loop.hostpath.csi.dev/node": seed.node_id})
        )
        plausible: dict[str, st.SearchStrategy[Any]] = {
            "volume_id": st.sampled_from([*seed.volume_ids, "csi-inline-1"]),
            "source_volume_id": st.sampled_from(seed.volume_ids),
            "snapshot_id": st.sampled_from(seed.snapshot_ids),
            "node_id": st.just(seed.node_id),
            "name": st.sampled_from(["fz-1", "fz-2", *seed.names.values(), seed.snapshot_name]),
            "staging_target_path": st.one_of(st.sampled_from(seed.paths), self.inside_path()),
            "target_path": st.one_of(self.inside_path(), st.sampled_from(seed.paths)),
            "volume_path": st.sampled_from(seed.paths),
            "volume_capability": caps,
            "volume_capabilities": st.lists(caps, min_size=1, max_size=2),
            "capacity_range": st.builds(
                lambda r, lim: pb.CapacityRange(required_bytes=r, limit_bytes=lim),
                st.sampled_from([0, 16 << 20, 32 << 20, 64 << 20, 320 << 20]),
                st.sampled_from([0, 64 << 20, 1 << 30]),
            ),
            "publish_context": st.sampled_from(seed.contexts),
            "volume_context": self.string_map("volume_context"),
            "readonly": st.booleans(),
            "starting_token": st.sampled_from(["", "1", "2"]),
            "max_entries": st.integers(0, 3),
            "accessible_topology": topology,
            "accessibility_requirements": topology.map(
                lambda t: pb.TopologyRequirement(requisite=[t], preferred=[t])
            ),
            "volume_content_source": st.one_of(
                st.sampled_from(seed.snapshot_ids).map(
                    lambda i: pb.VolumeContentSource(
                        snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id=i)
                    )
                ),
                st.sampled_from(seed.volume_ids).map(
                    lambda i: pb.VolumeContentSource(
                        volume=pb.VolumeContentSource.VolumeSource(volume_id=i)
                    )
                ),
            ),
        }
        return plausible.get(name)

    def template(self, desc: Descriptor) -> st.SearchStrategy[Any]:
        cls = GetMessageClass(desc)
        fields = list(desc.fields)
        if not fields:
            return st.builds(cls)

        @st.composite
        def build(draw: st.DrawFn) -> Any:
            msg = cls()
            for f in fields:
                value = self.plausible(f)
                # sampled_from leans to its first element, as Hypothesis leans to simple
                # data: here, to setting the field.
                if value is not None and draw(st.sampled_from([True] * 19 + [False])):
                    _assign(msg, f, draw(value))
            # Then a field or two made hostile, or cleared; a third of the requests stay as
            # they are, to exercise what the driver does when it accepts.
            count = draw(st.sampled_from([0, 0, 1, 1, 1, 2]))
            for f in draw(st.lists(st.sampled_from(fields), min_size=count, max_size=count)):
                msg.ClearField(f.name)
                if draw(st.sampled_from([True, True, True, False])):
                    _assign(msg, f, draw(self.field_value(f, 1)))
            return msg

        return build()

    def request(self, desc: Descriptor) -> st.SearchStrategy[Any]:
        def with_unknown(pair: tuple[Any, bytes]) -> Any:
            msg, extra = pair
            msg.MergeFromString(extra)
            return msg

        # Mostly plausible requests with a hostile twist, to get deep; some wholly random.
        template = self.template(desc)
        shapes = st.one_of(template, template, template, self.message(desc))
        mounting = self.method in ("NodeStageVolume", "NodePublishVolume")
        if "path-of-the-wrong-type" in KNOWN_BUGS and mounting:
            shapes = shapes.filter(lambda r: not path_type_bug(r))
        if "unpublish-busy-target" in KNOWN_BUGS and mounting:
            shapes = shapes.filter(lambda r: not nests(r, self.mounted()))
        if "expand-limit-only-shrinks" in KNOWN_BUGS and self.method == "ControllerExpandVolume":
            shapes = shapes.filter(lambda r: not shrinks(r))
        return st.tuples(shapes, unknown_fields()).map(with_unknown)


def _assign(msg: Any, f: FieldDescriptor, value: Any) -> None:
    target = getattr(msg, f.name)
    if f.is_repeated and f.message_type is not None and f.message_type.GetOptions().map_entry:
        for k, v in value.items():
            if isinstance(v, pb_message.Message):
                target[k].CopyFrom(v)
            else:
                target[k] = v
    elif f.is_repeated:
        target.extend(value)
    elif f.type == FieldDescriptor.TYPE_MESSAGE:
        target.CopyFrom(value)
    else:
        setattr(msg, f.name, value)
