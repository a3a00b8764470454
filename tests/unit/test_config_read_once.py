"""Each role reads the Config in one place, its context's from_config.

Each role reads the Config in one place: no module of service/controller or service/node reads
an attribute of a Config outside its context's from_config (ControllerContext, NodeContext). A
part takes the context, and a flag it needs is a field there.

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
MAKER = "from_config"


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
    """Every read of a Config's attribute outside from_config, as module:line text."""
    tree = ast.parse(source, module)
    allowed = {
        id(sub)
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef) and func.name == MAKER
        for sub in ast.walk(func)
    }
    names = {"config"} | _config_params(tree)
    found = [
        (node.lineno, f"{module}:{node.lineno} reads {ast.unparse(node)}")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and id(node) not in allowed
        and _is_config(node.value, names)
    ]
    return [text for _, text in sorted(found)]


def config_takers(source: str, module: str) -> list[str]:
    """Every function but from_config with a parameter annotated Config, as module:line text:
    a part takes its role's context, so the daemon hands the Config to the maker alone."""
    tree = ast.parse(source, module)
    return [
        f"{module}:{func.lineno} {func.name} takes a Config"
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
        and func.name != MAKER
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


def test_each_role_reads_the_config_only_in_its_contexts_from_config() -> None:
    found = role_violations()
    assert found == [], "\n".join(found)


def test_no_part_of_a_role_takes_the_config() -> None:
    found = [text for module, source in role_modules() for text in config_takers(source, module)]
    assert found == [], "\n".join(found)


def test_a_part_that_takes_the_config_is_found() -> None:
    body = (
        "class Ctx:\n"
        "    @classmethod\n"
        "    def from_config(cls, config: Config) -> object:\n"
        "        return cls(config.node_id)\n"
        "class Service:\n"
        "    def __init__(self, config: 'Config', store) -> None:\n"
        "        self.ctx = Ctx.from_config(config)\n"
    )
    found = config_takers(HEAD + body, "service.node.example")
    assert found == ["service.node.example:7 __init__ takes a Config"], found


def test_each_role_has_its_one_reader() -> None:
    for role, context in (("controller", "controller_context"), ("node", "node_context")):
        source = (PACKAGE / "service" / role / f"{context}.py").read_text()
        assert f"def {MAKER}(" in source, role


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


def test_the_makers_reads_and_passing_the_config_on_are_allowed() -> None:
    body = (
        "class Ctx:\n"
        "    @classmethod\n"
        "    def from_config(cls, config: Config, store) -> object:\n"
        "        return cls(config.node_id, config.pool_scope, store)\n"
        "class Service:\n"
        "    def __init__(self, config: Config, store) -> None:\n"
        "        self.ctx = Ctx.from_config(config, store)\n"
    )
    assert config_reads(HEAD + body, "service.node.example") == []
