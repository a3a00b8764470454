"""Print the loop devices the driver attached for the given node IDs (kind's node names).

    python3 tools/kind/loops.py NODE...

A kind node's loop devices are the host kernel's: deleting the node detaches none of them, and
the backing file's path the kernel reports is the one the node plugin's container saw (or a
deleted file once the node's /var volume is gone), so neither path nor inode tells whose a
device is afterwards. The driver's tag does: it sets lo_file_name to a prefix of its node ID's
key on every device it attaches (core/naming.py's loop_tag_prefix). tools/kind/down.sh detaches
what this prints; tools/kind-e2e.sh checks that nothing is printed at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from csi_hostpath.core.naming import loop_tag_prefix
from csi_hostpath.system.linux.loop_ioctl import loop_devices, read_tag


def tagged(nodes: list[str]) -> list[str]:
    prefixes = tuple(loop_tag_prefix(n) for n in nodes)
    found = []
    for index, bound in loop_devices():
        if not bound:
            continue
        device = f"/dev/loop{index}"
        try:
            tag = read_tag(device)
        except OSError:
            continue
        if tag and tag.startswith(prefixes):
            found.append(device)
    return found


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for device in tagged(argv):
        print(device)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
