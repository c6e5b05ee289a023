#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the dependencies, builds papccl in build/ and runs the PAP demo: an allreduce over
# 4 local ranks where one rank arrives late, with the result check and the times.
#
# usage: scripts/demo.sh [pap_demo options...]      (from any directory)
#   PAPCCL_DEMO_NP   ranks to start (default 4)
#   PAPCCL_JOBS      parallel compile jobs (default: ninja's choice)
#   PAPCCL_SKIP_DEPS=1 skips scripts/install-deps.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=build
NP=${PAPCCL_DEMO_NP:-4}

if [ "${PAPCCL_SKIP_DEPS:-0}" != 1 ]; then
  scripts/install-deps.sh
fi

if [ -f "$BUILD/build.ninja" ]; then
  echo "demo: reusing $BUILD/"
elif [ -f "$BUILD/meson-private/coredata.dat" ]; then
  meson setup --wipe "$BUILD" # an earlier configure did not finish
else
  meson setup "$BUILD"
fi
meson compile -C "$BUILD" ${PAPCCL_JOBS:+-j "$PAPCCL_JOBS"}

launcher="$BUILD/src/launcher/papcclrun"
demo="$BUILD/perf/pap_demo"
for f in "$launcher" "$demo"; do
  if [ ! -x "$f" ]; then
    echo "demo: $f was not built" >&2
    exit 1
  fi
done
echo "demo: $launcher -n $NP $demo $*"
exec "$launcher" -n "$NP" --timeout 600 "$demo" "$@"
