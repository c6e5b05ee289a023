#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes (or checks) the project's Python virtual environment with what the PyTorch backend's
# build and tests need: python/requirements-torch.txt (torch pinned to the tested version,
# a CUDA build from PyPI: about 3.5 GB to download, pip's cache is kept). Idempotent: when the
# environment already holds that list it only checks a stamp and imports torch. Prints the
# environment's interpreter on its last line.
#
# usage: scripts/setup-venv.sh
#   PAPCCL_VENV=DIR   where the environment lives (default ~/.cache/papccl/venv, shared by
#                     every checkout of this machine so that a fresh clone reuses it)
#   PAPCCL_PYTHON=P   the interpreter that makes it (default python3; needs venv and headers)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQ="$ROOT/python/requirements-torch.txt"
VENV=${PAPCCL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/papccl/venv}
PY=${PAPCCL_PYTHON:-python3}
log() { echo "setup-venv: $*" >&2; }

want=$( (cat "$REQ"; "$PY" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)
stamp="$VENV/.papccl-requirements"
if [ -x "$VENV/bin/python3" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
  "$VENV/bin/python3" -c 'import torch' 2>/dev/null; then
  log "$VENV is up to date"
else
  if [ ! -x "$VENV/bin/python3" ]; then
    log "making $VENV with $("$PY" --version 2>&1)"
    mkdir -p "$(dirname "$VENV")"
    "$PY" -m venv "$VENV"
  fi
  log "installing $(grep -v '^#' "$REQ" | xargs) (torch is large; pip's cache is kept)"
  "$VENV/bin/python3" -m pip install -q --disable-pip-version-check -r "$REQ"
  "$VENV/bin/python3" -c 'import torch; print("setup-venv: torch", torch.__version__)' >&2
  echo "$want" >"$stamp"
fi
echo "$VENV/bin/python3"
