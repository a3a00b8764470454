"""Freeze requests between a controller and a node plugin, as small files in the pool, beside the
leases and heartbeats they already share (store/pool_layout.py):
POOL/freeze-requests/<node-key>/.

- `<volume>.ask.json`, written by the controller: "freeze this volume for my copy". It carries a
  request id, the longest the node may hold the freeze, and a renewal counter the controller
  bumps while it copies; the node thaws when the ask is withdrawn (removed), when the counter
  stops moving (the controller died), or when the time is up, whichever comes first.
- `<volume>.answer.json`, written by the node: the state of that request ("frozen" with the id
  of this freeze, "not-staged", "failed", "expired", "broken"). The controller accepts its copy
  only if the answer still says "frozen", under the same freeze id, after the copy: the node
  writes "expired" or "broken" before it thaws, so a copy that outlived the freeze is refused.

Each file is replaced atomically, so a reader sees a whole old or a whole new body.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from csi_hostpath.core.naming import is_volume_id, node_key
from csi_hostpath.store.pool_layout import write_atomically

ASK = ".ask.json"
ANSWER = ".answer.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class FreezeChannel:
    def __init__(self, pool_root: Path) -> None:
        self.root = pool_root / "freeze-requests"

    def _dir(self, node_id: str) -> Path:
        return self.root / node_key(node_id)

    def _file(self, node_id: str, volume_id: str, suffix: str) -> Path:
        if not is_volume_id(volume_id):
            raise ValueError(f"not a volume ID: {volume_id!r}")
        return self._dir(node_id) / f"{volume_id}{suffix}"

    def _write(self, path: Path, body: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Not fsynced: both sides are alive while these matter; after a crash a lost ask reads
        # as withdrawn (thaw), and a lost answer as "no answer" (the controller refuses its copy).
        write_atomically(path, json.dumps(body, sort_keys=True).encode(), durable=False)

    # ----- the controller's side -----
    def ask(self, node_id: str, volume_id: str, body: dict[str, Any]) -> None:
        self._write(self._file(node_id, volume_id, ASK), body)

    def withdraw(self, node_id: str, volume_id: str) -> None:
        self._file(node_id, volume_id, ASK).unlink(missing_ok=True)

    def withdraw_all(self) -> int:
        """A starting controller has no copy in flight: every ask left is a dead one's."""
        count = 0
        for path in self.root.glob(f"*/*{ASK}"):
            path.unlink(missing_ok=True)
            count += 1
        return count

    def answer_of(self, node_id: str, volume_id: str) -> dict[str, Any] | None:
        return _read(self._file(node_id, volume_id, ANSWER))

    # ----- the node's side -----
    def _listing(self, node_id: str, suffix: str) -> list[tuple[str, dict[str, Any]]]:
        found = []
        for path in sorted(self._dir(node_id).glob(f"*{suffix}")):
            volume_id = path.name.removesuffix(suffix)
            body = _read(path) if is_volume_id(volume_id) else None
            if body is not None:
                found.append((volume_id, body))
        return found

    def asks(self, node_id: str) -> list[tuple[str, dict[str, Any]]]:
        return self._listing(node_id, ASK)

    def ask_of(self, node_id: str, volume_id: str) -> dict[str, Any] | None:
        return _read(self._file(node_id, volume_id, ASK))

    def answer(self, node_id: str, volume_id: str, body: dict[str, Any]) -> None:
        self._write(self._file(node_id, volume_id, ANSWER), body)

    def answers(self, node_id: str) -> list[tuple[str, dict[str, Any]]]:
        return self._listing(node_id, ANSWER)

    def clear_answer(self, node_id: str, volume_id: str) -> None:
        self._file(node_id, volume_id, ANSWER).unlink(missing_ok=True)
