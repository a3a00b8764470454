"""(i) Controller calls with many volumes in the pool: CreateVolume and GetCapacity with 10 and
2,000 block volumes in it, none of them held by a node.

The thin-capacity rule needs every volume's allocation; measured afresh on each call, one stat
per volume made CreateVolume 25 ms with 2,000 volumes against 4.7 ms with 10. A plugin of its own
(block volumes: nothing to attach or mount) fills the pool to each level, a few at a time and
untimed; then, in each of `samples` rounds, one GetCapacity and one CreateVolume of a new volume
are timed (after a warm-up round), and that volume is deleted again. Every volume is deleted at
the end.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.harness import MiB, Plugin, Stubs
from bench.stats import summary
from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.client.csi_requests import block_cap

LEVELS = (10, 2000)
SIZE = MiB
_FILLERS = 4


def _create(stubs: Stubs, name: str) -> str:
    return str(
        stubs.controller.CreateVolume(rq.create_volume(name, block_cap(), SIZE)).volume.volume_id
    )


def pool_scale(work: Path, node_id: str, levels: tuple[int, ...], samples: int) -> dict[str, Any]:
    # Thousands of sparse volumes promise more than the disk holds, though they use little.
    plugin = Plugin(work / "plugin", node_id, extra=("--overcommit-ratio", "1000"))
    stubs = plugin.start()
    made: list[str] = []
    out: dict[str, Any] = {"levels": {}, "samples": samples, "size_bytes": SIZE}
    try:
        with ThreadPoolExecutor(max_workers=_FILLERS) as fill:
            for level in levels:
                names = [f"fill-{n}" for n in range(len(made), level)]
                made += fill.map(lambda name: _create(stubs, name), names)
                creates, capacities = [], []
                for index in range(samples + 1):
                    start = time.perf_counter()
                    stubs.controller.GetCapacity(pb.GetCapacityRequest())
                    middle = time.perf_counter()
                    volume_id = _create(stubs, f"m-{level}-{index}")
                    end = time.perf_counter()
                    stubs.controller.DeleteVolume(rq.delete_volume(volume_id))  # back to the level
                    if index:  # the first round is a warm-up
                        capacities.append(middle - start)
                        creates.append(end - middle)
                out["levels"][str(level)] = {
                    "volumes": level,
                    "CreateVolume": summary(creates),
                    "GetCapacity": summary(capacities),
                }
                print(
                    f"  {level} volumes: CreateVolume p50 "
                    f"{out['levels'][str(level)]['CreateVolume']['p50_ms']:.2f} ms",
                    flush=True,
                )
            list(fill.map(lambda v: stubs.controller.DeleteVolume(rq.delete_volume(v)), made))
    finally:
        stubs.close()
        plugin.stop()
    return out
