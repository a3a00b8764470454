"""A worker lost while its pod writes to a ReadWriteOnce volume: cut off from the network
(`docker network disconnect kind A`), powered off (`docker stop A`), or rebooted (`docker restart
A`). While A is away the volume is attached and mounted nowhere else; after the out-of-service
taint it moves to B with its data; when A is back it is fenced (an audit row) and its writes
stop. A reboot comes back before anyone gives the volume away: the pod runs on A again with its
data. The sampler checks every node's mounts and the ledger throughout."""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tests.k8s.experiments.context import log, pod, pvc
from tests.k8s.experiments.exp_nodes import TAINT, WRITER, Probe
from tests.k8s.experiments.kube import Failed, pod_ready
from tests.k8s.faults import invariants as inv
from tests.k8s.faults.harness import Harness, docker
from tests.k8s.faults.observe import wait_for
from tests.k8s.faults.results import CellResult
from tests.k8s.faults.sampler import Sampler, nodes_using

NETWORK = "kind"
MODES = {
    "partition": "A cut off from the network while its pod writes; the out-of-service taint; "
    "A reconnected",
    "poweroff": "A stopped (docker stop) while its pod writes; the taint; A started again",
    "reboot": "A restarted (docker restart) while its pod writes; the pod runs on A again",
}


def addresses(inspect_json: str, network: str = NETWORK) -> tuple[str, str]:
    """(IPv4, IPv6) of a container on that network, from `docker inspect -f
    '{{json .NetworkSettings.Networks}}'`; empty where it has none."""
    net = (json.loads(inspect_json or "{}") or {}).get(network) or {}
    return str(net.get("IPAddress") or ""), str(net.get("GlobalIPv6Address") or "")


def reconnect_argv(node: str, ipv4: str, ipv6: str, network: str = NETWORK) -> list[str]:
    """Back on its old addresses: the node's kubelet and certificates name them."""
    return [
        "network",
        "connect",
        *(["--ip", ipv4] if ipv4 else []),
        *(["--ip6", ipv6] if ipv6 else []),
        network,
        node,
    ]


def digest(lines: list[str]) -> str:
    """The lines written before the fault, as one checksum to compare."""
    return hashlib.md5("\n".join(lines).encode()).hexdigest() if lines else ""


def started_after(started_at: str, when: float) -> bool:
    """Whether an API timestamp (RFC 3339, UTC) is later than time.time() `when`: a container
    started after the reboot (kind nodes share the host's clock)."""
    if not started_at:
        return False
    return datetime.fromisoformat(started_at.replace("Z", "+00:00")).timestamp() > when


class Case:
    def __init__(self, h: Harness, mode: str) -> None:
        self.h, self.mode = h, mode
        self.ns = f"fault-{mode}"
        self.a = self.b = ""  # the writer's node, and the controller's, when the case runs
        self.k = h.ctx.kube
        self.found: list[inv.Violation] = []
        self.pvs: set[str] = set()

    def lines(self, name: str) -> list[str]:
        return self.k.exec(self.ns, name, ["cat", "/data/log"]).splitlines()

    def wait(self, what: str, probe: Callable[[], Any], timeout: float | None = None) -> Any:
        return wait_for(what, probe, timeout or self.h.args.timeout, 2)

    def actions(self, vol: str) -> list[tuple[str, str]]:
        return [(r[2], r[4]) for r in self.h.ctx.audit(vol)]

    def start(self) -> tuple[str, str, list[str]]:
        """The claim and its writer on A: (PV, volume handle, the lines written so far)."""
        self.k.delete_namespace(self.ns)
        self.h.ctx.namespace(self.ns)
        self.k.apply(
            [pvc("survivor", self.ns), pod("doomed", self.ns, "survivor", WRITER, node=self.a)]
        )
        self.k.wait_pod_ready(self.ns, "doomed", self.h.args.timeout)
        pv = str((self.k.pvc(self.ns, "survivor") or {})["spec"]["volumeName"])
        self.pvs.add(pv)
        self.wait("doomed has written 3 lines", lambda: len(self.lines("doomed")) >= 3)
        return pv, self.k.volume_handle(self.ns, "survivor"), self.lines("doomed")

    def nowhere_else(
        self,
        history: list[tuple[float, dict[str, dict[str, bool]]]],
        handle: str,
        since: float,
        until: float,
        what: str,
    ) -> None:
        others = nodes_using(history, handle, since, until) - {self.a}
        if others:
            self.found.append(
                inv.Violation(
                    inv.DOUBLE_WRITER, f"{handle} mounted on {', '.join(sorted(others))} {what}"
                )
            )

    def lost(self, sampler: Sampler, pv: str, handle: str, written: list[str]) -> None:
        a, b, k = self.a, self.b, self.k
        probe: Probe | None = None
        ip4, ip6 = addresses(docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", a))
        if self.mode == "partition":
            uid = (k.pod(self.ns, "doomed") or {})["metadata"]["uid"]
            probe = Probe(
                self.h.ctx, a, f"/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~csi/{pv}/mount"
            )
        away, tainted = True, False
        try:
            cut = time.time()
            docker(
                *(
                    ["network", "disconnect", NETWORK, a]
                    if self.mode == "partition"
                    else ["stop", a]
                )
            )
            log(f"  {a} {'cut off' if self.mode == 'partition' else 'stopped'} ({ip4} {ip6})")
            self.wait(f"{a} NotReady", lambda: not self.h.ctx.node_ready(a), 300)
            k.apply([pod("rescue", self.ns, "survivor", "tail -n 3 /data/log; sleep 3600", node=b)])
            end = time.monotonic() + 30
            while time.monotonic() < end:
                with contextlib.suppress(Exception):
                    if any(v[1] == b for v in self.h.observer.attached() if v[0] == handle):
                        self.found.append(
                            inv.Violation(
                                inv.DOUBLE_HOLD, f"{handle} attached to {b} while {a} is away"
                            )
                        )
                        break
                time.sleep(2)
            if probe is not None:
                log(f"  A's own writer while cut off: {probe.lines[-2:]}")
            k.kubectl("taint", "node", a, TAINT)
            tainted, taint_at = True, time.time()
            self.nowhere_else(sampler.report.history, handle, cut, taint_at, f"while {a} was away")
            k.wait_gone("v1", "Pod", "doomed", self.ns, 300)
            k.wait_pod_ready(self.ns, "rescue", self.h.args.timeout)
            got = self.lines("rescue")
            self.found += inv.data_kept(
                f"{pv} moved to {b}", digest(written), digest(got[: len(written)])
            )
            self.wait(f"a revoke row for {a}", lambda: ("revoke", a) in self.actions(handle), 120)
            self.bring_back(ip4, ip6)
            away = False
            back4, _ = addresses(docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", a))
            if back4 != ip4:
                log(f"  NOTE: {a} came back on {back4}, not {ip4}")
            self.wait(f"{a} Ready again", lambda: self.h.ctx.node_ready(a), 300)
            self.wait(f"a fenced row for {a}", lambda: ("fenced", a) in self.actions(handle), 300)
            if probe is not None:
                self.wait("A's own writes fail after the fence", probe.failing, 120)
                log(f"  A's own writer after the fence: {probe.lines[-2:]}")
            seen = len(self.lines("rescue"))
            time.sleep(10)
            if len(self.lines("rescue")) != seen:
                self.found.append(inv.Violation(inv.DATA, f"{pv} on {b} grew without a writer"))
            self.wait(
                f"no mount of {handle} left on {a}",
                lambda: a not in self.h.observer.use().get(handle, {}),
                180,
            )
        finally:
            if probe is not None:
                probe.stop()
            if away:
                with contextlib.suppress(Exception):
                    self.bring_back(ip4, ip6)
            if tainted:
                k.kubectl("taint", "node", a, TAINT + "-", check=False)
            self.back()

    def bring_back(self, ip4: str, ip6: str) -> None:
        if self.mode != "partition":
            docker("start", self.a)
            return
        try:
            docker(*reconnect_argv(self.a, ip4, ip6))
        except Failed as e:
            # Docker keeps a fixed address only on a network whose subnets the user set.
            log(f"  reconnecting on the old addresses failed ({e}); reconnecting as Docker picks")
            docker("network", "connect", NETWORK, self.a)

    def back(self) -> None:
        """A Ready, and its node plugin, before anything else runs."""
        self.wait(f"{self.a} Ready", lambda: self.h.ctx.node_ready(self.a), 300)
        self.wait(
            f"{self.a}'s node plugin Ready", lambda: pod_ready(self.h.ctx.node_plugin(self.a)), 300
        )
        self.h.forget_pods()

    def reboot(self, sampler: Sampler, pv: str, handle: str, written: list[str]) -> None:
        began = time.time()
        docker("restart", self.a, timeout=300)
        log(f"  {self.a} restarted")
        self.back()

        def running_again() -> bool:
            p = self.k.pod(self.ns, "doomed") or {}
            state = (p.get("status") or {}).get("containerStatuses", [{}])[0].get("state") or {}
            started = str((state.get("running") or {}).get("startedAt") or "")
            return pod_ready(p) and started_after(started, began)

        self.wait("doomed running again on A (restarted)", running_again)
        now = self.lines("doomed")
        self.found += inv.data_kept(
            f"{pv} after the reboot", digest(written), digest(now[: len(written)])
        )
        self.wait("doomed writing again", lambda: len(self.lines("doomed")) > len(now), 60)
        self.nowhere_else(sampler.report.history, handle, began, time.time(), "around the reboot")

    def run(self) -> CellResult:
        began = time.monotonic()
        result = CellResult(f"partition/{self.mode}", "passed", 0.0)
        log(f"case {self.mode}: {MODES[self.mode]}")
        with Sampler(self.h.observer, self.h.args.sample_interval) as sampler:
            try:
                self.a, self.b = self.h.volume_nodes()
                log(f"  A={self.a} (the writer's node), B={self.b} (the controller's)")
                pv, handle, written = self.start()
                if self.mode == "reboot":
                    self.reboot(sampler, pv, handle, written)
                else:
                    self.lost(sampler, pv, handle, written)
            except Failed as e:
                result.outcome, result.detail = "FAILED", str(e)
            except Exception as e:  # the case's error is its row
                result.outcome, result.detail = "FAILED", f"{type(e).__name__}: {e}"
                traceback.print_exc()
            try:
                self.k.delete_namespace(self.ns)
                self.wait(
                    "the case's PVs gone",
                    lambda: all(self.k.get("v1", "PersistentVolume", p) is None for p in self.pvs),
                )
                self.found += self.h.observer.settled(self.h.before, 120)
            except Exception as e:
                result.outcome, result.detail = "FAILED", result.detail or f"cleanup: {e}"
        result.add(self.found + sampler.report.violations)
        result.samples = sampler.report.summary()
        if result.violations:
            result.outcome = "FAILED"
        result.seconds = time.monotonic() - began
        log(f"case {self.mode}: {result.outcome} in {result.seconds:.0f} s; {result.samples}")
        return result
