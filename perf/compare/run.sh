#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# papccl against Open MPI (MPI_Allreduce) and Gloo (its allreduce algorithms, TCP on loopback)
# on this host: the same sizes and arrival patterns, the same timing loop (bench_loop.c),
# alternating libraries within each round; prints one table of medians over the rounds with
# the ratio papccl/peer per cell, and writes every cell to $OUT/cells.tsv (for plot.py).
#
# Usage: perf/compare/run.sh [--quick]      BUILD=dir (default ./build), OUT=dir (default a
#   temp dir), NRANKS (4), ROUNDS (3), ITERS (20), WARMUP (10),
#   PATTERNS ("balanced:0 late:2000 late:20000 staircase:20000"),
#   LIBS ("papccl openmpi gloo-ring gloo-halving_doubling")
# --quick: one round, 64 KiB and 1 MiB, patterns balanced and late:2000, few calls (CI smoke).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$root/build}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/papccl-compare.XXXXXX")}
NRANKS=${NRANKS:-4}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-10}
PATTERNS=${PATTERNS:-"balanced:0 late:2000 late:20000 staircase:20000"}
LIBS=${LIBS:-"papccl openmpi gloo-ring gloo-halving_doubling"}
SIZES=(-b 64K -e 16M -f 16)
if [ "${1:-}" = --quick ]; then
  ROUNDS=1 ITERS=3 WARMUP=2 PATTERNS="balanced:0 late:2000"
  SIZES=(-b 64K -e 1M -f 16)
fi
mkdir -p "$OUT"
C=$BUILD/perf/compare
cells=$OUT/cells.tsv
: >"$cells"
mpirun=(mpirun --oversubscribe -np "$NRANKS")
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
if command -v ompi_info >/dev/null && ompi_info 2>/dev/null | grep -q 'MCA btl: vader'; then
  mpirun+=(--mca btl self,vader)
fi

run_lib() { # lib pattern skew round
  local lib=$1 pat=$2 skew=$3 log="$OUT/$1-$2-$3-r$4.log"
  local args=("${SIZES[@]}" -n "$ITERS" -w "$WARMUP" --arrival "$pat" --skew "$skew")
  case $lib in
  papccl) "$BUILD/src/launcher/papcclrun" -n "$NRANKS" "$C/papccl_cmp" "${args[@]}" ;;
  openmpi)
    [ -x "$C/mpi_cmp" ] || { echo "# openmpi: mpi_cmp not built" >&2; return 0; }
    "${mpirun[@]}" "$C/mpi_cmp" "${args[@]}" ;;
  gloo-*)
    [ -x "$C/gloo_cmp" ] || { echo "# gloo: gloo_cmp not built (libgloo-dev missing)" >&2; return 0; }
    local store
    store=$(mktemp -d "$OUT/gloo-store.XXXXXX")
    PAPCMP_GLOO_STORE=$store PAPCMP_GLOO_ALGO=${lib#gloo-} \
      "$BUILD/src/launcher/papcclrun" -n "$NRANKS" "$C/gloo_cmp" "${args[@]}"
    rm -rf "$store" ;;
  esac >"$log" 2>&1 || { echo "# $lib $pat:$skew failed, see $log" >&2; return 0; }
  awk -v r="$4" '$1 == "cell" { print r "\t" $2 "\t" $3 "\t" $4 "\t" $5 "\t" $6 "\t" $7 "\t" $8 "\t" $9 }' \
    "$log" >>"$cells"
}

start=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
  for p in $PATTERNS; do
    for lib in $LIBS; do
      run_lib "$lib" "${p%%:*}" "${p#*:}" "$round"
    done
  done
done
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $NRANKS ranks, $ROUNDS round(s) x $ITERS calls, $(($(date +%s) - start)) s"
python3 - "$cells" <<'PY'
import sys, statistics as st
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
cells = {}
for r, lib, n, pat, size, incoll, tail, skew, wrong in rows:
    cells.setdefault((pat, int(size), lib), []).append((float(incoll), float(tail), float(wrong)))
libs = []
for r in rows:
    if r[1] not in libs:
        libs.append(r[1])
peers = [l for l in libs if l != "papccl"]
med = lambda v: st.median(v) if v else float("nan")
print("# float32 sum allreduce in place; medians over rounds of per-cell medians; us.")
print("# inColl = mean time in the call over ranks; tail = last completion - last arrival;")
print("# ratio = papccl / peer (below 1: papccl faster)")
hdr = "| pattern | size | " + " | ".join(f"{l} inColl / tail" for l in libs) + " | " + \
      " | ".join(f"inColl ratio vs {p}" for p in peers) + " | " + \
      " | ".join(f"tail ratio vs {p}" for p in peers) + " |"
print(hdr)
print("|" + "---|" * (hdr.count("|") - 1))
wrong = 0
for pat, size in sorted({(k[0], k[1]) for k in cells}, key=lambda k: (k[0], k[1])):
    v = {l: cells.get((pat, size, l), []) for l in libs}
    wrong += sum(x[2] for l in libs for x in v[l])
    ic = {l: med([x[0] for x in v[l]]) for l in libs}
    tl = {l: med([x[1] for x in v[l]]) for l in libs}
    cols = [f"{ic[l]:.0f} / {tl[l]:.0f}" for l in libs]
    rat = [f"{ic['papccl'] / ic[p]:.2f}" if "papccl" in ic and ic[p] == ic[p] and ic[p] > 0 else "-" for p in peers]
    rtl = [f"{tl['papccl'] / tl[p]:.2f}" if "papccl" in tl and tl[p] == tl[p] and tl[p] > 0 else "-" for p in peers]
    print(f"| {pat} | {size} | " + " | ".join(cols) + " | " + " | ".join(rat) + " | " + " | ".join(rtl) + " |")
print(f"# wrong elements over every cell: {wrong:.0f}")
sys.exit(1 if wrong else 0)
PY
echo "# cells: $cells"
