"""Simulated time, and the exponential backoff the components retry with."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SimClock:
    now: float = 0.0


@dataclass
class Backoff:
    """Per-key exponential backoff in simulated time.

    Two upstream shapes use it: the kubelet's and the attach-detach controller's operations
    (pkg/util/goroutinemap/exponentialbackoff: 500 ms, doubling, up to about 2 minutes) and the
    sidecars' rate-limited workqueues (--retry-interval-start 1 s, doubling, up to
    --retry-interval-max 5 minutes)."""

    initial: float
    cap: float
    _next: dict[str, float] = field(default_factory=dict)
    _delay: dict[str, float] = field(default_factory=dict)

    def allowed(self, key: str, now: float) -> bool:
        return now >= self._next.get(key, 0.0)

    def failed(self, key: str, now: float) -> float:
        delay = min(self._delay.get(key, self.initial / 2) * 2, self.cap)
        self._delay[key] = delay
        self._next[key] = now + delay
        return delay

    def forget(self, key: str) -> None:
        self._next.pop(key, None)
        self._delay.pop(key, None)


def operation_backoff() -> Backoff:
    return Backoff(initial=0.5, cap=122.0)


def workqueue_backoff() -> Backoff:
    return Backoff(initial=1.0, cap=300.0)
