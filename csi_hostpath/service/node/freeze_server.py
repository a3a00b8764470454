"""The node's half of a freeze asked for by a controller in another process (or on another
machine): watch POOL/freeze-requests/<this node>/ for asks, freeze the volume's staging mount
with the node's own Freezes (recorded before FIFREEZE, thawed on every start, watchdog), answer,
and thaw when the controller withdraws the ask, stops renewing it, or its timeout passes.

Every freeze has a thaw that survives kill -9 of either side:
- the controller dies: its renewals stop, and the node thaws after the ask's silence window
  (or at the latest after the ask's timeout, or the node's own --max-freeze-seconds watchdog);
- the node dies: the kernel keeps the filesystem frozen (the copy stays consistent) until the
  plugin restarts; the restart first marks every "frozen" answer "broken" (so the controller
  refuses its copy), then thaws what its freeze records name (Freezes.thaw_recorded).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from csi_hostpath.core.errors import Busy, FreezeTimedOut
from csi_hostpath.core.model import AccessType
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.freeze import Freezes
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.store.freeze_channel import FreezeChannel

POLL_SECONDS = 0.1


class FreezeServer:
    def __init__(self, ctx: NodeContext, freezes: Freezes) -> None:
        self.node_id = ctx.node_id
        self.store = ctx.store
        self.system = ctx.system
        self.channel = FreezeChannel(ctx.layout.root)  # asks come through the pool
        self.freezes = freezes
        self.inflight = ctx.inflight
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._serving: dict[str, str] = {}  # volume ID -> request id being served

    # ----- at start, before any thaw -----
    def break_previous(self) -> None:
        """Mark every answer a previous incarnation left "frozen" as broken. Called before the
        start's thaw, so a controller still copying can never read "frozen" after that thaw."""
        for volume_id, answer in self.channel.answers(self.node_id):
            if answer.get("state") == "frozen":
                self.channel.answer(
                    self.node_id,
                    volume_id,
                    {**answer, "state": "broken", "reason": "the node plugin restarted and thawed"},
                )
                log.warning(
                    "freeze of %s asked by the controller was broken by this restart; its copy "
                    "will be refused and retried",
                    volume_id,
                )

    # ----- the watcher -----
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="freeze-asks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self.poll()
            except Exception:
                log.exception("reading freeze requests failed; trying again")

    def poll(self) -> None:
        asks = dict(self.channel.asks(self.node_id))
        for volume_id, _ in self.channel.answers(self.node_id):
            with self._lock:
                busy = volume_id in self._serving
            if volume_id not in asks and not busy:
                self.channel.clear_answer(self.node_id, volume_id)  # withdrawn: done with
        for volume_id, ask in asks.items():
            request_id = str(ask.get("request_id", ""))
            answered = self.channel.answer_of(self.node_id, volume_id)
            if not request_id or (answered and answered.get("request_id") == request_id):
                continue  # served already (perhaps by a previous incarnation): never twice
            with self._lock:
                if volume_id in self._serving:
                    continue
                self._serving[volume_id] = request_id
            threading.Thread(
                target=self._serve, args=(volume_id, ask), daemon=True,
                name=f"freeze-{volume_id[:8]}",
            ).start()  # fmt: skip

    # ----- one request -----
    def _answer(self, volume_id: str, request_id: str, state: str, **extra: Any) -> None:
        body = {"request_id": request_id, "state": state, "at": time.time(), **extra}
        self.channel.answer(self.node_id, volume_id, body)

    def _serve(self, volume_id: str, ask: dict[str, Any]) -> None:
        request_id = str(ask["request_id"])
        try:
            self._serve_one(volume_id, ask, request_id)
        except Exception as e:
            log.exception("serving the freeze of %s failed", volume_id)
            try:
                self._answer(volume_id, request_id, "failed", reason=f"{type(e).__name__}: {e}")
            except OSError:
                log.exception("answering the controller about %s failed", volume_id)
        finally:
            with self._lock:
                self._serving.pop(volume_id, None)

    def _serve_one(self, volume_id: str, ask: dict[str, Any], request_id: str) -> None:
        staged = self.store.get_staging(volume_id)
        if (
            staged is None
            or staged.access_type != AccessType.MOUNT
            or self.system.mounts.find(staged.staging_path) is None
        ):
            self._answer(volume_id, request_id, "not-staged")
            return
        timeout = float(ask.get("timeout_seconds", self.freezes.max_seconds))
        silence = float(ask.get("silence_seconds", 5.0))
        freeze_id = uuid.uuid4().hex

        def broke(reason: str) -> None:
            self._answer(volume_id, request_id, "expired", freeze_id=freeze_id, reason=reason)

        try:
            with (
                self.inflight.hold(volume_id, "snapshot freeze (asked by the controller)"),
                self.freezes.hold(
                    volume_id,
                    staged.staging_path,
                    on_expire=lambda: broke("the node's freeze watchdog thawed it"),
                ),
            ):
                self._answer(volume_id, request_id, "frozen", freeze_id=freeze_id)
                log.info("froze %s for the controller's copy (request %s)", volume_id, request_id)
                reason = self._hold(volume_id, request_id, timeout, silence)
                if reason:
                    # Said before the thaw, so the controller never takes a later copy as whole.
                    broke(reason)
                    log.warning("thawing %s on my own: %s", volume_id, reason)
        except Busy as e:
            self._answer(volume_id, request_id, "failed", reason=str(e))
            return
        except FreezeTimedOut:
            return  # the watchdog thawed it and said so first
        log.info("thawed %s after the controller's copy", volume_id)

    def _hold(self, volume_id: str, request_id: str, timeout: float, silence: float) -> str:
        """Wait while the controller copies; '' when it withdrew the ask, else why we stop."""
        started = last_change = time.monotonic()
        renewed: Any = None
        while not self._stop.wait(POLL_SECONDS / 2):
            ask = self.channel.ask_of(self.node_id, volume_id)
            if ask is None or ask.get("request_id") != request_id:
                return ""
            now = time.monotonic()
            if ask.get("renewed") != renewed:
                renewed, last_change = ask.get("renewed"), now
            if now - last_change > silence:
                return f"the controller stopped renewing its request for {silence:g}s"
            if now - started > timeout:
                return f"the request's timeout of {timeout:g}s passed"
        return "the node plugin is stopping"
