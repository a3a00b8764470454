"""csi-sanity's configuration and the names it generates: its default test sizes and parameters,
the unique suffix of every name in a run, and IDs in a form a driver might accept but never
issued. Written from what csi-sanity's sources show (docs/conformance.md says which)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

GiB = 1 << 30


# csi-sanity's MaxNameLength: the longest name the suite asks a driver to accept (the CSI spec
# says a plugin SHOULD support names of at least 128 characters).
MAX_NAME_LENGTH = 128

# The one unique suffix csi-sanity appends to every name in a run, so that two runs against one
# long-lived driver never collide: "-" and 16 random hex digits in two groups.
_UNIQUE_SUFFIX = f"-{secrets.token_hex(4).upper()}-{secrets.token_hex(4).upper()}"


def unique(prefix: str) -> str:
    return prefix + _UNIQUE_SUFFIX


def unique_with_length(prefix: str, length: int) -> str:
    """A unique name of exactly `length` characters (for the maximum-length-name cases)."""
    name = unique(prefix)
    if len(name) >= length:
        return name[len(name) - length :]
    return name + "x" * (length - len(name))


# csi-sanity's DefaultIDGenerator: IDs in the *form* a driver might accept but that it never
# issued. This driver's IDs are "vol-<32 hex>", so these are simply unknown (NOT_FOUND) to it.
def valid_volume_id() -> str:
    return "fake-vol-id-" + secrets.token_hex(5)


def invalid_volume_id() -> str:
    return "fake-vol-id"


def valid_node_id() -> str:
    return "fake-node-id-" + secrets.token_hex(5)


@dataclass(frozen=True)
class SanityConfig:
    """csi-sanity's defaults (sanity.NewTestConfig and the csi-sanity command's flags)."""

    test_volume_size: int = 10 * GiB  # --csi.testvolumesize
    test_volume_expand_size: int = 0  # --csi.testvolumeexpandsize; 0: size + 1 GiB
    test_volume_access_type: str = "mount"  # --csi.testvolumeaccesstype
    test_volume_parameters: dict[str, str] = field(default_factory=dict)
    test_volume_mutable_parameters: dict[str, str] = field(default_factory=dict)
    test_snapshot_parameters: dict[str, str] = field(default_factory=dict)
    idempotent_count: int = 10  # how often the "should be idempotent" cases repeat each call
    test_node_volume_attach_limit: bool = False  # --csi.testnodevolumeattachlimit

    def expand_size(self) -> int:
        if self.test_volume_expand_size > 0:
            return self.test_volume_expand_size
        return self.test_volume_size + 1 * GiB
