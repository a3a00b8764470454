"""ReentrantFreeze: each freeze it holds, in order and let go in reverse, once per thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from csi_hostpath.service.controller.reentrant_freeze import ReentrantFreeze


def recording(
    name: str, events: list[str], fail: bool = False
) -> Callable[[str], AbstractContextManager[None]]:
    @contextmanager
    def freeze(volume_id: str) -> Iterator[None]:
        if fail:
            raise RuntimeError(f"{name} can't freeze {volume_id}")
        events.append(f"{name} froze {volume_id}")
        try:
            yield
        finally:
            events.append(f"{name} thawed {volume_id}")

    return freeze


def test_the_own_node_then_the_others_and_thawed_in_reverse() -> None:
    events: list[str] = []
    freeze = ReentrantFreeze(recording("node", events), recording("remote", events))
    # A group's member cut asks again inside the group's freeze: nothing more is frozen.
    with freeze("v1"), freeze("v1"):
        events.append("copy")
    assert events == [
        "node froze v1",
        "remote froze v1",
        "copy",
        "remote thawed v1",
        "node thawed v1",
    ]


def test_a_freeze_that_fails_lets_go_of_those_held_before_it() -> None:
    events: list[str] = []
    freeze = ReentrantFreeze(recording("node", events), recording("remote", events, fail=True))
    with pytest.raises(RuntimeError, match="remote can't freeze v1"), freeze("v1"):
        events.append("copy")
    assert events == ["node froze v1", "node thawed v1"]
    # Nothing is left marked held: the next ask freezes again, and fails again.
    with pytest.raises(RuntimeError), freeze("v1"):
        pass
    assert events[2:] == ["node froze v1", "node thawed v1"]
