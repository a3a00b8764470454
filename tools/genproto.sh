#!/usr/bin/env bash
# Regenerate the Python gRPC stubs for proto/csi.proto (the CSI spec) and
# proto/pluginregistration.proto (the kubelet's plugin registration API).
#
# Usage: tools/genproto.sh [OUT_DIR]    (default: csi_hostpath/_pb)
#
# Needs grpcio-tools and mypy-protobuf (protoc-gen-mypy, protoc-gen-mypy_grpc
# on PATH). The interpreter is $PYTHON, or `python` from PATH.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
OUT="${1:-csi_hostpath/_pb}"

cd "$ROOT"
mkdir -p "$OUT"

"$PYTHON" -m grpc_tools.protoc \
  -Iproto \
  --python_out="$OUT" \
  --grpc_python_out="$OUT" \
  --mypy_out="$OUT" \
  --mypy_grpc_out="$OUT" \
  proto/csi.proto proto/pluginregistration.proto

# protoc emits top-level imports of the sibling module; the stubs live in a
# package, so make those imports package-relative.
for name in csi pluginregistration; do
  for f in "$OUT/${name}_pb2_grpc.py" "$OUT/${name}_pb2.pyi" "$OUT/${name}_pb2_grpc.pyi"; do
    [ -f "$f" ] || continue
    sed -i -E \
      -e "s/^import ${name}_pb2 as (.*)\$/from . import ${name}_pb2 as \\1/" \
      -e "s/^import ${name}_pb2\$/from . import ${name}_pb2/" \
      "$f"
  done
done
