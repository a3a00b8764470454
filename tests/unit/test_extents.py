"""Byte-range arithmetic for changed-block tracking (core/byte_ranges.py)."""

from __future__ import annotations

from csi_hostpath.core.byte_ranges import align, from_offset, merge, pages, subtract


def test_align_rounds_out_to_blocks_and_merges() -> None:
    assert align([(512, 3000), (4096, 10)]) == [(0, 8192)]
    assert align([(8191, 2)], limit=8192 + 100) == [(4096, 4196)]


def test_merge_joins_touching_ranges() -> None:
    assert merge([(10, 5), (0, 10), (20, 1)]) == [(0, 15), (20, 1)]


def test_subtract_cuts_holes() -> None:
    assert subtract([(0, 100)], [(10, 10), (50, 60)]) == [(0, 10), (20, 30)]
    assert subtract([(0, 10)], [(0, 10)]) == []


def test_resume_keeps_a_straddling_range_and_pages_are_bounded() -> None:
    ranges = [(0, 10), (10, 10), (30, 5)]
    assert list(from_offset(ranges, 15)) == [(10, 10), (30, 5)]
    assert list(from_offset(ranges, 20)) == [(30, 5)]
    assert list(pages(ranges, 2)) == [[(0, 10), (10, 10)], [(30, 5)]]
