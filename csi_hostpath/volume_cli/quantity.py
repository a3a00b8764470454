"""Sizes on the command line: Kubernetes quantities (core/quantity.py parses them: "1Gi",
"500M", "1.5Gi", "1e9"), more than 0 bytes; and bytes back to a short figure for people."""

from __future__ import annotations

from csi_hostpath.core.quantity import QuantityError, parse_bytes

__all__ = ["QuantityError", "format_bytes", "parse_size"]


def parse_size(text: str) -> int:
    """Bytes for a quantity; raises QuantityError with an example of what is accepted."""
    size = parse_bytes(text.strip())
    if size <= 0:
        raise QuantityError(f"{text[:40]!r}: a size must be more than 0 bytes, like 512Mi or 1Gi")
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
