"""The node plugin: NodeService (service.py) and its parts, the kernel steps for one volume
(node_mounts.py), the CO's paths (paths.py), inline volumes (inline.py), the repair on start
(repair.py, adopt.py), the heartbeat and fence thread (heartbeat.py), the checks a stage makes
(stage_checks.py), expansion, stats and health of staged volumes (staged_volumes.py), loop
devices detached behind the driver's back (device_watch.py), I/O tuning (tuning.py), filesystem
freezes (freeze.py, freeze_server.py) and NodeGetInfo's answer (its volume limit:
core/volume_limit.py)."""

from csi_hostpath.service.node.service import NodeService

__all__ = ["NodeService"]
