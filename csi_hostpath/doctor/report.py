"""`csi-hostpath doctor`: check a node for everything the driver needs, and say how to fix what
is missing.

Each check is independent, so one broken prerequisite does not hide the others, and each non-ok
finding carries a concrete fix. The checks change nothing that matters: the lock is tested with a
non-blocking flock released at once, the reflink test writes two small temporary files and removes
them, and asking the kernel for a free loop device may add an unused loop device; where /dev
lacks its node or loop-control's (a static /dev), the node is made, as the driver's attach makes
it. The state and pool directories are never created: a missing one is reported, as `serve`
would create it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from csi_hostpath.core.nodeloss import DEFAULT_LOST_AFTER
from csi_hostpath.doctor.finding import STATUSES, Finding, crashed, guarded
from csi_hostpath.doctor.lost import check_lost
from csi_hostpath.doctor.machine import (
    check_capabilities,
    check_kernel_filesystems,
    check_loop_control,
    check_loop_devices,
    check_tools,
)
from csi_hostpath.doctor.pool_checks import check_owner, check_pool
from csi_hostpath.doctor.state import check_lock, check_socket, check_state_dir
from csi_hostpath.doctor.unclaimed import check_unclaimed


def diagnose(
    state_dir: Path,
    pool_dir: Path,
    endpoint: str | None = None,
    *,
    path_env: str | None = None,
    lost_after: float = DEFAULT_LOST_AFTER,
) -> list[Finding]:
    """Check this node for the driver; `path_env` is the PATH to look tools up on (default: ours).

    Run it where the daemon runs (the node plugin's container): device nodes, capabilities, PATH
    and mounts are what this process sees, and the daemon sees the same.
    """
    search_path = os.environ.get("PATH", os.defpath) if path_env is None else path_env
    findings: list[Finding] = []
    findings += guarded("loop-control", check_loop_control)
    findings += guarded("loop-devices", lambda: check_loop_devices(pool_dir))
    findings += guarded("kernel-fs", check_kernel_filesystems)
    findings += guarded("cap-sys-resource", check_capabilities)
    findings += guarded("tools", lambda: check_tools(search_path))
    findings += guarded("state-dir", lambda: [check_state_dir(state_dir)])
    daemon_running = False
    try:
        lock, daemon_running = check_lock(state_dir)
        findings.append(lock)
    except Exception as exc:  # noqa: BLE001 - a crashed check is reported, not raised
        findings.append(crashed("state-lock", exc))
    if endpoint is not None:
        findings += guarded(
            "socket", lambda: [check_socket(endpoint, state_dir, daemon_running=daemon_running)]
        )
    findings += guarded("pool", lambda: check_pool(pool_dir))
    findings += guarded("pool-owner", lambda: [check_owner(pool_dir, state_dir)])
    findings += guarded("lost-volumes", lambda: check_lost(state_dir, pool_dir, lost_after))
    findings += guarded("unclaimed-mount", lambda: check_unclaimed(pool_dir))
    return findings


def render(findings: Sequence[Finding]) -> str:
    """An aligned table, STATUS  CHECK  DETAIL, with a `fix:` line under each non-ok finding."""
    width_status = max([len("STATUS"), *(len(f.status) for f in findings)])
    width_check = max([len("CHECK"), *(len(f.check) for f in findings)])
    indent = " " * (width_status + 2 + width_check + 2)
    lines = [f"{'STATUS':<{width_status}}  {'CHECK':<{width_check}}  DETAIL"]
    for finding in findings:
        status = finding.status.upper()
        lines.append(f"{status:<{width_status}}  {finding.check:<{width_check}}  {finding.detail}")
        if finding.status != "ok" and finding.fix:
            lines.append(f"{indent}fix: {finding.fix}")
    counts = {status: sum(f.status == status for f in findings) for status in STATUSES}
    lines += ["", ", ".join(f"{counts[status]} {status}" for status in STATUSES)]
    return "\n".join(lines)


def exit_code(findings: Iterable[Finding]) -> int:
    """1 if anything fails (the driver would not work), else 0; warnings are limits, not errors."""
    return 1 if any(finding.status == "fail" for finding in findings) else 0
