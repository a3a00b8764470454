"""Sizes as Kubernetes quantities ("1Gi", "500M", "1.5Gi", "1e9"), to bytes and back.

A stopgap until core/quantity.py lands on main (another change adds it); then this module
re-exports that one's parse_bytes. Follows k8s.io/apimachinery pkg/api/resource/quantity.go
(ParseQuantity): binary suffixes Ki..Ei, decimal k/M/G/T/P/E, decimal exponents; a fractional
byte count rounds up, as a volume request does."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(r"([+]?[0-9]*\.?[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|K|M|G|T|P|E|[eE][+-]?[0-9]+)?")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# "K" is not a Kubernetes suffix, but people write it; it means what "k" means.
_DECIMAL = {"k": 3, "K": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


class QuantityError(ValueError):
    pass


def parse_bytes(text: str) -> int:
    """Bytes for a quantity; raises QuantityError with an example of what is accepted."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise QuantityError(f"{text[:40]!r} is not a size: use a quantity like 512Mi, 1Gi or 10G")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as e:  # pragma: no cover - the pattern admits only decimals
        raise QuantityError(f"{text[:40]!r} is not a number") from e
    suffix = match.group(2) or ""
    if suffix in _BINARY:
        value = number * (1 << _BINARY[suffix])
    elif suffix in _DECIMAL:
        value = number * (Decimal(10) ** _DECIMAL[suffix])
    elif suffix:
        value = number * (Decimal(10) ** int(suffix[1:]))
    else:
        value = number
    result = math.ceil(value)
    if result <= 0:
        raise QuantityError(f"{text[:40]!r}: a size must be more than 0 bytes")
    return result


def format_bytes(n: int | None) -> str:
    """The largest binary unit that keeps the figure >= 1, one decimal unless whole."""
    if n is None:
        return "-"
    for unit, shift in (("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{n}B"
