"""Kubernetes quantities parsed as ParseQuantity does, rounded up to whole bytes.

Kubernetes quantities (k8s.io/apimachinery/pkg/api/resource/quantity.go, ParseQuantity):
decimal suffixes k M G T P E (and m), binary Ki..Ei, decimals, exponents e/E, a sign; sizes
round up to whole bytes as Quantity.Value() does."""

from __future__ import annotations

from fractions import Fraction

import pytest

from csi_hostpath.core.errors import InvalidRequest
from csi_hostpath.core.sizes import MAX_BYTES, describe_bytes
from csi_hostpath.service.node.inline import inline_size

KiB, MiB, GiB, TiB, PiB, EiB = (1 << (10 * n) for n in range(1, 7))


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("5000000", 5_000_000),
        ("100k", 100_000),  # refused before: the decimal kilo is a lower-case k
        ("1.5Gi", 3 * GiB // 2),  # refused before: decimals
        ("1Pi", PiB),  # refused before: Pi and Ei
        ("1Ei", EiB),
        ("2Ki", 2 * KiB),
        ("100Mi", 100 * MiB),
        ("1Gi", GiB),
        ("3Ti", 3 * TiB),
        ("1M", 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),  # E alone is exa; with digits after it, an exponent
        ("1e3", 1000),
        ("1E3", 1000),
        ("1.5e3", 1500),
        ("12e+2", 1200),
        ("+1Gi", GiB),
        ("0.5Ki", 512),
        (".5Ki", 512),
        ("1.", 1),
        ("1.0000001", 2),  # whole bytes, rounded up as Quantity.Value() does
        ("1500m", 2),  # milli: 1.5 bytes rounds up to 2
        ("0", 0),
    ],
)
def test_kubernetes_quantities(text: str, size: int) -> None:
    assert inline_size(text) == size


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1Gi",  # Kubernetes takes no blanks
        "1Gi ",
        "1 Gi",
        "100K",  # not a Kubernetes suffix (k is decimal kilo)
        "1GB",
        "1gi",
        "Gi",
        "1e",
        "1e3Gi",  # an exponent and a suffix: one or the other
        "1.2.3",
        ".",
        "-1Gi",  # a size can't be negative
        "-0.5",
        "0x10",
        "1_000",
        "\u0661\u0660\u0660",  # Arabic-Indic digits: str.isdigit() says yes, Kubernetes says no
        "nan",
        "inf",
        "1e99999999999",  # would be a number with a hundred billion digits
        "9" * 5000,  # 5,000 digits: refused on its length, before any arithmetic
        "16Ei",  # over the int64 a CSI capacity is
    ],
)
def test_junk_is_refused_with_a_message(text: str) -> None:
    with pytest.raises(InvalidRequest, match="quantity"):
        inline_size(text)


def test_a_huge_number_is_refused_quickly() -> None:
    import time

    start = time.perf_counter()
    for text in ("9" * 5000, "1e" + "9" * 40, "0." + "0" * 40 + "1e45"):
        with pytest.raises(InvalidRequest):
            inline_size(text)
    assert time.perf_counter() - start < 0.1


def test_the_exact_value_keeps_sign_and_fraction() -> None:
    from csi_hostpath.core.sizes import parse_quantity

    assert parse_quantity("-1.5Ki") == Fraction(-1536)
    assert parse_quantity("100m") == Fraction(1, 10)
    assert parse_quantity("1e-3") == Fraction(1, 1000)


def test_a_size_that_rounds_past_the_largest_is_still_described() -> None:
    """Near the int64 limit the short figure rounds up beyond it: the message keeps the exact count
    instead of failing (ControllerExpandVolume answered INTERNAL for such a request)."""
    n = 9165725961657778177
    assert describe_bytes(n) == f"8.0Ei ({n} bytes)"
    assert describe_bytes(MAX_BYTES).endswith(f"Ei ({MAX_BYTES} bytes)")
