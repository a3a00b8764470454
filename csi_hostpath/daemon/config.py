"""The driver's configuration, built once by the CLI and passed down explicitly."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from csi_hostpath.core.model import PoolScope

DEFAULT_DRIVER_NAME = "loop.hostpath.csi.dev"
DEFAULT_MAX_INLINE_SIZE = 1 << 30  # the chart's inline.maxSize default


class Mode(enum.Enum):
    ALL = "all"
    CONTROLLER = "controller"
    NODE = "node"


@dataclass(frozen=True, slots=True)
class Config:
    endpoint: str
    node_id: str
    state_dir: Path
    pool_dir: Path
    pool_scope: PoolScope = PoolScope.LOCAL
    mode: Mode = Mode.ALL
    driver_name: str = DEFAULT_DRIVER_NAME
    max_volume_size: int = 0  # 0 = limited only by the pool
    overcommit_ratio: float = 1.0  # sizes of all volumes <= pool room x ratio (core/capacity.py)
    # 0 = no cap; NodeGetInfo still reports the loop devices left (core/volume_limit.py).
    max_volumes_per_node: int = 0
    log_level: str = "INFO"
    fence_interval: float = 5.0
    heartbeat_interval: float = 2.0
    node_grace: float = 60.0
    node_lost_after: float = 900.0  # a node silent this long is lost (core/nodeloss.py)
    max_freeze_seconds: float = 30.0  # a snapshot's freeze is thawed by a watchdog after this
    workers: int = 16
    metrics_address: str = ""  # HOST:PORT for Prometheus; "" = no metrics endpoint
    # The ledger's read-only view of a volume on the metrics address (daemon/status_http.py).
    ledger_view: bool = False
    log_format: str = "text"  # "text" (key=value) or "json"
    # NodeStage takes the node's own hold when the CO does no attach (local scope, mode all only).
    self_publish: bool = False
    # Inline ephemeral volumes escape every quota (any pod author can ask for one), so they are
    # opt-in, and each is capped.
    allow_inline_volumes: bool = False
    max_inline_size: int = DEFAULT_MAX_INLINE_SIZE

    @property
    def serves_controller(self) -> bool:
        return self.mode in (Mode.ALL, Mode.CONTROLLER)

    @property
    def serves_node(self) -> bool:
        return self.mode in (Mode.ALL, Mode.NODE)

    @property
    def topology_key(self) -> str:
        return f"topology.{self.driver_name}/node"

    @property
    def socket_path(self) -> Path:
        if not self.endpoint.startswith("unix://"):
            raise ValueError(f"endpoint must be unix:///absolute/path, got {self.endpoint!r}")
        path = Path(self.endpoint[len("unix://") :])
        if not path.is_absolute():
            raise ValueError(f"endpoint path must be absolute, got {self.endpoint!r}")
        return path
