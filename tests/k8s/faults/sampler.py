"""The background sampler: while a cell, a partition case or the chaos run goes on, a thread reads
every node's mount table and the ledger again and again, and checks each round at once (at most
one node writes a single-writer volume; the ledger grants it to at most one). A check only at the
end would miss a second writer that came and went."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from tests.k8s.faults import invariants as inv
from tests.k8s.faults.observe import Observer


@dataclass
class SampleReport:
    rounds: int = 0
    # Rounds where a node's mounts, or the ledger, could not be read (a node or the API away).
    mounts_unread: int = 0
    ledger_unread: int = 0
    # Each distinct violation once, as first seen, and how many rounds showed it.
    violations: list[inv.Violation] = field(default_factory=list)
    repeats: dict[str, int] = field(default_factory=dict)
    last_error: str = ""
    # (time, volume -> {node: read-write?}) of every round whose mounts were read.
    history: list[tuple[float, dict[str, dict[str, bool]]]] = field(default_factory=list)

    def add(self, found: list[inv.Violation]) -> None:
        for v in found:
            key = f"{v.kind}: {v.detail}"
            if key not in self.repeats:
                self.violations.append(v)
            self.repeats[key] = self.repeats.get(key, 0) + 1

    def summary(self) -> str:
        return (
            f"{self.rounds} rounds ({self.mounts_unread} without mounts, "
            f"{self.ledger_unread} without the ledger), {len(self.violations)} violations"
        )


def nodes_using(
    history: list[tuple[float, dict[str, dict[str, bool]]]], volume: str, since: float, until: float
) -> set[str]:
    """Every node that had any mount of the volume in a round between since and until."""
    return {node for at, use in history if since <= at <= until for node in use.get(volume, {})}


class Sampler:
    def __init__(self, observer: Observer, interval: float = 1.0) -> None:
        self.observer = observer
        self.interval = interval
        self.report = SampleReport()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> SampleReport:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        return self.report

    def round(self) -> None:
        at = time.time()
        r = self.report
        r.rounds += 1
        try:
            mounts = self.observer.all_mounts(strict=False)
            use = self.observer.use(mounts)
            r.history.append((at, use))
            r.add(inv.double_writers(use, at))
            if len(mounts) < len(self.observer.node_names):
                r.mounts_unread += 1  # a node away (stopped): the others were still read
        except Exception as e:  # the host's sysfs unread: a round without mounts
            r.mounts_unread += 1
            r.last_error = f"mounts: {type(e).__name__}: {str(e).strip()[-200:]}"
        try:
            r.add(inv.double_holds(self.observer.holds(), at))
        except Exception as e:  # the controller pod or the API away
            r.ledger_unread += 1
            r.last_error = f"ledger: {type(e).__name__}: {str(e).strip()[-200:]}"

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.round()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))
