"""Every runtime dependency in pyproject.toml is imported by the package.

Every runtime dependency declared in pyproject.toml is imported by the package (a
dependency nothing uses leaves pyproject.toml and the Dockerfile)."""

from __future__ import annotations

import ast
import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imported_top_levels() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "csi_hostpath").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def test_every_runtime_dependency_is_imported() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {_normal(re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0]) for d in declared}
    modules_of: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(_normal(dist), set()).add(module)
    imported = _imported_top_levels()
    unused = []
    for name in sorted(names):
        modules = modules_of.get(name, set())
        assert modules, f"{name} is declared but not installed"
        if not any(
            m == top or m.startswith(top + ".") or top.startswith(m + ".")
            for m in modules
            for top in imported
        ):
            unused.append(name)
    assert not unused, f"declared in pyproject.toml, imported by nothing: {unused}"
