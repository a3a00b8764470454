"""The controller's half of a freeze on another node (the chart's shape: the controller runs
apart from the node plugin that mounts the volume, so it can't FIFREEZE the filesystem itself).

Around its copy of a volume's backing file the controller asks every node the lease names (other
than a node served by its own process, which freezes in-process) to freeze the volume, waits for
"frozen", keeps the ask alive while it copies, and withdraws it after. The node thaws on its own
when the ask is withdrawn, when the controller stops renewing it (kill -9), or after the ask's
timeout (store/freeze_channel.py; the node's half is service/node/freeze_server.py).

The copy counts as consistent only if the node still answers "frozen", with the same freeze id,
once the copy is done. A node that holds the volume but is silent, or does not answer in time,
fails the snapshot ABORTED: the CO retries, and a crash-consistent copy is never passed off as
a consistent one.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from csi_hostpath.core.errors import Busy, FreezeTimedOut
from csi_hostpath.service.controller._log import log
from csi_hostpath.service.controller.controller_context import ControllerContext
from csi_hostpath.store.freeze_channel import FreezeChannel

# For crash tests only (the same hook as the node's own freeze, service/node/freeze.py): hold
# every remote freeze this many seconds once the node says "frozen".
TEST_HOLD_ENV = "CSI_HOSTPATH_TEST_HOLD_FROZEN_SECONDS"


@dataclass(frozen=True, slots=True)
class Timing:
    renew_seconds: float = 0.5  # how often the controller proves it is alive
    silence_seconds: float = 5.0  # the node thaws when the renewals stop this long
    answer_seconds: float = 10.0  # how long the controller waits for "frozen"
    poll_seconds: float = 0.05


class RemoteFreeze:
    def __init__(
        self, ctx: ControllerContext, channel: FreezeChannel, timing: Timing = Timing()
    ) -> None:
        self.layout = ctx.layout
        self.channel = channel
        self.own_node = ctx.own_node
        self.node_grace = ctx.node_grace
        self.max_seconds = ctx.max_freeze_seconds
        self.timing = timing

    def withdraw_left_over(self) -> None:
        """Withdraw every ask a previous controller left: a starting controller has no copy in
        flight, and a node keeps a volume frozen while an ask stands."""
        dropped = self.channel.withdraw_all()
        if dropped:
            log.warning("repair: withdrew %d freeze request(s) a previous controller left", dropped)

    def nodes_for(self, volume_id: str) -> list[str]:
        """The nodes that may have the volume mounted: the lease's holders (the ledger's word),
        without the node this process serves itself."""
        lease = self.layout.read_lease(volume_id)
        if lease is None:
            return []
        return sorted(n for n in lease.holders if n != self.own_node)

    @contextmanager
    def __call__(self, volume_id: str) -> Iterator[None]:
        with ExitStack() as stack:
            for node_id in self.nodes_for(volume_id):
                stack.enter_context(self._one(node_id, volume_id))
            pause = float(os.environ.get(TEST_HOLD_ENV, "0") or 0)
            if pause > 0 and self.nodes_for(volume_id):
                log.warning("test hook: holding %s frozen remotely for %.0fs", volume_id, pause)
                time.sleep(pause)
            yield

    @contextmanager
    def _one(self, node_id: str, volume_id: str) -> Iterator[None]:
        beat = self.layout.node_record(node_id)  # the record alone: when it last beat
        if beat is None or beat.age() > self.node_grace:
            raise Busy(
                f"volume {volume_id} is held by node {node_id!r}, whose plugin has been silent "
                f"for more than {self.node_grace:g}s (--node-grace): it can't freeze the "
                "filesystem for a consistent copy; retry once the plugin is back, or after the "
                "volume is detached from that node"
            )
        request_id = uuid.uuid4().hex
        body: dict[str, Any] = {
            "request_id": request_id,
            "volume_id": volume_id,
            "node_id": node_id,
            "timeout_seconds": self.max_seconds,
            "silence_seconds": self.timing.silence_seconds,
            "renewed": 0,
            "at": time.time(),
        }
        self.channel.ask(node_id, volume_id, body)
        done = threading.Event()
        renewer = threading.Thread(
            target=self._renew, args=(node_id, volume_id, body, done), daemon=True,
            name=f"freeze-renew-{volume_id[:8]}",
        )  # fmt: skip
        try:
            first = self._await_answer(node_id, volume_id, request_id)
            state = first.get("state")
            if state == "not-staged":
                # Nothing of the volume is mounted there: nothing on that node can write to it.
                log.info("freeze of %s: node %s has it not mounted", volume_id, node_id)
                yield
                return
            if state != "frozen":
                raise Busy(
                    f"node {node_id!r} could not freeze volume {volume_id} for the copy: "
                    f"{first.get('reason') or state}; retry"
                )
            freeze_id = first.get("freeze_id")
            log.info("node %s froze %s for the copy (freeze %s)", node_id, volume_id, freeze_id)
            renewer.start()
            yield
            # Still frozen, under the same freeze, now that the copy is complete? The node
            # writes "expired" or "broken" before it thaws, so "frozen" here means no write
            # reached the filesystem while the copy ran.
            last = self.channel.answer_of(node_id, volume_id) or {}
            if (
                last.get("request_id") != request_id
                or last.get("freeze_id") != freeze_id
                or last.get("state") != "frozen"
            ):
                raise FreezeTimedOut(
                    f"node {node_id!r} thawed volume {volume_id} before the copy was complete "
                    f"({last.get('reason') or last.get('state') or 'no answer'}), so the copy is "
                    "not consistent; retry"
                )
        finally:
            done.set()
            if renewer.is_alive():
                renewer.join(timeout=5)
            self.channel.withdraw(node_id, volume_id)

    def _await_answer(self, node_id: str, volume_id: str, request_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timing.answer_seconds
        while True:
            answer = self.channel.answer_of(node_id, volume_id)
            if answer is not None and answer.get("request_id") == request_id:
                return answer
            if time.monotonic() > deadline:
                raise Busy(
                    f"node {node_id!r} did not answer the request to freeze volume {volume_id} "
                    f"within {self.timing.answer_seconds:g}s; retry"
                )
            time.sleep(self.timing.poll_seconds)

    def _renew(
        self, node_id: str, volume_id: str, body: dict[str, Any], done: threading.Event
    ) -> None:
        while not done.wait(self.timing.renew_seconds):
            body["renewed"] = int(body["renewed"]) + 1
            try:
                self.channel.ask(node_id, volume_id, body)
            except OSError:
                log.exception("renewing the freeze of %s on %s failed", volume_id, node_id)
