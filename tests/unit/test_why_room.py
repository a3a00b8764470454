"""The kubectl plugin is a package of its own: core/ holds and imports nothing of it.

`kubectl csi-hostpath why` reasons over Kubernetes objects; the driver never does. So its rules,
its reads and its command live in csi_hostpath/why/, and core/ (the driver's pure rules) holds no
module of the plugin's (why_*, kube_fields) and imports nothing from why/, in any spelling of the
import. The console script `kubectl-csi_hostpath` is the plugin's way in. The import rules of the
why/ room itself are tests/unit/test_layering.py's.

The check runs on the package, and on a small tree with one deliberate violation of each kind.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "csi_hostpath"
PLUGIN_NAMES = ("why_", "kube_fields")


def plugin_in_core(package: Path, name: str = "csi_hostpath") -> list[str]:
    """Each module of core/ that is the plugin's by its name, or imports the plugin."""
    found = []
    for path in sorted((package / "core").rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if path.stem.startswith(PLUGIN_NAMES):
            found.append(f"{rel} is the plugin's (its name)")
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            if any(m == f"{name}.why" or m.startswith(f"{name}.why.") for m in modules):
                found.append(f"{rel}:{node.lineno} imports the plugin")
    return found


def test_core_holds_and_imports_nothing_of_the_plugin() -> None:
    assert plugin_in_core(PACKAGE) == []


def test_the_plugin_lives_in_its_own_package() -> None:
    why = PACKAGE / "why"
    assert (why / "__init__.py").is_file() and (why / "rules" / "__init__.py").is_file()
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-csi_hostpath"].startswith("csi_hostpath.why."), scripts


@pytest.mark.parametrize(
    ("name", "body", "expected"),
    [
        ("core/why_phases.py", "", "the plugin's (its name)"),
        ("core/kube_fields.py", "", "the plugin's (its name)"),
        ("core/rule.py", "from pkg.why.rules import diagnosis\n", "imports the plugin"),
        ("core/rule.py", "from pkg import why\n", "imports the plugin"),
        ("core/rule.py", "import pkg.why.reads\n", "imports the plugin"),
    ],
)
def test_the_check_finds_a_deliberate_violation(
    tmp_path: Path, name: str, body: str, expected: str
) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "model.py").write_text("from pkg.core import errors\n")
    (tmp_path / name).write_text(body)
    found = plugin_in_core(tmp_path, "pkg")
    assert len(found) == 1 and expected in found[0], found
