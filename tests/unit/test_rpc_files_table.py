"""docs/design.md's table of the files each RPC passes through is the one measured here.

Every RPC the driver serves runs once, successfully, against an in-process driver on the fake
system layer, and the files of csi_hostpath whose code ran on its way from its servicer are
recorded with sys.settrace (tests/unit/rpc_files.py says what is traced, and how the fake's files
are counted as the Linux files they stand in for). The document's rule leaves out the error
classes, the data types, the loggers and api/status.py; what remains must be each row's files,
and its count their number. The multi-attach refusal, a behaviour the document counted apart,
is measured the same way, until the refusal is raised.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.builders import quiet_fake_driver
from tests.unit.rpc_calls import REFUSAL, every_rpc
from tests.unit.rpc_files import (
    FAKE_KERNEL_FILE,
    KERNEL_CLASSES,
    LEFT_OUT,
    PACKAGE,
    STANDS_IN_FOR,
    Measured,
    Tracer,
    apply_rule,
    doc_cell,
    doc_rows,
    served_rpcs,
)

DESIGN = PACKAGE.parent / "docs" / "design.md"
HEADING = "### Files each RPC passes through"


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Measured]]:
    """Each RPC's measure (and the refusal's), from one driver's life."""
    served = served_rpcs()
    tracer = Tracer()
    found: dict[str, Measured] = {}

    def measure(rpc: str, call: Callable[[], Any], label: str = "") -> Any:
        result, ran = tracer.measure(served[rpc], call)
        found[label or rpc] = apply_rule(ran)
        return result

    root = tmp_path_factory.mktemp("rpc-files")
    tracer.install()  # before the driver starts its threads, so each carries the trace function
    try:
        with quiet_fake_driver(root, capacity_bytes=256 << 20) as (driver, client):
            every_rpc(driver, client, root, measure)
    finally:
        tracer.uninstall()
    yield found


def _rows(measured: dict[str, Measured]) -> str:
    return "\n".join(
        f"| {rpc} | {len(m.files)} | {doc_cell(m.files)} |" for rpc, m in measured.items()
    )


def test_every_served_rpc_is_measured(measured: dict[str, Measured]) -> None:
    assert set(measured) == set(served_rpcs()) | {REFUSAL}


def test_the_table_is_the_measure(measured: dict[str, Measured]) -> None:
    table = doc_rows(DESIGN.read_text(), HEADING)
    written = {rpc: files for rpc, (_, files) in table.items()}
    now = {rpc: m.files for rpc, m in measured.items()}
    assert written == now, f"docs/design.md, {HEADING!r}, measured now:\n{_rows(measured)}"
    wrong_counts = {rpc: n for rpc, (n, files) in table.items() if n != len(files)}
    assert not wrong_counts, f"a row's count is not its number of files: {wrong_counts}"


def test_the_table_names_what_it_leaves_out() -> None:
    """Every file the rule leaves out is named, with the rule, above the table."""
    text = DESIGN.read_text().split(HEADING, 1)[1].split("\n#", 1)[0]
    named = set(LEFT_OUT) | {FAKE_KERNEL_FILE, "_log.py", "_pb/"}
    missing = [path for path in sorted(named) if f"`{path}`" not in text]
    assert not missing, f"the section does not name these left-out files: {missing}"


def _classes(folder: Path) -> set[str]:
    return {
        node.name
        for path in folder.glob("*.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ClassDef)
    }


def test_each_fake_class_has_a_linux_counterpart_or_is_the_kernel() -> None:
    """A fake class added later must be given its Linux class before a row can count it."""
    fake = _classes(PACKAGE / "system" / "fake")
    assert fake == set(STANDS_IN_FOR) | KERNEL_CLASSES


def test_no_call_runs_the_daemons_code(measured: dict[str, Measured]) -> None:
    """daemon/ wires the roles together at start; a call's way runs through api/ and below."""
    found = {
        rpc: sorted(f for f in m.files if f.startswith("daemon/")) for rpc, m in measured.items()
    }
    assert {rpc: files for rpc, files in found.items() if files} == {}
