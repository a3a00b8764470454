"""Mutable parameters (VolumeAttributesClass): which keys exist, what values they take, and how a
change merges into what a volume already has. Pure: the node applies them, the store keeps them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from csi_hostpath.core.errors import InvalidRequest

# The parameter names a VolumeAttributesClass uses, and the field each one sets.
KEY_FIELDS: dict[str, str] = {
    "readAheadKiB": "read_ahead_kib",
    "directIO": "direct_io",
    "readIOPS": "read_iops",
    "writeIOPS": "write_iops",
    "readBytesPerSecond": "read_bps",
    "writeBytesPerSecond": "write_bps",
}
# Read-ahead above 64 MiB only wastes page cache; the kernel takes more, but nobody means it.
MAX_READ_AHEAD_KIB = 65536
LIMIT_FIELDS = ("read_iops", "write_iops", "read_bps", "write_bps")


@dataclass(frozen=True)
class Tuning:
    """What a volume's mutable parameters ask of its node. None: not asked (the kernel's default);
    a limit of 0: unlimited (how a class lifts a limit it once set)."""

    read_ahead_kib: int | None = None
    direct_io: bool | None = None
    read_iops: int | None = None
    write_iops: int | None = None
    read_bps: int | None = None
    write_bps: int | None = None

    def merged(self, change: Tuning) -> Tuning:
        """This tuning with every field that `change` sets replaced: a modify names only what
        it changes, so the rest stays."""
        updates = {f.name: getattr(change, f.name) for f in fields(change)}
        return replace(self, **{k: v for k, v in updates.items() if v is not None})

    def limits(self) -> dict[str, int]:
        """The I/O limits, 0 for unlimited, for every limit field."""
        return {name: getattr(self, name) or 0 for name in LIMIT_FIELDS}

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tuning:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def as_parameters(self) -> dict[str, str]:
        """Back to VolumeAttributesClass parameters (for inspect and logs)."""
        out: dict[str, str] = {}
        for key, name in KEY_FIELDS.items():
            value = getattr(self, name)
            if value is not None:
                out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out


def _whole_number(key: str, text: str) -> int:
    value = text.strip()
    if not value.isdigit() or len(value) > 18:
        raise InvalidRequest(
            f"mutable parameter {key}={text!r}: expected a whole number of at most 18 digits"
            " (0 lifts a limit)"
        )
    return int(value)


def _flag(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "on", "1"):
        return True
    if value in ("false", "off", "0"):
        return False
    raise InvalidRequest(f"mutable parameter {key}={text!r}: expected true or false")


def parse_mutable(parameters: Mapping[str, str]) -> Tuning:
    """The tuning that a VolumeAttributesClass's parameters ask for. An unknown key is refused
    (INVALID_ARGUMENT), naming the keys this driver knows, as the CSI spec asks."""
    unknown = sorted(set(parameters) - set(KEY_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"unknown mutable parameter(s) {', '.join(unknown)}; this driver knows "
            f"{', '.join(KEY_FIELDS)}"
        )
    values: dict[str, Any] = {}
    for key, text in parameters.items():
        name = KEY_FIELDS[key]
        if name == "direct_io":
            values[name] = _flag(key, text)
        else:
            values[name] = _whole_number(key, text)
    read_ahead = values.get("read_ahead_kib")
    if read_ahead is not None and read_ahead > MAX_READ_AHEAD_KIB:
        raise InvalidRequest(
            f"mutable parameter readAheadKiB={read_ahead}: at most {MAX_READ_AHEAD_KIB}"
        )
    return Tuning(**values)
