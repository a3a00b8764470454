"""`csi-hostpath livenessprobe`: the CSI driver's Probe as HTTP, as livenessprobe v2.19.0 does
(cmd/livenessprobe/main.go), so that a kubelet httpGet probe can restart a wedged driver:

- GET /healthz connects to --csi-address afresh and calls Probe, the whole within
  --probe-timeout: 200 "ok" when the driver answers ready (or leaves `ready` out, which CSI says
  means ready), 500 with the reason otherwise: the socket is missing, the connection or the call
  failed or timed out, or "driver responded but is not ready".
- It listens on --http-endpoint, or on --health-port (deprecated, default 9808); both at once
  are refused.
- It never exits because the driver is away: a probe fails instead. The driver's name is looked
  up once it answers, for the log.

Where it differs: upstream opens its port only after it learned the driver name, so a probe
before then is refused; here /healthz answers from the start, with the reason.
"""

from __future__ import annotations

import argparse
import threading

from csi_hostpath.daemon.stop_signals import stop_on_signals
from csi_hostpath.sidecars import csi_conn
from csi_hostpath.sidecars._log import log
from csi_hostpath.sidecars.flags import DEFAULT_LIVENESS_PORT, http_endpoint
from csi_hostpath.sidecars.healthz import HealthServer


def check(address: str, timeout: float) -> tuple[int, str]:
    ready, reason = csi_conn.probe(address, timeout)
    if ready:
        log.debug("probe of %s: ready", address)
        return 200, "ok"
    return 500, reason


def _log_driver_name(address: str, timeout: float, stop: threading.Event) -> None:
    try:
        csi_conn.wait_for_driver_name(address, timeout, stop)
    except csi_conn.DriverUnusable as e:
        log.error("%s; every probe will fail until it does", e)


def run(args: argparse.Namespace) -> int:
    try:
        listen = http_endpoint(args, default_port=DEFAULT_LIVENESS_PORT)
    except ValueError as e:
        log.error("%s", e)
        return 2
    if listen is None:
        log.error("--health-port=0 and no --http-endpoint: there is nothing to serve")
        return 2
    stop = threading.Event()
    stop_on_signals(stop, log, "stopping")
    try:
        server = HealthServer(listen, lambda: check(args.csi_address, args.probe_timeout))
    except OSError as e:
        log.error("cannot listen on %s:%d: %s", listen[0] or "*", listen[1], e)
        return 1
    server.start()
    log.info("probing the CSI driver at %s, %.3g s per probe", args.csi_address, args.probe_timeout)
    threading.Thread(
        target=_log_driver_name,
        args=(args.csi_address, args.probe_timeout, stop),
        name="driver-name",
        daemon=True,
    ).start()
    stop.wait()
    server.stop()
    return 0
