"""Each role reads the Config in one place, its context's maker in daemon/.

Each role reads the Config in one place: the daemon's maker of its context
(daemon/node_role.py's node_context, daemon/controller_role.py's controller_context) reads the
flags into the typed context (NodeContext, ControllerContext), and no module of service/controller
or service/node reads an attribute of a Config, or takes one. A part takes the context, and a flag
it needs is a field there. (That service/ cannot even import the Config is
tests/unit/test_layering.py's.)

A Config is a name `config`, an attribute `.config` (self.config), or a parameter annotated
Config under any name. The check runs on the package, and on small modules written here with one
deliberate read each, so a checker that stopped finding anything would fail too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "csi_hostpath"
ROLES = ("service/controller", "service/node")
# Where the daemon makes each role's context from the Config: (module, maker, context).
MAKERS = (
    ("daemon/node_role.py", "node_context", "NodeContext"),
    ("daemon/controller_role.py", "controller_context", "ControllerContext"),
)


def _config_params(tree: ast.Module) -> set[str]:
    """The names of every parameter annotated Config (quoted or not)."""
    names = set()
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
            for arg in args:
                text = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if "Config" in text.replace("'", "").replace('"', "").split(" | "):
                    names.add(arg.arg)
    return names


def _is_config(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Attribute) and node.attr == "config"


def config_reads(source: str, module: str) -> list[str]:
    """Every read of a Config's attribute, as module:line text."""
    tree = ast.parse(source, module)
    names = {"config"} | _config_params(tree)
    found = [
        (node.lineno, f"{module}:{node.lineno} reads {ast.unparse(node)}")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and _is_config(node.value, names)
    ]
    return [text for _, text in sorted(found)]


def config_takers(source: str, module: str) -> list[str]:
    """Every function with a parameter annotated Config, as module:line text: a part takes its
    role's context, so the daemon hands the Config to its maker alone."""
    tree = ast.parse(source, module)
    return [
        f"{module}:{func.lineno} {func.name} takes a Config"
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
        and _config_params(ast.Module(body=[func], type_ignores=[]))
    ]


def role_modules(root: Path = PACKAGE) -> list[tuple[str, str]]:
    """(module name, source) of every module of the roles."""
    return [
        (".".join(path.relative_to(root).with_suffix("").parts), path.read_text())
        for role in ROLES
        for path in sorted((root / role).rglob("*.py"))
    ]


def role_violations(root: Path = PACKAGE) -> list[str]:
    found = []
    for role in ROLES:
        for path in sorted((root / role).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            found.extend(config_reads(path.read_text(), module))
    return found


def test_no_part_of_a_role_reads_the_config() -> None:
    found = role_violations()
    assert found == [], "\n".join(found)


def test_no_part_of_a_role_takes_the_config() -> None:
    found = [text for module, source in role_modules() for text in config_takers(source, module)]
    assert found == [], "\n".join(found)


def test_a_part_that_takes_the_config_is_found() -> None:
    body = (
        "class Service:\n"
        "    def __init__(self, ctx, store) -> None:\n"
        "        self.ctx = ctx\n"
        "def make(config: 'Config', store) -> Service:\n"
        "    return Service(None, store)\n"
    )
    found = config_takers(HEAD + body, "service.node.example")
    assert found == ["service.node.example:5 make takes a Config"], found


def test_each_role_has_its_one_reader() -> None:
    """The daemon's maker of each context is the one place it is made: no other module builds
    a NodeContext or a ControllerContext (the tests' builders call the makers)."""
    for module, maker, context in MAKERS:
        assert f"def {maker}(" in (PACKAGE / module).read_text(), module
        builders = [
            str(path.relative_to(PACKAGE))
            for path in sorted(PACKAGE.rglob("*.py"))
            if f"{context}(" in path.read_text()
        ]
        assert builders == [module], (context, builders)


HEAD = "from csi_hostpath.daemon.config import Config\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # A function of the role given the Config.
        (
            "def serves(config: Config, segment) -> bool:\n"
            "    return segment.get('key') == config.node_id\n",
            "reads config.node_id",
        ),
        # A part that keeps it and reads it later.
        (
            "class Part:\n"
            "    def __init__(self, config: Config) -> None:\n"
            "        self.config = config\n"
            "    def f(self) -> float:\n"
            "        return self.config.node_grace\n",
            "reads self.config.node_grace",
        ),
        # Under another name, the annotation quoted.
        (
            "def choose(cfg: 'Config') -> object:\n    return cfg.pool_scope\n",
            "reads cfg.pool_scope",
        ),
        # In a function that is not the context's maker.
        (
            "class Ctx:\n"
            "    @classmethod\n"
            "    def from_flags(cls, config: Config) -> object:\n"
            "        return cls(config.max_volume_size)\n",
            "reads config.max_volume_size",
        ),
    ],
)
def test_each_deliberate_read_is_found(body: str, expected: str) -> None:
    found = config_reads(HEAD + body, "service.controller.example")
    assert len(found) == 1 and expected in found[0], found
