"""Hostile values for the fuzz's requests: strings, maps and integers at and past every edge,
paths the driver must refuse, unknown fields on the wire, and the capabilities it serves."""

from __future__ import annotations

from hypothesis import strategies as st

from csi_hostpath.core.sizes import QuantityError, parse_size
from tests.support import helpers as h
from tests.support.needs import fs_available

SAFE_MOUNT_FLAGS = ("noatime", "nodiratime", "relatime", "sync", "nodev", "nosuid", "noexec")


# Hypothesis leans to the first elements: the empty string (a missing field) comes later, so
# that deeper paths get their share.
HOSTILE_TEXT = [
    "..",
    "vol-" + "0" * 32,
    "x" * 129,
    "a\x00b",
    "",
    ".",
    "/",
    "//",
    "/..",
    "../..",
    "\x00",
    "vol-" + "0" * 31,
    "vol-" + "0" * 32 + "\n",
    "VOL-" + "A" * 32,
    "snap-" + "0" * 32,
    "x" * 128,
    "é" * 65,
    "²",
    "١٢٣",
    "-1",
    "0",
    "9" * 19,
    "%s%n%x",
    "$(reboot)",
    "`id`",
    "; rm -rf /",
    "--help",
    "-o",
    "\n",
    "\t",
    " ",
    "\u202e",
    "\ufeff",
    "\U0001f642" * 40,
    "~root",
    "*",
    "ro,remount",
    "true",
    "null",
]


def hostile_text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HOSTILE_TEXT),
        st.text(max_size=24),
        st.text(min_size=129, max_size=300),
        st.builds(
            lambda piece, n: piece * n,
            st.sampled_from(["x", "/", "\x00", "é", "../", "%n"]),
            st.integers(129, 5200),
        ),
    )


def hostile_map() -> st.SearchStrategy[dict[str, str]]:
    return st.one_of(
        st.dictionaries(hostile_text(), hostile_text(), max_size=4),
        # 5 KiB maps: one huge value, or many entries.
        st.just({"big": "v" * 5120}),
        st.integers(1, 200).map(lambda n: {f"key-{i:03d}": "v" * (5120 // n) for i in range(n)}),
    )


INT_EDGES = [0, 1, -1, 4096, 1 << 20, 16 << 20, 300 << 20, 1 << 30, 1 << 40, 2**62]
INT64 = st.one_of(
    st.sampled_from([*INT_EDGES, -(2**63), 2**63 - 1]), st.integers(-(2**63), 2**63 - 1)
)
INT32 = st.one_of(
    st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1)
)
UINT32 = st.integers(0, 2**32 - 1)
UINT64 = st.integers(0, 2**64 - 1)


def ephemeral_size_ok(text: str) -> bool:
    """Keep inline volume sizes that are cheap to serve: up to 1 GiB (a real mkfs runs), or
    not a size at all (refused)."""
    try:
        size = parse_size(text)
    except QuantityError:
        return True  # refused by the driver: cheap
    return size <= 1 << 30


def refusable(path: str) -> str:
    """A random string made into a path the driver must refuse: a valid absolute path outside
    the work directory is a real target path, which this test does not hand out."""
    if path.startswith("/") and "\x00" not in path and ".." not in path.split("/"):
        return "rel" + path
    return path


def unknown_fields() -> st.SearchStrategy[bytes]:
    """Wire bytes of fields no CSI message has: a receiver must skip them."""

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def encode(number: int, payload: bytes | int) -> bytes:
        if isinstance(payload, int):
            return varint(number << 3) + varint(payload)
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    one = st.builds(
        encode, st.integers(1000, 2**29 - 1), st.one_of(st.integers(0, 2**64 - 1), st.binary())
    )
    return st.lists(one, max_size=3).map(b"".join)


VALID_CAPS = st.sampled_from(
    [
        h.mount_cap("ext4"),
        h.mount_cap(""),
        *([h.mount_cap("xfs")] if fs_available("xfs") else []),
        h.mount_cap("ext4", h.Mode.SINGLE_NODE_SINGLE_WRITER),
        h.mount_cap("ext4", h.Mode.MULTI_NODE_READER_ONLY),
        h.mount_cap("ext4", flags=SAFE_MOUNT_FLAGS[:2]),
        h.block_cap(),
        h.block_cap(h.Mode.MULTI_NODE_MULTI_WRITER),
    ]
)
