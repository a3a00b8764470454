"""The mutable parameters' grammar and merge rule (core/mutable.py): pure, no root."""

from __future__ import annotations

import pytest

from csi_hostpath.core.errors import InvalidRequest
from csi_hostpath.core.mutable import Tuning, parse_mutable


def test_every_key_parses() -> None:
    tuning = parse_mutable(
        {
            "readAheadKiB": "256",
            "directIO": "true",
            "readIOPS": "100",
            "writeIOPS": "50",
            "readBytesPerSecond": "4194304",
            "writeBytesPerSecond": "0",
        }
    )
    assert tuning == Tuning(256, True, 100, 50, 4194304, 0)


@pytest.mark.parametrize(
    "params",
    [
        {"readAheadKB": "256"},
        {"readAheadKiB": "-1"},
        {"readAheadKiB": "1.5"},
        {"readAheadKiB": "999999"},
        {"directIO": "maybe"},
        {"readIOPS": "9" * 40},
        {"writeBytesPerSecond": ""},
    ],
)
def test_unknown_keys_and_bad_values_are_refused(params: dict[str, str]) -> None:
    with pytest.raises(InvalidRequest):
        parse_mutable(params)


def test_unknown_key_message_names_the_known_keys() -> None:
    with pytest.raises(InvalidRequest, match="readAheadKiB"):
        parse_mutable({"iops": "1"})


def test_a_change_keeps_what_it_does_not_name() -> None:
    old = Tuning(read_ahead_kib=128, read_bps=1000)
    new = old.merged(parse_mutable({"readBytesPerSecond": "0", "directIO": "off"}))
    assert new == Tuning(read_ahead_kib=128, direct_io=False, read_bps=0)
    assert new.limits() == {"read_iops": 0, "write_iops": 0, "read_bps": 0, "write_bps": 0}


def test_json_round_trip_and_parameters() -> None:
    tuning = Tuning(read_ahead_kib=64, direct_io=True, write_iops=7)
    assert Tuning.from_json(tuning.to_json()) == tuning
    assert tuning.as_parameters() == {"readAheadKiB": "64", "directIO": "true", "writeIOPS": "7"}
    assert parse_mutable(tuning.as_parameters()) == tuning
