"""A volume's freeze (its filesystem frozen: the copy's consistency point), re-entrant within
one thread.

A group snapshot freezes every member first and then cuts each member with the ordinary
CreateSnapshot path, which asks for the same freeze again; FIFREEZE on a frozen filesystem is
EBUSY, so the inner request must be a no-op. The outermost holder thaws.

A volume may be mounted on this process's own node (frozen in-process) and on other nodes
(frozen through the pool, remote_freeze.py): the freeze holds each of them, in the order given,
and lets them go in the reverse order."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager

Freeze = Callable[[str], AbstractContextManager[None]]


class ReentrantFreeze:
    def __init__(self, *freezes: Freeze) -> None:
        self._freezes = freezes
        self._local = threading.local()

    def _held(self) -> set[str]:
        held: set[str] | None = getattr(self._local, "held", None)
        if held is None:
            held = set()
            self._local.held = held
        return held

    @contextmanager
    def __call__(self, volume_id: str) -> Iterator[None]:
        held = self._held()
        if volume_id in held:
            yield
            return
        with ExitStack() as stack:
            for freeze in self._freezes:
                stack.enter_context(freeze(volume_id))
            held.add(volume_id)
            try:
                yield
            finally:
                held.discard(volume_id)
