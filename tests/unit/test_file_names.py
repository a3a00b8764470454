"""No two source files share a name, and the tests' layout is one a newcomer can walk.

No two source files of the package share a name, so a name in a search, a traceback or a doc
leads to one file: core/ledger_rules.py, store/ledger_store.py, not three ledger.py.

The names every package or role has by convention may repeat: __init__.py, _log.py (each package's
one logger), and each role's service.py and main.py. The check runs on the package, and on a
small tree with a repeated name, so a checker that stopped finding anything would fail too.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "csi_hostpath"
MAY_REPEAT = frozenset({"__init__.py", "_log.py", "service.py", "main.py"})


def repeated_names(root: Path) -> dict[str, list[str]]:
    """Each file name held by more than one module (the generated stubs aside), with its paths."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] != "_pb" and path.name not in MAY_REPEAT:
            where[path.name].append(rel.as_posix())
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_no_two_source_files_share_a_name() -> None:
    assert repeated_names(PACKAGE) == {}


def test_a_repeated_name_is_found(tmp_path: Path) -> None:
    for rel in ("core/ledger.py", "store/ledger.py", "a/service.py", "b/service.py", "_pb/x.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "x.py").write_text("")
    assert repeated_names(tmp_path) == {"ledger.py": ["core/ledger.py", "store/ledger.py"]}
