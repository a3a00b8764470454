"""A freeze is always thawed.

A snapshot or clone of a mounted volume freezes its filesystem (FIFREEZE) so the copy of the
backing file holds every acknowledged write. A frozen filesystem hangs every writer in D state,
and the kernel keeps it frozen when the process that froze it dies. So:

- the freeze is recorded (POOL/frozen/<node-key>/<volume>.json: mount point, pid, time;
  fsync'd) before FIFREEZE, and the record is removed only after the thaw; the pool, not the
  state directory, so that a restart on a lost state directory still finds it;
- every start thaws whatever is recorded as frozen, first (FITHAW's EINVAL: it wasn't frozen);
- FIFREEZE's EBUSY means "already frozen" (a previous incarnation, or an operator's fsfreeze):
  thaw, then freeze again once;
- a watchdog thaws a freeze held past --max-freeze-seconds; the copy made meanwhile is not
  consistent, so its snapshot fails ABORTED and the CO retries;
- NodeGetVolumeStats reports a volume abnormal while its freeze record exists.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from csi_hostpath.core.errors import Busy, FreezeTimedOut
from csi_hostpath.core.naming import is_volume_id
from csi_hostpath.service.node._log import log
from csi_hostpath.store.pool_layout import write_atomically
from csi_hostpath.system.base import System

# For crash tests only: hold every freeze this many seconds, so a test can kill -9 the plugin
# while a filesystem is frozen. Unset in production.
TEST_HOLD_ENV = "CSI_HOSTPATH_TEST_HOLD_FROZEN_SECONDS"


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass
class _Held:
    lock: threading.Lock = field(default_factory=threading.Lock)
    expired: bool = False
    done: bool = False


class Freezes:
    """records: where freeze records are written. The node plugin passes a directory in the pool
    (POOL/frozen/<node-key>/), which survives a lost, truncated or mistyped state directory; a
    record kept only in STATE went with it, and the restart left the filesystem frozen. Records
    an older version left in STATE/frozen are still thawed on start."""

    def __init__(
        self, state_dir: Path, system: System, max_seconds: float, records: Path | None = None
    ) -> None:
        self.dir = records or state_dir / "frozen"
        self._old_dirs = [d for d in (state_dir / "frozen",) if d != self.dir]
        self.system = system
        self.max_seconds = max_seconds

    # ----- records -----
    def _path(self, volume_id: str) -> Path:
        if not is_volume_id(volume_id):
            raise ValueError(f"not a volume ID: {volume_id!r}")
        return self.dir / f"{volume_id}.json"

    def _record(self, volume_id: str, mount_point: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        body = {"volume_id": volume_id, "mount_point": mount_point, "pid": os.getpid(),
                "at": time.time()}  # fmt: skip
        write_atomically(self._path(volume_id), json.dumps(body).encode())

    def _clear(self, volume_id: str) -> None:
        self._path(volume_id).unlink(missing_ok=True)

    def recorded(self, volume_id: str) -> dict[str, Any] | None:
        """The freeze record of a volume, if its filesystem is (or may be) frozen."""
        return _read_record(self._path(volume_id))

    # ----- the kernel steps -----
    def _thaw(self, mount_point: str) -> bool:
        """Thaw; False if it was not frozen (EINVAL) or is not mounted any more."""
        try:
            self.system.fs.thaw(mount_point)
        except OSError as e:
            if e.errno == errno.EINVAL:
                return False
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                return False  # nothing mounted there: nothing frozen there
            raise
        except ValueError:
            return False  # not a loop device's mount any more: our freeze died with it
        return True

    def _freeze(self, volume_id: str, mount_point: str) -> None:
        try:
            self.system.fs.freeze(mount_point)
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
        # Already frozen: by a previous incarnation killed mid-copy, or by an operator.
        log.warning(
            "%s (%s) is already frozen; thawing it and freezing again for the copy",
            mount_point,
            volume_id,
        )
        self._thaw(mount_point)
        try:
            self.system.fs.freeze(mount_point)
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            raise Busy(
                f"the filesystem of {volume_id} at {mount_point} is frozen again by someone "
                "else as soon as it is thawed; retry once it is released"
            ) from e

    def thaw_recorded(self) -> None:
        """At start, before anything else: thaw every filesystem a previous incarnation left
        frozen. A record stays only if its thaw fails (and is retried on the next start)."""
        paths = [p for d in (self.dir, *self._old_dirs) if d.is_dir() for p in d.glob("*.json")]
        for path in sorted(paths):
            volume_id = path.stem
            data = _read_record(path) if is_volume_id(volume_id) else None
            if data is None:
                path.unlink(missing_ok=True)
                continue
            mount_point = str(data.get("mount_point", ""))
            try:
                thawed = self._thaw(mount_point) if mount_point else False
            except Exception:
                log.exception(
                    "FROZEN FILESYSTEM: could not thaw %s (%s); its writers hang until "
                    "`fsfreeze --unfreeze %s` succeeds",
                    mount_point,
                    volume_id,
                    mount_point,
                )
                continue
            if thawed:
                log.warning(
                    "repair: thawed %s (%s), left frozen by pid %s at %s (a crash mid-snapshot)",
                    mount_point,
                    volume_id,
                    data.get("pid"),
                    time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(data.get("at", 0)))),
                )
            path.unlink(missing_ok=True)

    # ----- a freeze held for a copy -----
    @contextmanager
    def hold(
        self, volume_id: str, mount_point: str, on_expire: Callable[[], None] | None = None
    ) -> Iterator[None]:
        """Freeze for the body; on_expire runs in the watchdog before its thaw (a remote
        holder must learn that the freeze broke before any write can land)."""
        self._record(volume_id, mount_point)
        try:
            self._freeze(volume_id, mount_point)
        except BaseException:
            self._clear(volume_id)
            raise
        held = _Held()
        watchdog = threading.Timer(
            self.max_seconds, self._expire, (volume_id, mount_point, held, on_expire)
        )
        watchdog.daemon = True
        watchdog.start()
        try:
            pause = float(os.environ.get(TEST_HOLD_ENV, "0") or 0)
            if pause > 0:
                log.warning("test hook: holding %s frozen for %.0fs", mount_point, pause)
                time.sleep(pause)
            yield
        finally:
            watchdog.cancel()
            with held.lock:
                held.done = True
                expired = held.expired
            # After the watchdog too (EINVAL then: already thawed): its thaw may have failed.
            # A thaw that fails raises and keeps the record, for the next start.
            self._thaw(mount_point)
            self._clear(volume_id)
        if expired:
            raise FreezeTimedOut(
                f"the filesystem of {volume_id} was frozen longer than {self.max_seconds:g}s "
                "(--max-freeze-seconds) and was thawed, so the copy is not consistent; retry"
            )

    def _expire(
        self,
        volume_id: str,
        mount_point: str,
        held: _Held,
        on_expire: Callable[[], None] | None = None,
    ) -> None:
        with held.lock:
            if held.done:
                return
            held.expired = True
            log.error(
                "FREEZE WATCHDOG: %s (%s) frozen for more than %gs; thawing it now, the copy "
                "in progress will fail",
                mount_point,
                volume_id,
                self.max_seconds,
            )
            if on_expire is not None:
                try:
                    on_expire()
                except Exception:
                    log.exception("telling %s's holder that its freeze broke failed", volume_id)
            try:
                self._thaw(mount_point)
            except Exception:
                log.exception("watchdog thaw of %s failed", mount_point)
