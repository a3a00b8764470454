"""No two source files share a name, and the tests' layout is one a newcomer can walk.

No two source files of the package share a name, so a name in a search, a traceback or a doc
leads to one file: core/ledger_rules.py, store/ledger_store.py, not three ledger.py. The names
every package or role has by convention may repeat: __init__.py, _log.py (each package's one
logger), and each role's service.py and main.py.

The tests keep the same rule for their own files, and two more: tests/ itself holds no module but
conftest.py and __init__.py (each test lives in the folder of its kind, and the helpers several
folders share in tests/support/), and whatever needs a Kubernetes cluster, or makes, drives
or checks one, lives in tests/k8s/: a module outside it may not import tests.k8s (the runners and
their helpers) or name a cluster's tooling (tools/cluster/, tools/kind/, tools/kind-e2e.sh) in
its code; a docstring or a comment may. And every test file's
docstring opens with one line of its own that says what it covers.

Each check runs on the real tree, and on a small tree that breaks it, so a checker that stopped
finding anything would fail too.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "csi_hostpath"
TESTS = Path(__file__).resolve().parents[1]
MAY_REPEAT = frozenset({"__init__.py", "_log.py", "service.py", "main.py"})
AT_TESTS_ROOT = frozenset({"conftest.py", "__init__.py"})
KUBERNETES_HOME = "k8s"
CLUSTER_MARKS = ("tools/cluster/", "tools/kind/", "tools/kind-e2e.sh")


def repeated_names(root: Path) -> dict[str, list[str]]:
    """Each file name held by more than one module (the generated stubs aside), with its paths."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] != "_pb" and path.name not in MAY_REPEAT:
            where[path.name].append(rel.as_posix())
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the string constants that are a module's, class's or function's docstring."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _path_text(node: ast.expr) -> str:
    """The strings of a path built with `/` (ROOT / "tools" / "kind"), joined as one path."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return f"{_path_text(node.left)}/{_path_text(node.right)}"
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def kubernetes_uses(source: str) -> list[str]:
    """What in a module's code says it needs a cluster: imports of tests.k8s, and strings or
    paths that name a cluster's tooling or its test gate."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    uses = set()
    for node in ast.walk(tree):
        modules = []
        if isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        uses |= {f"imports {m}" for m in modules if m == "tests.k8s" or m.startswith("tests.k8s.")}
        text = ""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = "" if id(node) in docstrings else node.value
        elif isinstance(node, ast.BinOp):
            text = _path_text(node)
        uses |= {f"names {mark}" for mark in CLUSTER_MARKS if mark in text}
    return sorted(uses)


def layout_problems(tests: Path) -> list[str]:
    """Each way the tests' layout breaks the rules of this module's docstring."""
    problems = []
    files = sorted(tests.rglob("test_*.py"))
    problems += [
        f"{p.name}: a module at the root of tests/ (a test goes in its kind's folder, a helper "
        "in tests/support/)"
        for p in sorted(tests.glob("*.py"))
        if p.name not in AT_TESTS_ROOT
    ]
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in files:
        by_name[path.name].append(path.relative_to(tests).as_posix())
    problems += [f"{name}: {' and '.join(paths)}" for name, paths in by_name.items() if paths[1:]]
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests)
        # This module names the marks to find them; it runs no cluster.
        if rel.parts[0] != KUBERNETES_HOME and path != Path(__file__).resolve():
            uses = kubernetes_uses(path.read_text())
            if uses:
                problems.append(f"{rel.as_posix()}: outside tests/k8s/, {', '.join(uses)}")
    return problems


def opens_with_one_line(source: str) -> bool:
    """Does the module's docstring start with a line of its own (a blank line or its end next)?"""
    doc = ast.get_docstring(ast.parse(source), clean=False) or ""
    lines = doc.split("\n")
    return bool(lines[0].strip()) and (len(lines) == 1 or not lines[1].strip())


def test_no_two_source_files_share_a_name() -> None:
    assert repeated_names(PACKAGE) == {}


def test_a_repeated_name_is_found(tmp_path: Path) -> None:
    for rel in ("core/ledger.py", "store/ledger.py", "a/service.py", "b/service.py", "_pb/x.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "x.py").write_text("")
    assert repeated_names(tmp_path) == {"ledger.py": ["core/ledger.py", "store/ledger.py"]}


def test_the_tests_layout() -> None:
    assert layout_problems(TESTS) == []


def test_a_bad_tests_layout_is_found(tmp_path: Path) -> None:
    runs_kind = 'import subprocess\nsubprocess.run(["bash", "tools/kind/up.sh"])\n'
    files = {
        "conftest.py": "",
        "test_loose.py": "",
        "helpers.py": "",
        "support/helpers.py": "",
        "unit/test_twice.py": "",
        "real/test_twice.py": "",
        "unit/test_kind.py": runs_kind,
        "unit/test_build.py": 'BUILD = ROOT / "tools" / "cluster" / "build.sh"\n',
        "unit/runner_user.py": "from tests.k8s.experiments import runner\n",
        "unit/test_says_so.py": '"""Not tools/cluster/ itself: a docstring may name it."""\n',
        "k8s/kind/test_kind_up.py": runs_kind,
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert layout_problems(tmp_path) == [
        "helpers.py: a module at the root of tests/ (a test goes in its kind's folder, a helper "
        "in tests/support/)",
        "test_loose.py: a module at the root of tests/ (a test goes in its kind's folder, a helper "
        "in tests/support/)",
        "test_twice.py: real/test_twice.py and unit/test_twice.py",
        "unit/runner_user.py: outside tests/k8s/, imports tests.k8s.experiments",
        "unit/test_build.py: outside tests/k8s/, names tools/cluster/",
        "unit/test_kind.py: outside tests/k8s/, names tools/kind/",
    ]


def test_every_test_file_opens_with_one_line_on_what_it_covers() -> None:
    files = sorted(TESTS.rglob("test_*.py"))
    assert files
    assert [
        p.relative_to(TESTS).as_posix() for p in files if not opens_with_one_line(p.read_text())
    ] == []


def test_a_docstring_without_its_own_first_line_is_found() -> None:
    assert opens_with_one_line('"""The subject.\n\nMore."""\n')
    assert opens_with_one_line('"""The subject."""\n')
    assert not opens_with_one_line('"""The subject, and a sentence\nthat goes on."""\n')
    assert not opens_with_one_line("x = 1\n")
