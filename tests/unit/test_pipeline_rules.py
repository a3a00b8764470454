"""Servicers translate and the call pipeline does the rest: few pure delegations, no scope by hand.

Read with ast from the package's source:

- a pure delegation is a function or method whose body, after an optional docstring, is one
  `return self.a.b(...)` or one `self.a.b(...)` statement (the callee an attribute chain from
  self, two steps or more) passing exactly its own parameters, in order. api/ and service/ hold
  at most three, each named in KEPT below and with its reason in a comment at its definition;
  on the old tree (71b7c67) the scan found 17 (NodeService.expand, stats, health,
  storage_health, beat, fence_revoked and shared_lookups, ControllerService.delete_snapshot,
  list_snapshots, get_snapshot and shared_lookups, both servicers' shared_lookups, ...).
- no servicer body (a method of a class in api/*.py) mentions the mount-lookup scope
  (`shared_lookups`, `lookups`) or the disk-full retry (`retry_when_full`): the pipeline
  (api/runtime/pipeline.py) opens them around every call, in one place.

Each checker also runs on a small source written here with one deliberate case, so a checker
that stopped finding anything would fail too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from csi_hostpath._pb import csi_pb2
from csi_hostpath.api.runtime.pipeline import TEARDOWNS

PACKAGE = Path(__file__).resolve().parents[2] / "csi_hostpath"
MOST = 3
# Each pure delegation kept, as "path:qualified name"; its reason is a comment at its definition.
KEPT = frozenset({"service/node/adopt.py:Unclaimed.get"})
SCOPE_AND_RETRY = ("lookups", "retry_when_full")


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef]]:
    """(qualified name, definition) of each function and method, nested ones too."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef):
                yield f"{prefix}{child.name}", child
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")

    yield from walk(tree, "")


def _parameters(func: ast.FunctionDef) -> list[str]:
    args = func.args
    names = [a.arg for a in [*args.posonlyargs, *args.args]]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return names + [a.arg for a in args.kwonlyargs]


def _from_self(callee: ast.expr) -> bool:
    """self.a.b, self.a.b.c, ...: an attribute chain of two steps or more from self."""
    steps = 0
    while isinstance(callee, ast.Attribute):
        callee, steps = callee.value, steps + 1
    return isinstance(callee, ast.Name) and callee.id == "self" and steps >= 2


def is_pure_delegation(func: ast.FunctionDef) -> bool:
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)):
        return False
    call = body[0].value
    if not isinstance(call, ast.Call) or not _from_self(call.func):
        return False
    passed = [a.id if isinstance(a, ast.Name) else None for a in call.args]
    passed += [
        k.value.id if isinstance(k.value, ast.Name) and k.arg == k.value.id else None
        for k in call.keywords
    ]
    return passed == _parameters(func)


def delegations(source: str, where: str) -> list[str]:
    found = ast.parse(source, where)
    return [f"{where}:{name}" for name, func in _functions(found) if is_pure_delegation(func)]


def package_delegations(root: Path = PACKAGE) -> list[str]:
    found = []
    for folder in ("api", "service"):
        for path in sorted((root / folder).rglob("*.py")):
            found.extend(delegations(path.read_text(), path.relative_to(root).as_posix()))
    return found


def _comment_above(path: Path, name: str) -> str:
    """The comment lines right above the definition of name (a method's qualified name)."""
    tree = ast.parse(path.read_text())
    func = dict(_functions(tree))[name]
    first = min([func.lineno, *(d.lineno for d in func.decorator_list)])
    lines = path.read_text().splitlines()[: first - 1]
    comment: list[str] = []
    while lines and lines[-1].strip().startswith("#"):
        comment.insert(0, lines.pop().strip())
    return " ".join(comment)


def test_at_most_three_pure_delegations_each_kept_for_a_reason() -> None:
    """On 71b7c67: 17 pure delegations in api/ and service/; here: the ones KEPT names."""
    found = package_delegations()
    assert len(found) <= MOST, found
    assert set(found) == KEPT, "\n".join(found)
    for kept in sorted(KEPT):
        path, name = kept.split(":")
        assert len(_comment_above(PACKAGE / path, name)) > 20, f"{kept}: no reason given above it"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("class S:\n    def f(self, a, b):\n        return self.x.f(a, b)\n", ["m.py:S.f"]),
        ("class S:\n    def f(self):\n        '''Doc.'''\n        self.x.y.z()\n", ["m.py:S.f"]),
        ("class S:\n    def f(self, a):\n        return self.x.f(a=a)\n", ["m.py:S.f"]),
        # Not a delegation: another argument, another order, more work, a call on self itself.
        ("class S:\n    def f(self, a):\n        return self.x.f(a, 1)\n", []),
        ("class S:\n    def f(self, a, b):\n        return self.x.f(b, a)\n", []),
        ("class S:\n    def f(self, a):\n        log(a)\n        return self.x.f(a)\n", []),
        ("class S:\n    def f(self, a):\n        return self.f2(a)\n", []),
    ],
)
def test_the_delegation_scan_finds_a_deliberate_one(body: str, expected: list[str]) -> None:
    assert delegations(body, "m.py") == expected


def _servicer_mentions(source: str, where: str) -> list[str]:
    """Each mention of the lookup scope or the retry in a method of a class of source."""
    found = []
    for cls in ast.parse(source, where).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for func in cls.body:
            if not isinstance(func, ast.FunctionDef):
                continue
            for node in ast.walk(func):
                name = (
                    node.attr
                    if isinstance(node, ast.Attribute)
                    else node.id
                    if isinstance(node, ast.Name)
                    else None
                )
                if name is not None and any(word in name for word in SCOPE_AND_RETRY):
                    line = getattr(node, "lineno", func.lineno)
                    found.append(f"{where}:{line} {cls.name}.{func.name}: {name}")
    return found


def servicer_mentions(root: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted((root / "api").glob("*.py")):
        found.extend(_servicer_mentions(path.read_text(), path.relative_to(root).as_posix()))
    return found


def test_no_servicer_body_opens_the_lookup_scope_or_the_retry() -> None:
    """The pipeline opens both around every call; on 71b7c67, 25 servicer bodies opened the
    scope and 4 ran the retry by hand."""
    found = servicer_mentions()
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    "body",
    [
        "class S:\n    def f(self, r, c):\n        with self.shared_lookups():\n            pass\n",
        "class S:\n    def f(self, r, c):\n        retry_when_full(self.room, lambda: 1)\n",
        "class S:\n    def f(self, r, c):\n        with self.service.system.mounts.lookups.scope():"
        "\n            pass\n",
    ],
)
def test_the_servicer_scan_finds_a_deliberate_mention(body: str) -> None:
    assert len(_servicer_mentions(body, "api/m.py")) >= 1


def test_every_teardown_the_pipeline_retries_is_a_served_rpc() -> None:
    """The policy table names methods by their full path: a typo would retry nothing."""
    methods = {
        f"/{service.full_name}/{method.name}"
        for service in csi_pb2.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert methods >= TEARDOWNS
