"""Sizes: the one parser of a size (a Kubernetes resource quantity, "100Mi", "1.5Gi", "1e3", in
volume attributes and on the command line) and the one formatter of bytes for people ("1.5Gi",
the same units, so what is printed can be typed back). Pure: no I/O.

The grammar is Kubernetes' own, from k8s.io/apimachinery/pkg/api/resource/quantity.go
(the comment above `type Quantity` and `parseQuantityString`, used by `ParseQuantity`):

    quantity      ::= signedNumber suffix
    signedNumber  ::= number | sign number          sign ::= "+" | "-"
    number        ::= digits | digits "." digits | digits "." | "." digits
    suffix        ::= binarySI | decimalExponent | decimalSI
    binarySI      ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI     ::= m | "" | k | M | G | T | P | E
    decimalExponent ::= "e" signedNumber | "E" signedNumber   (an integer exponent)

So "100K" is not a quantity (kilo is a lower-case k), "1E" is 10**18 while "1E3" is 1000, and there
are no blanks. A size is the value rounded up to a whole byte, as `Quantity.Value()` rounds.
"""

from __future__ import annotations

import re
from fractions import Fraction

# Long enough for any real size written out in full (an int64 has 19 digits); refusing longer text
# first keeps a hostile 5,000-digit "size" from costing more than a length check.
MAX_TEXT = 64
# An exponent beyond this can't give a size that fits in an int64 (or is 0 < size < 1 byte, which
# rounds up to 1); bounding it keeps 10**exponent cheap.
_MAX_EXPONENT = 40
# CSI carries capacities as int64.
MAX_BYTES = (1 << 63) - 1

_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {"m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# [0-9], not \d: \d also matches other scripts' digits, which Kubernetes refuses.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)"
    r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:[eE](?P<exp>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?)"
)


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity, or not a size this driver can hold."""


def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity, sign and fraction kept."""
    if len(text) > MAX_TEXT:
        raise QuantityError(f"{len(text)} characters is too long for a quantity like 1.5Gi")
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise QuantityError(f"{text!r} is not a quantity like 512Mi, 1.5Gi, 100k or 1e9")
    digits = match["int"] + (match["frac"] or "")
    value = Fraction(int(digits or "0"), 10 ** len(match["frac"] or ""))
    if match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"{text!r}: the exponent is out of range (|e| <= {_MAX_EXPONENT})")
        value *= Fraction(10) ** exponent
    elif match["suffix"] in _BINARY:
        value *= _BINARY[match["suffix"]]
    else:
        value *= Fraction(10) ** _DECIMAL[match["suffix"] or ""]
    return -value if match["sign"] == "-" else value


def parse_size(text: str) -> int:
    """A size in bytes from a quantity: not negative, rounded up to a whole byte, at most int64."""
    value = parse_quantity(text)
    if value < 0:
        raise QuantityError(f"{text!r}: a size can't be negative")
    size = -(-value.numerator // value.denominator)  # ceiling, exactly
    if size > MAX_BYTES:
        raise QuantityError(f"{text!r} is larger than the largest size ({MAX_BYTES} bytes)")
    return size


_UNITS = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


def format_bytes(n: int | None) -> str:
    """The largest binary unit that keeps the figure >= 1, one decimal unless whole: 1.5Gi; "-"
    for a size that is not known."""
    if n is None:
        return "-"
    for unit, shift in _UNITS:
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{n}B"


def describe_bytes(n: int) -> str:
    """A size for a message: the short figure, and the exact count when the figure rounds it:
    "1Gi", "953.7Mi (1000000000 bytes)", "512 bytes"."""
    if n < 1 << 10:
        return f"{n} byte{'' if n == 1 else 's'}"
    short = format_bytes(n)
    # The exact value, not parse_size: a figure rounded up near the int64 limit ("8.0Ei") is
    # past the largest size a request may hold, and a message must still be written for it.
    return short if parse_quantity(short) == n else f"{short} ({n} bytes)"
