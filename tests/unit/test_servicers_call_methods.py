"""The servicers translate: they call a service, or one of its parts, never its wiring (ast).

The servicers translate requests and replies, and call what does the work: no module of api/
reads an attribute of an object it holds from the layers below (service/, store/, system/) other
than as a call of its method, or of a method of one of its parts. `self.service.stage(...)` is a
call; so is `self.service.volumes.stats(...)`, a part's method called directly where the service
would add nothing but a pass-through. A part is what a service's __init__ makes from a class of
service/ (NodeService's StagedVolumes, ControllerService's Snapshots and GroupSnapshots), or a
field of a system-layer record (System's mounts, which the call pipeline's lookup scope opens).
`self.service.system.mounts` and `self.service.store.get_volume(...)` (the service's wiring, not
its parts), `self.service.volumes.mounts.stage(...)` (one step past a part),
`self.service.config.max_volumes_per_node` and `self.store.path` (data read off a held object)
reach past the service, and fail here.

An object is held when a class of api/ keeps it on self in __init__, from a parameter annotated
with a type imported from those layers (or built there by calling one); __init__'s own such
parameters are held within it, and a local name bound to a held object is held too. Passing a
held object on as an argument (`retry_when_full(self.room, ...)`) reads nothing of it and is
allowed. What a method returns, and what a function is given to convert (a listed volume, a
group's record), is data, not a held object. daemon/config.py's Config is the frozen record
handed down, not a service, so it is not a held object here.

daemon/, which wires the service objects together, is held to the same rule without the parts
(tests/unit/test_daemon_reads_no_parts.py).

The check runs on the package, and on small modules written here with one deliberate violation
each, so a checker that stopped finding anything would fail too.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "csi_hostpath"
LOWER = ("service", "store", "system")  # the layers whose objects a servicer holds


def _lower_imports(tree: ast.Module, package: str) -> Iterator[ast.ImportFrom]:
    """The module's imports from service/, store/ or system/."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] == package and len(parts) > 1 and parts[1] in LOWER:
                yield node


def _lower_names(tree: ast.Module, package: str) -> set[str]:
    """The names the module imports from service/, store/ or system/."""
    return {a.asname or a.name for node in _lower_imports(tree, package) for a in node.names}


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


def _fields(cls: ast.ClassDef, lower: set[str]) -> set[str]:
    """A dataclass's fields annotated with a type of the layers below."""
    return {
        item.target.id
        for item in cls.body
        if isinstance(item, ast.AnnAssign)
        and isinstance(item.target, ast.Name)
        and _names_in(item.annotation) & lower
    }


def _functions(
    tree: ast.Module, lower: set[str], wiring: bool
) -> Iterator[tuple[ast.FunctionDef, set[str]]]:
    """Each method of the module's classes, with the attributes its class holds; in wiring, the
    module's functions too."""
    for item in tree.body if wiring else ():
        if isinstance(item, ast.FunctionDef):
            yield item, set()
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            attrs = _held_attrs(cls, lower) | (_fields(cls, lower) if wiring else set())
            for item in cls.body:
                if isinstance(item, ast.FunctionDef):
                    yield item, attrs


def _built(node: ast.expr, lower: set[str]) -> bool:
    """A call of a name from the layers below, or a choice between such a call and another."""
    if isinstance(node, ast.IfExp):
        return _built(node.body, lower) or _built(node.orelse, lower)
    return isinstance(node, ast.Call) and bool(_names_in(node.func) & lower)


def _lower_methods(tree: ast.Module, package: str) -> set[str]:
    """The names of the methods of every class the module imports from the layers below."""
    found: set[str] = set()
    for node in _lower_imports(tree, package):
        imported = importlib.import_module(str(node.module))
        for alias in node.names:
            cls = getattr(imported, alias.name, None)
            if inspect.isclass(cls):
                found.update(n for n, v in inspect.getmembers(cls) if inspect.isfunction(v))
    return found


def _made_parts(cls: type, package: str) -> set[str]:
    """The attributes cls's own __init__ sets on self to an object of a class of service/."""
    init = vars(cls).get("__init__")
    if not inspect.isfunction(init) or init.__module__ != cls.__module__:
        return set()
    module = inspect.getmodule(cls)
    found: set[str] = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(init)))):
        if not (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
        ):
            continue
        made = getattr(module, node.value.func.id, None)
        if inspect.isclass(made) and made.__module__.startswith(f"{package}.service."):
            found.update(
                t.attr
                for t in node.targets
                if isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            )
    return found


def _parts(tree: ast.Module, package: str) -> set[str]:
    """The parts of every class the module imports from the layers below: what a service makes
    from a class of service/, and a record's fields (System's)."""
    found: set[str] = set()
    for node in _lower_imports(tree, package):
        imported = importlib.import_module(str(node.module))
        for alias in node.names:
            cls = getattr(imported, alias.name, None)
            if not inspect.isclass(cls):
                continue
            if dataclasses.is_dataclass(cls):
                found.update(f.name for f in dataclasses.fields(cls))
            else:
                found.update(_made_parts(cls, package))
    return found


def attribute_reads(
    source: str, module: str, package: str = "csi_hostpath", *, wiring: bool = False
) -> list[str]:
    """Every read of a held object's attribute that is not a call of it, as module:line text."""
    tree = ast.parse(source, module)
    lower = _lower_names(tree, package)
    methods = _lower_methods(tree, package) if wiring else set()
    parts = set() if wiring else _parts(tree, package)
    found: list[tuple[int, str]] = []
    for func, attrs in _functions(tree, lower, wiring):
        names = _held_params(func, lower) if wiring or func.name == "__init__" else set()
        for node in ast.walk(func):  # a local bound to a held object is held
            if (
                isinstance(node, ast.Assign)
                and (_is_held(node.value, names, attrs) or (wiring and _built(node.value, lower)))
                and all(isinstance(t, ast.Name) for t in node.targets)
            ):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        calls = [n for n in ast.walk(func) if isinstance(n, ast.Call)]
        callees = {id(n.func) for n in calls}
        # A part's method called: held.part.method(...), one step past the held object.
        callees |= {
            id(n.func.value)
            for n in calls
            if isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Attribute)
            and n.func.value.attr in parts
        }
        callbacks = {
            id(arg)
            for n in calls
            for arg in [*n.args, *(k.value for k in n.keywords)]
            if isinstance(arg, ast.Attribute) and arg.attr in methods
        }
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Attribute)
                and id(node) not in callees | callbacks
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


def daemon_violations(root: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted((root / "daemon").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        found.extend(attribute_reads(path.read_text(), module, root.name, wiring=True))
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
            "        return self.service.store.get_volume('v')\n",
            "reads self.service.store",
        ),
        # A part reached past: one step beyond it.
        (
            "class S:\n"
            "    def __init__(self, service: NodeService) -> None:\n"
            "        self.service = service\n"
            "    def f(self):\n"
            "        return self.service.volumes.mounts.stage('v')\n",
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


def test_calls_of_a_service_or_its_parts_data_and_the_config_record_are_allowed() -> None:
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
        "        with self.service.paths.judged('p', 'where'):\n"
        "            result = self.service.volumes.stats(request.volume_id)\n"
        "            retry(self.service, self.room.size)\n"
        "            return result.total_bytes, self.config.driver_name\n"
    )
    assert attribute_reads(HEAD + body, "api.example") == []
