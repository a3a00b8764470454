"""The servicers call service methods only, never a service's parts (read with ast).

The servicers call service methods only: no module of api/ reads an attribute of an object it
holds from the layers below (service/, store/, system/) other than as a call of its method.
`self.service.stage(...)` is a call; `self.service.system.mounts`, `self.service.volumes.health`,
`self.service.config.max_volumes_per_node` and `self.store.path` reach past the service into its
parts and its wiring, and fail here.

An object is held when a class of api/ keeps it on self in __init__, from a parameter annotated
with a type imported from those layers (or built there by calling one); __init__'s own such
parameters are held within it, and a local name bound to a held object is held too. Passing a
held object on as an argument (`retry_when_full(self.room, ...)`) reads nothing of it and is
allowed. What a method returns, and what a function is given to convert (a listed volume, a
group's record), is data, not a held object. daemon/config.py's Config is the frozen record
handed down, not a service, so it is not a held object here.

The check runs on the package, and on small modules written here with one deliberate violation
each, so a checker that stopped finding anything would fail too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "csi_hostpath"
LOWER = ("service", "store", "system")  # the layers whose objects a servicer holds


def _lower_names(tree: ast.Module, package: str) -> set[str]:
    """The names the module imports from service/, store/ or system/."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] == package and len(parts) > 1 and parts[1] in LOWER:
                names.update(alias.asname or alias.name for alias in node.names)
    return names


def _names_in(node: ast.AST | None) -> set[str]:
    """Every bare name and dotted tail an annotation or a callee mentions."""
    if node is None:
        return set()
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            found.update(_names_in(ast.parse(sub.value, mode="eval")))  # a quoted annotation
    return found


def _held_params(func: ast.FunctionDef, lower: set[str]) -> set[str]:
    args = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
    return {a.arg for a in args if _names_in(a.annotation) & lower}


def _is_held(node: ast.expr, names: set[str], attrs: set[str]) -> bool:
    """Is node a held name, or self.<a held attribute>?"""
    if isinstance(node, ast.Name):
        return node.id in names
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr in attrs
    )


def _held_attrs(cls: ast.ClassDef, lower: set[str]) -> set[str]:
    """The attributes __init__ sets on self to a held parameter, or to an object it builds by
    calling a type of the layers below."""
    init = next(
        (f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None
    )
    if init is None:
        return set()
    params = _held_params(init, lower)
    attrs = set()
    for node in ast.walk(init):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        held = (isinstance(value, ast.Name) and value.id in params) or (
            isinstance(value, ast.Call) and _names_in(value.func) & lower
        )
        if not held:
            continue
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                attrs.add(target.attr)
    return attrs


def _methods(tree: ast.Module, lower: set[str]) -> Iterator[tuple[ast.FunctionDef, set[str]]]:
    """Each method of the module's classes, with the attributes its class holds."""
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            attrs = _held_attrs(cls, lower)
            for item in cls.body:
                if isinstance(item, ast.FunctionDef):
                    yield item, attrs


def attribute_reads(source: str, module: str, package: str = "csi_hostpath") -> list[str]:
    """Every read of a held object's attribute that is not a call of it, as module:line text."""
    tree = ast.parse(source, module)
    lower = _lower_names(tree, package)
    found: list[tuple[int, str]] = []
    for func, attrs in _methods(tree, lower):
        names = _held_params(func, lower) if func.name == "__init__" else set()
        for node in ast.walk(func):  # a local bound to a held object is held
            if (
                isinstance(node, ast.Assign)
                and _is_held(node.value, names, attrs)
                and all(isinstance(t, ast.Name) for t in node.targets)
            ):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        callees = {id(n.func) for n in ast.walk(func) if isinstance(n, ast.Call)}
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Attribute)
                and id(node) not in callees
                and _is_held(node.value, names, attrs)
            ):
                found.append((node.lineno, f"{module}:{node.lineno} reads {ast.unparse(node)}"))
    return [text for _, text in sorted(found)]


def api_violations(root: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted((root / "api").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        found.extend(attribute_reads(path.read_text(), module, root.name))
    return found


def test_no_api_module_reads_a_service_objects_attributes() -> None:
    found = api_violations()
    assert found == [], "\n".join(found)


HEAD = (
    "from csi_hostpath.service.node import NodeService\n"
    "from csi_hostpath.store.db import Store\n"
    "from csi_hostpath.daemon.config import Config\n"
)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # A part of the service, reached past it: in a method, and in __init__ itself.
        (
            "class S:\n"
            "    def __init__(self, service: NodeService) -> None:\n"
            "        self.service = service\n"
            "    def f(self):\n"
            "        return self.service.volumes.health()\n",
            "reads self.service.volumes",
        ),
        (
            "class S:\n"
            "    def __init__(self, service: NodeService) -> None:\n"
            "        self.lookups = service.system.mounts.shared_lookups\n",
            "reads service.system",
        ),
        # A plain attribute, a bound method kept for later, and one under another name.
        (
            "class S:\n"
            "    def __init__(self, node: NodeService | None = None) -> None:\n"
            "        self.node = node\n"
            "    def f(self):\n"
            "        return self.node.node_id\n",
            "reads self.node.node_id",
        ),
        (
            "class S:\n"
            "    def __init__(self, service: 'NodeService') -> None:\n"
            "        self.service = service\n"
            "    def f(self):\n"
            "        g = self.service.stats\n"
            "        return g()\n",
            "reads self.service.stats",
        ),
        (
            "class S:\n"
            "    def __init__(self, store: Store) -> None:\n"
            "        self.store = store\n"
            "    def f(self):\n"
            "        s = self.store\n"
            "        return s.path\n",
            "reads s.path",
        ),
        # Built in __init__ by the servicer itself.
        (
            "class S:\n"
            "    def __init__(self, path) -> None:\n"
            "        self.store = Store(path)\n"
            "    def f(self):\n"
            "        return self.store.path\n",
            "reads self.store.path",
        ),
    ],
)
def test_each_deliberate_read_is_found(body: str, expected: str) -> None:
    found = attribute_reads(HEAD + body, "api.example")
    assert len(found) == 1 and expected in found[0], found


def test_calls_passing_on_data_and_the_config_record_are_allowed() -> None:
    body = (
        "def to_pb(record: Store) -> str:\n"
        "    return record.group_id\n"
        "class S:\n"
        "    def __init__(self, service: NodeService, config: Config, room) -> None:\n"
        "        self.service = service\n"
        "        self.config = config\n"
        "        self.room = room\n"
        "    @staticmethod\n"
        "    def g(metadata: NodeService) -> object:\n"
        "        return metadata.pages\n"
        "    def f(self, request):\n"
        "        with self.service.shared_lookups():\n"
        "            result = self.service.stats(request.volume_id)\n"
        "            retry(self.service, self.room.size)\n"
        "            return result.total_bytes, self.config.driver_name\n"
    )
    assert attribute_reads(HEAD + body, "api.example") == []
