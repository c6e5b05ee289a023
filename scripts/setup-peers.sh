#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the MPI libraries the comparisons run against (python/peers.txt: Open MPI 5 and
# MPICH 5 from their PyPI wheels, each with its compiler wrapper and launcher) into one
# prefix each, <cache>/papccl/peers/NAME (both ship bin/mpicc and lib/libmpi.so, so they
# cannot share one environment). Idempotent: a prefix whose stamp names the same version is
# kept. Prints "NAME PREFIX" per peer; the peers' mpicc need a C compiler (install-deps.sh).
#
# usage: scripts/setup-peers.sh
#   PAPCCL_VENV=DIR          the environment whose pip installs them (scripts/setup-venv.sh;
#                            else python3's pip)
#   PAPCCL_SKIP_FETCH=1      only look: print the peers installed before, fetch nothing
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/wheel-env.sh
. "$ROOT/scripts/wheel-env.sh" # CACHE, VENV, PIP
log() { echo "setup-peers: $*" >&2; }

grep -v '^#' "$ROOT/python/peers.txt" | while read -r name spec; do
  [ -n "$name" ] || continue
  prefix="$CACHE/peers/$name"
  if [ "$(cat "$prefix/.papccl-peer" 2>/dev/null)" = "$spec" ] && [ -x "$prefix/bin/mpicc" ]; then
    log "$name ($spec) is there"
  elif [ "${PAPCCL_SKIP_FETCH:-0}" = 1 ]; then
    continue
  else
    log "installing $spec into $prefix (pip's cache is kept)"
    rm -rf "$prefix"
    "${PIP[@]}" install -q --disable-pip-version-check --no-deps --prefix "$prefix" "$spec"
    "$prefix/bin/mpicc" -show >/dev/null # the wrapper runs from its new place
    echo "$spec" >"$prefix/.papccl-peer"
  fi
  echo "$name $prefix"
done
