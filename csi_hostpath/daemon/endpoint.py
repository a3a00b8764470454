"""Claim the driver's unix socket path without destroying what is there.

Only a socket nothing answers on is removed: a regular file keeps its content, and a socket a
live driver serves (one with another state directory, which the state-dir lock does not stop)
is refused, not taken over. grpc core itself unlinks an existing socket before it binds, so the
check happens here, before the server is asked to bind.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

# How long a live driver gets to accept a connection before its socket counts as stale.
CONNECT_TIMEOUT = 1.0


class EndpointRefused(RuntimeError):
    """The endpoint path holds something that is not ours to remove."""


def socket_answers(path: Path, timeout: float = CONNECT_TIMEOUT) -> bool:
    """Does a process accept connections on this unix socket? A listening socket accepts even
    while its server is busy (the kernel queues the connection), so a busy driver counts as live."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except TimeoutError:
            return True  # the backlog is full: someone listens but is slow
        except OSError as e:
            if e.errno in (errno.ECONNREFUSED, errno.ENOENT):
                return False
            if e.errno == errno.EAGAIN:
                return True  # backlog full
            raise
        return True


def claim_endpoint(path: Path) -> None:
    """Make `path` free for a new socket. Removes only a stale socket (one nothing answers on);
    refuses a regular file, a directory, a symlink or a live socket with the next step to take."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    mode = st.st_mode
    if stat.S_ISSOCK(mode):
        if socket_answers(path):
            raise EndpointRefused(
                f"another process is serving on {path}; two drivers must not share one endpoint. "
                "Stop the other driver, or give this one its own --endpoint"
            )
        path.unlink(missing_ok=True)  # a stale socket left by a crash
        return
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a symlink"
        if stat.S_ISLNK(mode)
        else "a regular file"
        if stat.S_ISREG(mode)
        else "not a socket"
    )
    raise EndpointRefused(
        f"the endpoint path {path} is {kind}, not a socket; refusing to remove it. "
        "Move it away, or choose another --endpoint"
    )
