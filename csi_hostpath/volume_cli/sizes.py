"""Sizes on the command line: Kubernetes quantities (core/quantity.py parses them: "1Gi",
"500M", "1.5Gi", "1e9"), a whole number of bytes more than 0; and bytes back to a short figure
for people."""

from __future__ import annotations

from csi_hostpath.core import quantity
from csi_hostpath.core.quantity import QuantityError, describe_bytes, parse_bytes, parse_quantity

__all__ = ["QuantityError", "describe_bytes", "format_bytes", "parse_size"]


_LARGE_UNITS = ("k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def parse_size(text: str) -> int:
    """Bytes for a quantity; raises QuantityError with an example of what is accepted. A
    fraction of a unit of at least a kilobyte (1.6Gi) is rounded up to a whole byte, as
    Kubernetes rounds it; a fraction of a byte written without one ("100m" is a tenth of a byte:
    m is milli; "1.5") is refused: it is nearly always a unit mistyped or left out."""
    text = text.strip()
    exact = parse_quantity(text)
    if exact > 0 and exact.denominator != 1 and not text.endswith(_LARGE_UNITS):
        number = text.removesuffix("m")
        hint = (
            f"; did you mean {number}Mi? (m is milli, a thousandth; Mi is mebibytes, M megabytes)"
            if text.endswith("m")
            else "; give whole bytes, or a unit: 512Mi, 1.6Gi"
        )
        raise QuantityError(
            f"{text[:40]!r} is {float(exact):g} bytes, not a whole number of bytes{hint}"
        )
    size = parse_bytes(text)
    if size <= 0:
        raise QuantityError(f"{text[:40]!r}: a size must be more than 0 bytes, like 512Mi or 1Gi")
    return size


def format_bytes(n: int | None) -> str:
    """core/quantity.py's short figure; "-" for an unknown size."""
    return "-" if n is None else quantity.format_bytes(n)
