#!/bin/sh
# Runs INSIDE the driver image. With no argument (buildah run, before the image is published):
# the CLI answers --help, and `serve` on a socket in a temp directory answers the CSI Identity
# calls. With a SOCKET (`images.sh check`, beside the image's own entrypoint serving it): only
# asks SOCKET. Either way the node plugin's tools must be there. Prints one last line naming the
# plugin and its readiness.
set -eu

version=$(csi-hostpath --version)
# What the node plugin shells out to (csi_hostpath/system/linux*.py), and the kernel's uevent
# socket it reads for loop-device changes (csi_hostpath/system/linux/uevents.py).
for tool in blkid mkfs.ext4 e2fsck resize2fs mkfs.xfs xfs_growfs mount umount; do
  command -v "$tool" >/dev/null || { echo "driver-smoke: $tool is not in the image" >&2; exit 1; }
done
python3 -c 'import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15).bind((0, 1))'
if [ $# -eq 1 ]; then
  sock=$1
else
  csi-hostpath --help >/dev/null
  dir=$(mktemp -d)
  sock=$dir/csi.sock
  csi-hostpath serve --endpoint "unix://$sock" --mode controller --node-id image-check \
    --state-dir "$dir/state" --log-level WARNING &
  pid=$!
  trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
fi

python3 - "$sock" "$version" <<'EOF'
import sys
import time

import grpc

from csi_hostpath._pb import csi_pb2, csi_pb2_grpc

sock, version = sys.argv[1], sys.argv[2]
channel = grpc.insecure_channel(f"unix://{sock}")
identity = csi_pb2_grpc.IdentityStub(channel)
deadline = time.monotonic() + 60
while True:
    try:
        info = identity.GetPluginInfo(csi_pb2.GetPluginInfoRequest(), timeout=5)
        ready = identity.Probe(csi_pb2.ProbeRequest(), timeout=5).ready.value
        break
    except grpc.RpcError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
print(f"{version}: serve answered GetPluginInfo {info.name} {info.vendor_version}, Probe ready={ready}")
EOF
