"""Byte ranges for changed-block tracking: align, merge, subtract, and page them. Pure.

A range is (offset, length) with length > 0. Lists are sorted and never overlap."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

Range = tuple[int, int]
BLOCK = 4096


def align(ranges: Iterable[Range], block: int = BLOCK, limit: int | None = None) -> list[Range]:
    """Round each range out to whole blocks (clipped at `limit`), then merge."""
    out = []
    for offset, length in ranges:
        start = offset - offset % block
        end = -(-(offset + length) // block) * block
        if limit is not None:
            end = min(end, limit)
        if end > start:
            out.append((start, end - start))
    return merge(out)


def merge(ranges: Iterable[Range]) -> list[Range]:
    """Sorted, with touching or overlapping ranges joined."""
    out: list[Range] = []
    for offset, length in sorted(ranges):
        if out and offset <= out[-1][0] + out[-1][1]:
            last_offset, last_length = out[-1]
            out[-1] = (last_offset, max(last_offset + last_length, offset + length) - last_offset)
        else:
            out.append((offset, length))
    return out


def subtract(ranges: Iterable[Range], holes: Iterable[Range]) -> list[Range]:
    """`ranges` without the bytes that `holes` cover (both sorted, merged)."""
    cut = merge(holes)
    out: list[Range] = []
    for offset, length in merge(ranges):
        start, end = offset, offset + length
        for h_offset, h_length in cut:
            h_end = h_offset + h_length
            if h_end <= start or h_offset >= end:
                continue
            if h_offset > start:
                out.append((start, h_offset - start))
            start = max(start, h_end)
            if start >= end:
                break
        if start < end:
            out.append((start, end - start))
    return out


def from_offset(ranges: Iterable[Range], starting_offset: int) -> Iterator[Range]:
    """The ranges that do not end at or before `starting_offset` (the spec's resume rule: the
    first tuple may straddle it)."""
    for offset, length in ranges:
        if offset + length > starting_offset:
            yield offset, length


def pages(ranges: Iterable[Range], max_results: int) -> Iterator[list[Range]]:
    """Groups of at most `max_results` ranges, in order."""
    page: list[Range] = []
    for item in ranges:
        page.append(item)
        if len(page) >= max_results:
            yield page
            page = []
    if page:
        yield page
