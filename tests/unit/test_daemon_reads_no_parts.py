"""The daemon reads no part of a service object it wires (read with ast).

daemon/ builds the service objects and wires them together, and is held to the servicers' rule
(tests/unit/test_servicers_call_methods.py) without the parts: it hands on what it made, never a
part of a service it made. Wiring adds: every parameter annotated with a type of the layers
below is held (not only __init__'s), so is a local bound to a call of one, and a dataclass field
annotated with one; and a method of such a type handed on as a call's argument
(`RpcLog(metrics.observe)`) is a call deferred, not a read. Each rule is also run on a small
module with one deliberate violation, so a checker that stopped finding anything would fail too.
"""

from __future__ import annotations

import pytest

from tests.unit.test_servicers_call_methods import HEAD, attribute_reads, daemon_violations


def test_the_daemon_reads_no_service_objects_attributes() -> None:
    found = daemon_violations()
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # A function's parameter; a local built by a call of a type, or a choice of one.
        (
            "def f(node: NodeService | None) -> object:\n    return node.system\n",
            "reads node.system",
        ),
        (
            "def f(config: Config, store: Store) -> object:\n"
            "    node = NodeService(config, store) if config.serves_node else None\n"
            "    return Readiness(config, node.system if node else None)\n",
            "reads node.system",
        ),
        (
            "def f(path) -> object:\n    store = Store(path)\n    return store.path\n",
            "reads store.path",
        ),
        # A dataclass field, reached past.
        (
            "class Driver:\n"
            "    node: NodeService | None\n"
            "    def f(self) -> None:\n"
            "        self.node.agent.beat()\n",
            "reads self.node.agent",
        ),
        # A part handed on: not a method of the type, so a read.
        (
            "def f(node: NodeService) -> object:\n    return SelfPublish(node.ledger)\n",
            "reads node.ledger",
        ),
    ],
)
def test_each_deliberate_read_by_the_daemon_is_found(body: str, expected: str) -> None:
    found = attribute_reads(HEAD + body, "daemon.example", wiring=True)
    assert len(found) == 1 and expected in found[0], found


def test_the_daemon_may_call_hand_on_and_pass_a_method_as_a_callback() -> None:
    body = (
        "def f(node: NodeService, store: Store, config: Config) -> object:\n"
        "    node.reconcile()\n"
        "    return Servicer(node, store, node.frozen, config.node_id)\n"
    )
    assert attribute_reads(HEAD + body, "daemon.example", wiring=True) == []
