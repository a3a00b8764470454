"""core/capacity.py: what a thin pool can still promise, and the overcommit ratio."""

from __future__ import annotations

import math

import pytest

from csi_hostpath.core.capacity import check_ratio, promisable_sums, refuse_unpromisable
from csi_hostpath.core.errors import NoCapacity

GiB = 1 << 30


# promisable_sums(free, written, promised): the sums are what the volumes have written (each up to
# its size: service/controller/allocations.py counts them so) and their sizes.
def test_an_empty_pool_promises_its_free_space_less_the_reserve() -> None:
    assert promisable_sums(8 * GiB, 0, 0, reserve=0) == 8 * GiB
    assert promisable_sums(8 * GiB, 0, 0, reserve=1024) == 8 * GiB - 1024


def test_unwritten_volumes_are_subtracted_whole() -> None:
    # Two 3 GiB volumes that wrote nothing: the free space is untouched, the promise is not.
    assert promisable_sums(8 * GiB, 0, 6 * GiB, reserve=0) == 2 * GiB


def test_writing_into_a_volume_does_not_change_the_promise_at_ratio_one() -> None:
    # 1 GiB written by a 3 GiB volume: free space fell by 1 GiB and so did its room to grow.
    assert promisable_sums(7 * GiB, GiB, 3 * GiB, reserve=0) == 5 * GiB
    assert promisable_sums(8 * GiB, 0, 3 * GiB, reserve=0) == 5 * GiB


def test_ratio_scales_the_room_not_the_remainder() -> None:
    # Ratio 2: the sizes of all volumes may reach twice the room, in any order of creation.
    assert promisable_sums(10 * GiB, 0, 0, ratio=2.0, reserve=0) == 20 * GiB
    assert promisable_sums(10 * GiB, 0, 10 * GiB, ratio=2.0, reserve=0) == 10 * GiB
    assert promisable_sums(10 * GiB, 0, 20 * GiB, ratio=2.0, reserve=0) == 0
    # Ratio 0.5 keeps half the room unpromised.
    assert promisable_sums(10 * GiB, 0, 0, ratio=0.5, reserve=0) == 5 * GiB


def test_an_overcommitted_pool_promises_zero_not_a_negative() -> None:
    assert promisable_sums(GiB, 0, 10 * GiB, reserve=0) == 0
    assert promisable_sums(0, 0, 0, reserve=8 << 20) == 0


@pytest.mark.parametrize("ratio", [0.0, -1.0, math.inf, math.nan])
def test_the_ratio_must_be_finite_and_positive(ratio: float) -> None:
    with pytest.raises(ValueError, match="finite number above 0"):
        check_ratio(ratio)
    with pytest.raises(ValueError):
        promisable_sums(GiB, 0, 0, ratio=ratio)


def test_a_size_past_the_promise_is_refused_with_the_numbers() -> None:
    refuse_unpromisable(GiB, GiB, 1.0)
    # As quantities, with the exact count where the short figure rounds it.
    asked = r"can promise 1Gi more .*; 1\.0Gi \(1073741825 bytes\) was asked for"
    with pytest.raises(NoCapacity, match=asked):
        refuse_unpromisable(GiB + 1, GiB, 1.0)
