"""The daemons stop on SIGTERM (the kubelet's, at a pod's end) and on SIGINT alike."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType


def stop_on_signals(stop: threading.Event, log: logging.Logger, what: str) -> None:
    """SIGTERM and SIGINT set stop, and log the signal with what stopping does."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: %s", signum, what)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
