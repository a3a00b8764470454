"""`kubectl csi-hostpath why pod/NAME | pvc/NAME`: the kubectl plugin (the executable
`kubectl-csi_hostpath`). It reads the cluster (why/reads.py), asks its rules which of the five
phases each claim is in and what blocks (why/rules/blocker.py), and prints that, or the versioned
JSON document with `-o json` (docs/operations.md).

Exit codes: 0 answered (whatever the answer), 1 the cluster could not be read, 2 usage, 3 the
pod or claim does not exist.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import NoReturn

from csi_hostpath.why.rules import kube_fields as kf
from csi_hostpath.why.rules.diagnosis import SCHEMA, Diagnosis, as_json

KINDS = {
    "pod": "pod",
    "pods": "pod",
    "po": "pod",
    "pvc": "pvc",
    "pvcs": "pvc",
    "persistentvolumeclaim": "pvc",
    "persistentvolumeclaims": "pvc",
}
OK, READ_FAILED, USAGE, NOT_FOUND = 0, 1, 2, 3
CODE_NAMES = {READ_FAILED: "read-failed", USAGE: "usage", NOT_FOUND: "not-found"}
PROG = "kubectl csi-hostpath why"


class UsageError(Exception):
    """A command line argparse refuses: said as the other errors are (JSON under -o json)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _seconds(text: str) -> float:
    """A request timeout: a finite number of seconds above 0 (the client refuses the rest)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="kubectl csi-hostpath",
        description="Why is my pod's volume stuck? The five phases of each claim (provision, "
        "bind, attach, stage, publish), then the one blocking reason and the next step.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    why = sub.add_parser(
        "why",
        help="explain a pod or a claim: pod/NAME or pvc/NAME",
        description="Read-only: it reads the objects (and the driver's ledger view) and "
        "changes nothing.",
    )
    why.add_argument("target", help="pod/NAME or pvc/NAME")
    why.add_argument(
        "-n", "--namespace", help="the namespace (default: the context's, else default)"
    )
    why.add_argument("--context", help="the kubeconfig context (default: its current one)")
    why.add_argument(
        "--kubeconfig",
        help="the kubeconfig file (default: KUBECONFIG's files, else ~/.kube/config, else the "
        "pod's service account inside a cluster)",
    )
    why.add_argument(
        "-o",
        "--output",
        choices=["text", "json"],
        default="text",
        help="text (default), or json: the schema csi-hostpath.why/v1",
    )
    why.add_argument(
        "--ledger-service",
        default="",
        metavar="NAMESPACE/NAME[:PORT]",
        help="the Service of the driver's ledger view (default: what the CSIDriver's annotation "
        "names; the port defaults to metrics)",
    )
    why.add_argument(
        "--request-timeout",
        type=_seconds,
        default=10.0,
        help="seconds for each request to the API server (default 10)",
    )
    return p


def parse_target(target: str) -> tuple[str, str]:
    kind, sep, name = target.partition("/")
    if not sep or not name or kind.lower() not in KINDS:
        raise ValueError(f"give pod/NAME or pvc/NAME, not {target!r}")
    return KINDS[kind.lower()], name


def render(d: Diagnosis) -> str:
    where = f" on node {d.node}" if d.node else ""
    lines = [f"{d.kind} {d.namespace}/{d.name}{where}"]
    for c in d.claims:
        volume = f" -> {c.persistent_volume}" if c.persistent_volume else ""
        about = ", ".join(x for x in (c.storage_class, *c.access_modes) if x)
        handle = f", volume {c.volume_handle}" if c.volume_handle else ""
        lines.append(f"claim {c.claim}{volume} ({about}{handle})")
        width = max(len(p.phase) for p in c.phases)
        for p in c.phases:
            row = f"  {p.phase.ljust(width)}  {p.state.ljust(7)}  {kf.human_seconds(p.seconds):>6}"
            lines.append(f"{row}  {p.detail}".rstrip())
            if p.why and p.state != "done":
                lines.append(f"  {' ' * width}  {' ' * 7}  {' ' * 6}  {p.why}")
    b = d.blocker
    lines.append(f"reason: {b.reason}")
    lines.append(f"next: {b.next_step}")
    if b.risk:
        lines.append(f"risk: {b.risk}")
    if b.owner:
        lines.append(f"owner: {b.owner}")
    for handle, view in sorted(d.driver.items()):
        if not view.get("available"):
            lines.append(f"(the driver's view of {handle} is unavailable: {view.get('error')})")
    return "\n".join(lines)


def _wants_json(argv: Sequence[str]) -> bool:
    """-o json, read from the raw arguments: a command line argparse refused still answers in
    the form it asked for."""
    joined = list(argv)
    pairs = zip(joined, [*joined[1:], ""], strict=True)
    return any(
        (a in ("-o", "--output") and b == "json") or a in ("-ojson", "--output=json")
        for a, b in pairs
    )


def _fail(code: int, message: str, next_step: str, json_out: bool) -> int:
    """One error, in one line and its next step, or as a JSON document on stdout."""
    if json_out:
        error = {"code": CODE_NAMES[code], "message": message, "next": next_step}
        print(json.dumps({"schema": SCHEMA, "error": error, "exit_code": code}, sort_keys=True))
    else:
        print(f"{PROG}: {message}\n  next: {next_step}", file=sys.stderr)
    return code


def run(argv: Sequence[str]) -> int:
    json_out = _wants_json(argv)
    try:
        args = build_parser().parse_args(argv)
        kind, name = parse_target(args.target)
    except (UsageError, ValueError) as e:
        return _fail(USAGE, str(e), "see `kubectl csi-hostpath why --help`", json_out)
    # The Kubernetes client is imported here: --help needs none of it.
    from csi_hostpath.why.kube_access import NoCluster, connect
    from csi_hostpath.why.reads import ObjectNotFound, ReadFailed, gather
    from csi_hostpath.why.rules.blocker import diagnose

    try:
        access = connect(args.kubeconfig, args.context, request_timeout=args.request_timeout)
    except NoCluster as e:
        return _fail(READ_FAILED, str(e), e.next_step, json_out)
    try:
        observed = gather(
            access, args.namespace or access.namespace, kind, name, args.ledger_service
        )
    except ObjectNotFound as e:
        return _fail(NOT_FOUND, str(e), "check the name and -n NAMESPACE", json_out)
    except ValueError as e:
        return _fail(USAGE, str(e), "see `kubectl csi-hostpath why --help`", json_out)
    except ReadFailed as e:
        return _fail(
            READ_FAILED, str(e), "check the cluster is up and --context, then retry", json_out
        )
    finally:
        access.api.close()
    diagnosis = diagnose(observed)
    if args.output == "json":
        print(json.dumps(as_json(diagnosis, observed.now), indent=2, sort_keys=True))
    else:
        print(render(diagnosis))
    return OK


def main() -> int:
    """The console script `kubectl-csi_hostpath`."""
    return run(sys.argv[1:])
