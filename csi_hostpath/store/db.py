"""Durable state in sqlite: the controller's catalog of volumes and snapshots (catalog.py), the
publish ledger and audit trail (ledger_store.py), and a node's record of what it staged and
published (node_records.py), on one connection (connection.py). In --mode all one database holds
both the controller's tables and the node's."""

from __future__ import annotations

from csi_hostpath.store.catalog import Catalog
from csi_hostpath.store.ledger_store import Ledger
from csi_hostpath.store.node_records import NodeRecords
from csi_hostpath.store.rows import AuditEntry

__all__ = ["AuditEntry", "Store"]


class Store(Catalog, Ledger, NodeRecords):
    """Every table of the state database, through one connection and one write lock."""
