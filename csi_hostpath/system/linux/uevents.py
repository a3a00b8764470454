"""Kernel uevents for loop devices, read from the kernel's netlink socket: the node hears at once
when a loop device changes (attached, detached, resized), instead of finding out at the next
NodeGetVolumeStats.

The source is the kernel's own netlink group, not udevd's: a node plugin's container has no udevd,
and the kernel sends untagged uevents to every network namespace of the initial user namespace
(lib/kobject_uevent.c), a pod's included. LOOP_CLR_FD and LOOP_CONFIGURE each send a "change"
uevent for loopN (drivers/block/loop.c). Listing devices stays a scan of /sys/block.

The socket is read directly (NETLINK_KOBJECT_UEVENT, group 1), as pyudev's kernel monitor did:
a message is "ACTION@DEVPATH" then KEY=VALUE fields, each ended by a NUL. Without pyudev and
the libudev it loads, an idle node plugin holds 3 MiB less (docs/benchmarks.md, "What each role
holds").
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Callable

from csi_hostpath.system.linux._log import log

NETLINK_KOBJECT_UEVENT = 15
KERNEL_GROUP = 1  # the kernel's own uevents (udevd re-broadcasts its own on group 2)
RECEIVE_BUFFER = 1 << 20  # a burst of attaches must not overflow the socket


def parse_uevent(message: bytes) -> dict[str, str]:
    """A kernel uevent's fields (ACTION, DEVPATH, SUBSYSTEM, DEVNAME, ...); {} for anything
    else on the socket (libudev's messages start with "libudev")."""
    header, _, rest = message.partition(b"\0")
    if b"@" not in header:
        return {}
    fields = {}
    for item in rest.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            fields[key.decode(errors="replace")] = value.decode(errors="replace")
    return fields


def loop_device_of(fields: dict[str, str]) -> str | None:
    """The /dev path of the loop device a uevent is about, or None for any other device."""
    name = fields.get("DEVPATH", "").rsplit("/", 1)[-1]
    if fields.get("SUBSYSTEM") != "block" or not name.startswith("loop"):
        return None
    return f"/dev/{name}"


def _listen(sock: socket.socket, wake: int, changed: Callable[[str], None]) -> None:
    """Read uevents until the wake pipe is written to (the watch's stop)."""
    try:
        while True:
            ready, _, _ = select.select([sock.fileno(), wake], [], [])
            if wake in ready:
                return
            try:
                message = sock.recv(RECEIVE_BUFFER)
            except BlockingIOError:
                continue
            except OSError as exc:  # ENOBUFS: some were lost; the on-demand checks remain
                log.warning("reading kernel uevents: %s", exc)
                continue
            device = loop_device_of(parse_uevent(message))
            if device is None:
                continue
            try:
                changed(device)
            except Exception:  # a failing handler must not end the watch
                log.exception("handling a uevent of %s failed", device)
    finally:
        sock.close()
        os.close(wake)


def watch_loop_devices(changed: Callable[[str], None]) -> Callable[[], None]:
    """Call changed("/dev/loopN") from a background thread for every uevent of a loop device;
    return the function that stops the watch. Where the kernel's uevents can't be received
    (no netlink socket allowed), log it and watch nothing: the on-demand checks still work."""
    try:
        sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT
        )
    except OSError as exc:
        log.warning("kernel uevents unavailable (%s); loop devices are checked on demand only", exc)
        return lambda: None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        # Subscribed here, not in the thread: the socket hears nothing until it is bound, and
        # the thread may start after the caller has already made the change it watches for.
        sock.bind((0, KERNEL_GROUP))
        sock.setblocking(False)
        wake_read, wake_write = os.pipe2(os.O_CLOEXEC)
    except OSError as exc:
        sock.close()
        log.warning("kernel uevents unavailable (%s); loop devices are checked on demand only", exc)
        return lambda: None
    thread = threading.Thread(
        target=_listen, args=(sock, wake_read, changed), name="loop-uevents", daemon=True
    )
    thread.start()
    stopped = threading.Event()

    def stop() -> None:
        if not stopped.is_set():
            stopped.set()
            os.write(wake_write, b"x")
            os.close(wake_write)

    return stop
