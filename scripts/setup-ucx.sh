#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs UCX from its PyPI wheel (python/ucx.txt: libucx-cu13, headers, libraries and
# pkg-config data) into <cache>/papccl/ucx-VERSION, with pkg-config files that point at that
# place (the wheel's name its build machine). Idempotent. Prints the folder to put in
# PKG_CONFIG_PATH on its last line:
#   PKG_CONFIG_PATH=$(scripts/setup-ucx.sh | tail -n1) meson setup build-ucx ...
#   PAPCCL_VENV=DIR        the environment whose pip downloads it (scripts/setup-venv.sh)
#   PAPCCL_SKIP_FETCH=1    only look: exit 1 when it was not installed before
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/wheel-env.sh
. "$ROOT/scripts/wheel-env.sh" # CACHE, VENV, PIP
SPEC=$(grep -v '^#' "$ROOT/python/ucx.txt" | head -n 1)
DEST="$CACHE/ucx-${SPEC##*==}"
log() { echo "setup-ucx: $*" >&2; }

if [ -f "$DEST/pkgconfig/ucx.pc" ] && [ -f "$DEST/libucx/include/ucp/api/ucp.h" ]; then
  log "$DEST is there"
elif [ "${PAPCCL_SKIP_FETCH:-0}" = 1 ]; then
  exit 1
else
  log "installing $SPEC into $DEST (pip's cache is kept)"
  rm -rf "$DEST"
  "${PIP[@]}" install -q --disable-pip-version-check --no-deps --target "$DEST" "$SPEC"
  mkdir -p "$DEST/pkgconfig"
  for pc in "$DEST"/libucx/lib/pkgconfig/*.pc; do
    sed "s|^prefix *=.*|prefix = $DEST/libucx|" "$pc" >"$DEST/pkgconfig/$(basename "$pc")"
  done
fi
echo "$DEST/pkgconfig"
