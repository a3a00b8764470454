"""Loop.census on both system layers: which devices are bound and which are ours.

Loop.census on both system layers: this test's own devices count as bound and as ours, and
a device counts as bound until it is detached. The real kernel is shared with other tests, so
the real half counts its own devices exactly and the others' only within bounds."""

from __future__ import annotations

from .conftest import Env

MiB = 1 << 20


def test_census_counts_own_devices_among_the_bound(env: Env) -> None:
    loop = env.system.loop
    empty = loop.census(env.tag_prefix)
    assert empty.ours == 0
    assert 0 <= empty.bound <= empty.devices <= empty.ceiling

    one = env.attach("one", 8 * MiB)
    env.attach("two", 8 * MiB)
    both = loop.census(env.tag_prefix)
    assert both.ours == 2
    assert both.bound >= 2 and both.devices >= both.bound
    assert loop.census(env.tag("one")).ours == 1
    if not env.real:
        assert (both.devices, both.bound) == (2, 2)

    loop.detach(one)
    after = loop.census(env.tag_prefix)
    assert after.ours == 1
    if env.real:
        # The minor space (20 bits) over at most 256 minors a device (DISK_MAX_PARTS).
        assert 1 << 12 <= after.ceiling <= 1 << 20
    else:
        assert (after.devices, after.bound) == (1, 1)
