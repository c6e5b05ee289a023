#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# perf/README.md's PyTorch benchmark in one command: what carries gloo's allreduce
# (gloo_transport.py), then DDP and FSDP2 step time on papccl against gloo at 2 and 4 ranks
# (ddp_bench.py), the markdown table and the plot. About 6 minutes on 2 cores.
#
# usage: perf/torch/run.sh [OUT]        (default: a new directory under /tmp)
#   BUILD=build     a build with -Dtorch=enabled (its python/ holds the backend)
#   PYTHON=P        torch's interpreter (default: the one scripts/setup-venv.sh prints)
#   PLOT_PYTHON=P   an interpreter with matplotlib (default: PYTHON, else /usr/bin/python3)
#   RANKS="2 4"  ROUNDS=5  STEPS=16  WARMUP=4   the grid and its length
#   PROFILE=1       after the rounds, profile one cell per kind and backend (ddp_bench --profile)
# Writes OUT/gloo-transport.txt, OUT/r{N}/ (cells.tsv, traces, profiles, log), OUT/cells.tsv
# (every rank count), OUT/table.md (the table of perf/README.md) and OUT/plots/ddp.png.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
OUT=${1:-$(mktemp -d /tmp/papccl-torch-bench.XXXXXX)}
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-$(scripts/setup-venv.sh 2>/dev/null | tail -n1)}
RANKS=${RANKS:-2 4}
ROUNDS=${ROUNDS:-5} STEPS=${STEPS:-16} WARMUP=${WARMUP:-4}
if ! ls "$BUILD"/python/papccl/_papccl_torch*.so >/dev/null 2>&1; then
  echo "run.sh: no torch backend in $BUILD/python; build it first:" >&2
  echo "  meson setup $BUILD -Dtorch=enabled -Dtorch_python=$PYTHON && ninja -C $BUILD" >&2
  exit 1
fi
if [ -z "${PLOT_PYTHON:-}" ]; then
  PLOT_PYTHON=/usr/bin/python3
  "$PYTHON" -c 'import matplotlib' 2>/dev/null && PLOT_PYTHON=$PYTHON
fi
CPUS=$(nproc) # before OMP_NUM_THREADS=1, which nproc obeys
export PYTHONPATH="$ROOT/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
mkdir -p "$OUT"
start=$SECONDS
echo "run.sh: $(date -u +%Y-%m-%dT%H:%MZ), $CPUS CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), out $OUT"
for n in $RANKS; do
  "$PYTHON" -m papccl.launch -n "$n" perf/torch/gloo_transport.py --out "$OUT/gloo-transport-$n.txt"
done
cat "$OUT"/gloo-transport-*.txt >"$OUT/gloo-transport.txt"
extra=()
[ "${PROFILE:-0}" = 1 ] && extra=(--profile)
for n in $RANKS; do
  mkdir -p "$OUT/r$n"
  echo "run.sh: $n ranks"
  "$PYTHON" -m papccl.launch -n "$n" perf/torch/ddp_bench.py --out "$OUT/r$n" --rounds "$ROUNDS" \
    --steps "$STEPS" --warmup "$WARMUP" "${extra[@]}" 2>&1 | grep -v '^USDT:\|gpuGetDeviceCount' |
    tee "$OUT/r$n/log.txt"
done
cells=()
for n in $RANKS; do cells+=("$OUT/r$n/cells.tsv"); done
cat "${cells[@]}" >"$OUT/cells.tsv"
{
  echo "<!-- $(date -u +%Y-%m-%dT%H:%MZ), $CPUS CPUs, ranks $RANKS, $ROUNDS rounds x $STEPS timed steps, $((SECONDS - start)) s -->"
  "$PYTHON" perf/torch/ddp_bench.py --table "${cells[@]}"
} >"$OUT/table.md"
"$PLOT_PYTHON" perf/plot.py --ddp "${cells[@]}" --out "$OUT/plots"
cat "$OUT/gloo-transport.txt" "$OUT/table.md"
echo "run.sh: done in $((SECONDS - start)) s; table $OUT/table.md, plot $OUT/plots/ddp.png"
