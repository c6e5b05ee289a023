#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches NVIDIA's NCCL (header and libnccl.so.2) from its PyPI wheel, the reference the
# drop-in's tests compare papccl's nccl.h and libnccl.so.2 with (ABI facts, exports, a
# program built on NVIDIA's header). Idempotent: an unpacked copy is reused. Prints the
# prefix (holding include/nccl.h and lib/libnccl.so.2) on its last line.
#
# usage: scripts/fetch-nccl-ref.sh
#   PAPCCL_NCCL_REF_VERSION=V   the nvidia-nccl-cu13 version (default: python/nccl-ref.txt)
#   PAPCCL_VENV=DIR             the environment whose pip downloads it (scripts/setup-venv.sh)
#   PAPCCL_SKIP_FETCH=1         only look: exit 1 when it was not fetched before
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/wheel-env.sh
. "$ROOT/scripts/wheel-env.sh" # CACHE, VENV, PIP
VERSION=${PAPCCL_NCCL_REF_VERSION:-$(grep -v '^#' "$ROOT/python/nccl-ref.txt" | head -n 1)}
DEST="$CACHE/nccl-ref-$VERSION"
log() { echo "fetch-nccl-ref: $*" >&2; }

if [ -f "$DEST/include/nccl.h" ] && [ -f "$DEST/lib/libnccl.so.2" ]; then
  log "$DEST is there"
elif [ "${PAPCCL_SKIP_FETCH:-0}" = 1 ]; then
  exit 1
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  log "downloading nvidia-nccl-cu13==$VERSION (pip's cache is kept)"
  "${PIP[@]}" download -q --disable-pip-version-check --no-deps -d "$tmp" \
    "nvidia-nccl-cu13==$VERSION"
  python3 -m zipfile -e "$tmp"/nvidia_nccl_cu13-*.whl "$tmp/x"
  mkdir -p "$DEST.part"
  cp -r "$tmp/x/nvidia/nccl/include" "$tmp/x/nvidia/nccl/lib" "$DEST.part/"
  rm -rf "$DEST"
  mv "$DEST.part" "$DEST"
  log "NVIDIA NCCL $VERSION in $DEST"
fi
echo "$DEST"
