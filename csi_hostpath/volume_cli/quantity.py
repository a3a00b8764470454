"""Sizes as Kubernetes quantities ("1Gi", "500M", "1.5Gi", "1e9"), to bytes and back. Parsing is
core/quantity.py's (Kubernetes' grammar); this adds what a volume's size must be: more than 0."""

from __future__ import annotations

from csi_hostpath.core.quantity import QuantityError
from csi_hostpath.core.quantity import parse_bytes as _parse_bytes

__all__ = ["QuantityError", "format_bytes", "parse_bytes"]


def parse_bytes(text: str) -> int:
    """Bytes for a quantity; raises QuantityError with an example of what is accepted."""
    size = _parse_bytes(text)
    if size <= 0:
        raise QuantityError(f"{text[:40]!r}: a size must be more than 0 bytes")
    return size


def format_bytes(n: int | None) -> str:
    """The largest binary unit that keeps the figure >= 1, one decimal unless whole."""
    if n is None:
        return "-"
    for unit, shift in (("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{n}B"
