"""Kernel uevents for loop devices, through pyudev: the node hears at once when a loop device
changes (attached, detached, resized), instead of finding out at the next NodeGetVolumeStats.

The source is the kernel's own netlink group, not udevd's: a node plugin's container has no udevd,
and the kernel sends untagged uevents to every network namespace of the initial user namespace
(lib/kobject_uevent.c), a pod's included. LOOP_CLR_FD and LOOP_CONFIGURE each send a "change"
uevent for loopN (drivers/block/loop.c). Listing devices stays a scan of /sys/block: pyudev's
enumeration was 30 to 47 times slower (docs/benchmarks.md, "pyudev").
"""

from __future__ import annotations

from collections.abc import Callable

import pyudev

from csi_hostpath.system.linux._log import log


def watch_loop_devices(changed: Callable[[str], None]) -> Callable[[], None]:
    """Call changed("/dev/loopN") from a background thread for every uevent of a loop device;
    return the function that stops the watch. Where the kernel's uevents can't be received
    (no netlink socket allowed), log it and watch nothing: the on-demand checks still work."""

    def on_event(device: pyudev.Device) -> None:
        name = device.sys_name or ""
        if device.subsystem != "block" or not name.startswith("loop"):
            return
        try:
            changed(f"/dev/{name}")
        except Exception:  # a failing handler must not end the watch
            log.exception("handling a uevent of /dev/%s failed", name)

    try:
        monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
        monitor.filter_by("block")
        # Subscribed here, not in the observer's thread: the socket hears nothing until it is,
        # and that thread may start after the caller has already made the change it watches for.
        monitor.start()
        observer = pyudev.MonitorObserver(monitor, callback=on_event, name="loop-uevents")
        observer.daemon = True
        observer.start()
    except Exception as exc:  # noqa: BLE001 - any failure: no watch, the node still works
        log.warning("kernel uevents unavailable (%s); loop devices are checked on demand only", exc)
        return lambda: None
    stop: Callable[[], None] = observer.send_stop
    return stop
