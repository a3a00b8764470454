"""The package's layers, read from its source with ast: imports point downwards only.

The layers: cli -> daemon -> api -> service -> (core, store, system), with client/ beside them
and why/ (the kubectl plugin: its rules over core/ alone) a product of its own.

- core/ imports only core/ and the standard library's pure modules: no I/O (files, processes,
  sockets, sqlite, threads, logging) and nothing of another layer.
- store/ and system/ import neither service/ nor api/.
- A service package imports no other: service/node/ and service/controller/ never import each
  other, and the modules they share at service/'s root import neither.
- Nothing below api/ imports api/.
- cli/ is the top: no module imports it but __main__.
- daemon/ imports only daemon/, api/, service/, store/, system/, core/ and the stubs. Nothing
  below it (api/, service/, core/, store/, system/, and doctor/, which `csi-hostpath doctor`
  runs beside the daemon's layers) imports daemon/ or cli/, the Config included: the daemon
  reads the Config into typed values (each role's context, Readiness's paths, the Identity
  servicer's name and capabilities, the metrics' scope), and the value types both need
  (PoolScope) live in core/.
- client/ (what a caller of the driver sends) imports only client/, core/ and the stubs.
- why/ (the kubectl plugin, a product of its own) imports only why/ and core/, and nothing of the
  package imports it: its console script is its way in. Its rules, why/rules/, are pure as core/
  is: no I/O, and nothing of why/ above them.
- Only store/ runs SQL: outside it, no module imports sqlite3 (core/ classifies sqlite's errors
  by their module name), calls .execute() or ._tx(), or holds a string of SQL.

Each rule is checked on the package, and on a small tree written here with one deliberate
violation of each, so a checker that stopped finding anything would fail too. What api/ may do
with a service object it holds (call its methods, never read its parts) is checked apart, in
tests/unit/test_servicers_call_methods.py.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "csi_hostpath"

# Standard-library modules whose use is I/O, or a process-wide side effect.
IO_MODULES = frozenset({
    "asyncio", "ctypes", "fcntl", "glob", "io", "logging", "mmap", "multiprocessing", "os",
    "pathlib", "select", "shutil", "signal", "socket", "sqlite3", "subprocess", "sys",
    "tempfile", "threading", "grpc", "psutil", "pyudev",
})  # fmt: skip
SQL = re.compile(
    r"\b(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM"
    r"|CREATE\s+(TABLE|INDEX)|PRAGMA\s+\w+|BEGIN\s+IMMEDIATE)\b",
    re.IGNORECASE | re.DOTALL,
)


def _modules(root: Path) -> Iterator[tuple[str, Path]]:
    """(dotted name inside the package, path) of every module but the generated stubs."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "_pb":
            continue
        yield ".".join(rel.with_suffix("").parts), path


def _imports(root: Path, path: Path, package: str) -> Iterator[str]:
    """Every module the file imports, absolute; the package's own names without its prefix.
    `from pkg.x import y` imports pkg.x.y when y is a module or a package of the tree (so
    `from pkg.service import controller` is service.controller's), else pkg.x."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{alias.name}"
                if _in_tree(root, package, f"{node.module}.{alias.name}")
                else node.module
                for alias in node.names
            ]
        for name in names:
            yield name[len(package) + 1 :] if name.startswith(package + ".") else name


def _in_tree(root: Path, package: str, dotted: str) -> bool:
    """Is the package's dotted name one of its modules or packages?"""
    if not dotted.startswith(package + "."):
        return False
    path = root.joinpath(*dotted.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _within(module: str, layer: str) -> bool:
    return module == layer or module.startswith(layer + ".")


def _service_package(root: Path, module: str) -> str:
    """service.node.x and service.node itself -> service.node (a package under service/);
    service.guard -> service (a module of the shared root)."""
    parts = module.split(".")
    if len(parts) >= 2 and (root / "service" / parts[1] / "__init__.py").is_file():
        return ".".join(parts[:2])
    return "service"


DAEMON_MAY_IMPORT = ("daemon", "api", "service", "store", "system", "core", "_pb")
CLIENT_MAY_IMPORT = ("client", "core", "_pb")
# Below daemon/ and cli/: none of these imports either, not even daemon/config.py.
BELOW_DAEMON = ("api", "service", "core", "store", "system", "doctor")
WHY_MAY_IMPORT = ("why", "core")


def _role_violations(module: str, imported: str) -> Iterator[str]:
    """The edges of cli/, daemon/ and client/, for an import of the package's own."""
    if _within(imported, "cli"):
        if any(_within(module, layer) for layer in BELOW_DAEMON):
            yield f"{module} imports {imported}: cli/ is above it"
        elif not _within(module, "cli") and module != "__main__":
            yield f"{module} imports {imported}: cli/ is the top, only __main__ calls it"
        return
    if _within(module, "daemon") and not any(_within(imported, x) for x in DAEMON_MAY_IMPORT):
        yield f"{module} (daemon) imports {imported}, outside the daemon's layers"
    if _within(module, "client") and not any(_within(imported, x) for x in CLIENT_MAY_IMPORT):
        yield f"{module} (client) imports {imported}: a client needs only core/ and the stubs"
    if _within(imported, "why") and not _within(module, "why"):
        yield f"{module} imports {imported}: why/ is the kubectl plugin's, a product of its own"
    if _within(module, "why") and not any(_within(imported, x) for x in WHY_MAY_IMPORT):
        yield f"{module} (why) imports {imported}: the plugin needs only why/ and core/"
    if _within(module, "why.rules") and not any(
        _within(imported, x) for x in ("why.rules", "core")
    ):
        yield f"{module} (why.rules) imports {imported}, above the plugin's pure rules"
    if any(_within(module, layer) for layer in BELOW_DAEMON) and _within(imported, "daemon"):
        yield f"{module} imports {imported}: daemon/ is above it"


def layer_violations(root: Path, package: str = "csi_hostpath") -> list[str]:
    found = []
    for module, path in _modules(root):
        for imported in set(_imports(root, path, package)):
            ours = not imported.startswith(package) and (root / imported.split(".")[0]).exists()
            if _within(module, "why.rules") and imported.split(".")[0] in IO_MODULES:
                found.append(f"{module} (why.rules) does I/O: imports {imported}")
            if _within(module, "core"):
                top = imported.split(".")[0]
                if top in IO_MODULES:
                    found.append(f"{module} (core) does I/O: imports {imported}")
                elif ours and not _within(imported, "core"):
                    found.append(f"{module} (core) imports {imported}, above it")
            if not ours:
                continue
            found.extend(_role_violations(module, imported))
            below_api = any(_within(module, layer) for layer in ("core", "store", "system"))
            if (below_api or _within(module, "service")) and _within(imported, "api"):
                found.append(f"{module} imports {imported}: api/ is the top layer")
            if below_api and _within(imported, "service"):
                found.append(f"{module} imports {imported}: service/ is above it")
            if _within(module, "service") and _within(imported, "service"):
                mine, theirs = _service_package(root, module), _service_package(root, imported)
                if theirs not in ("service", mine):
                    found.append(f"{module} ({mine}) imports {imported}, another service package")
    return found


def sql_violations(root: Path, package: str = "csi_hostpath") -> list[str]:
    found = []
    for module, path in _modules(root):
        if _within(module, "store"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        # Docstrings may name SQL in prose (why a rule runs under BEGIN IMMEDIATE); code can't.
        prose = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        if "sqlite3" in {name.split(".")[0] for name in _imports(root, path, package)}:
            found.append(f"{module} imports sqlite3")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("execute", "executemany", "executescript", "_tx")
            ):
                found.append(f"{module}:{node.lineno} calls .{node.func.attr}()")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in prose
                and SQL.search(node.value)
            ):
                found.append(f"{module}:{node.lineno} holds SQL: {node.value[:60]!r}")
    return found


def test_the_package_keeps_its_layers() -> None:
    assert layer_violations(PACKAGE) == []


def test_only_the_store_runs_sql() -> None:
    assert sql_violations(PACKAGE) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name in (
        *("core", "store", "system", "service/node", "service/controller", "api"),
        *("cli", "daemon", "client", "volume_cli", "doctor", "why/rules"),
    ):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text("")
    for name, body in files.items():
        (root / name).write_text(body)
    return root


@pytest.mark.parametrize(
    ("name", "body", "expected"),
    [
        ("core/rule.py", "import os\n", "core) does I/O"),
        ("core/rule.py", "from pkg.store.db import Store\n", "core) imports store.db"),
        ("store/db.py", "from pkg.service.guard import InFlight\n", "service/ is above it"),
        ("system/loop.py", "from pkg.api import status\n", "api/ is the top layer"),
        ("service/guard.py", "from pkg.api.status import rpc\n", "api/ is the top layer"),
        (
            "service/node/stage.py",
            "from pkg.service.controller.ledger import PublishLedger\n",
            "another service package",
        ),
        (
            "service/inspect.py",
            "from pkg.service.node.heartbeat import NodeAgent\n",
            "another service package",
        ),
        # Through the other package's __init__, in each spelling of the import.
        (
            "service/node/stage.py",
            "from pkg.service.controller import ControllerService\n",
            "another service package",
        ),
        (
            "service/node/stage.py",
            "from pkg.service import controller\n",
            "another service package",
        ),
        ("service/node/stage.py", "import pkg.service.controller\n", "another service package"),
        ("daemon/server.py", "from pkg.cli.parser import build_parser\n", "cli/ is the top"),
        ("api/node.py", "from pkg import cli\n", "cli/ is above it"),
        ("volume_cli/main.py", "from pkg import cli\n", "cli/ is the top"),
        ("daemon/server.py", "from pkg.volume_cli import run\n", "(daemon) imports volume_cli"),
        ("client/requests.py", "from pkg.api.status import rpc\n", "(client) imports api"),
        ("client/requests.py", "import pkg.store.db\n", "(client) imports store"),
        ("service/node/stage.py", "from pkg.daemon.server import Driver\n", "daemon/ is above"),
        ("api/node.py", "from pkg.daemon import endpoint\n", "daemon/ is above it"),
        # The Config itself: a role takes typed values, and doctor/ sits below the daemon too.
        (
            "service/node/ctx.py",
            "from pkg.daemon.config import Config\n",
            "daemon/ is above it",
        ),
        ("service/metrics.py", "import pkg.daemon.config\n", "daemon/ is above it"),
        ("doctor/state.py", "from pkg.daemon.config import Mode\n", "daemon/ is above it"),
        ("store/db.py", "from pkg.cli.lookup import open_state\n", "cli/ is above it"),
        ("doctor/report.py", "from pkg.cli import parser\n", "cli/ is above it"),
        ("cli/main.py", "from pkg.why.command import run\n", "a product of its own"),
        ("why/reads.py", "from pkg.store.db import Store\n", "(why) imports store.db"),
        ("why/rules/phases.py", "import os\n", "why.rules) does I/O"),
        ("why/rules/phases.py", "from pkg.why import reads\n", "above the plugin's pure"),
    ],
)
def test_each_layer_rule_finds_a_deliberate_violation(
    tmp_path: Path, name: str, body: str, expected: str
) -> None:
    root = _tree(tmp_path, {name: body})
    found = layer_violations(root, "pkg")
    assert len(found) == 1 and expected in found[0], found


def climbing_imports(root: Path = PACKAGE, package: str = "csi_hostpath") -> list[str]:
    """Every import of daemon/ or cli/ by a module below them, as "module imports name"."""
    return sorted(
        f"{module} imports {imported}"
        for module, path in _modules(root)
        if any(_within(module, layer) for layer in BELOW_DAEMON)
        for imported in set(_imports(root, path, package))
        if _within(imported, "daemon") or _within(imported, "cli")
    )


def test_no_import_climbs_to_the_daemon_or_the_cli() -> None:
    """service/, core/, store/, system/, api/ and doctor/ import nothing of daemon/ or cli/."""
    found = climbing_imports()
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("import sqlite3\n", "imports sqlite3"),
        ("def f(db):\n    db.execute('x')\n", "calls .execute()"),
        ("def f(store):\n    with store._tx():\n        pass\n", "calls ._tx()"),
        ("Q = 'SELECT value FROM meta WHERE key=?'\n", "holds SQL"),
        ("Q = 'INSERT OR IGNORE INTO publications (a) VALUES (?)'\n", "holds SQL"),
    ],
)
def test_the_sql_rule_finds_a_deliberate_violation(
    tmp_path: Path, body: str, expected: str
) -> None:
    root = _tree(tmp_path, {"service/node/adopt.py": body, "store/db.py": body})
    found = sql_violations(root, "pkg")
    assert len(found) == 1 and expected in found[0] and "service.node.adopt" in found[0], found
