#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# papccl against Open MPI (MPI_Allreduce) and Gloo (its allreduce algorithms, TCP on loopback)
# on this host: the same sizes and arrival patterns, the same timing loop (bench_loop.c),
# alternating libraries within each round; prints one table of medians over the rounds with
# the ratio papccl/peer per cell, and writes every cell to $OUT/cells.tsv (for plot.py).
#
# Usage: perf/compare/run.sh [--quick]      BUILD=dir (default ./build), OUT=dir (default a
#   temp dir), NRANKS (rank counts, "4"; e.g. "2 4 8"), ROUNDS (3), ITERS (20), WARMUP (10),
#   MIN_MS (20: a cell's timed calls last at least this long, up to 50 x ITERS calls: 20
#   calls of a few microseconds are the start-up transient of every library),
#   PATTERNS ("balanced:0 late:2000 late:20000 staircase:20000"; trace:FILE replays a
#   recorded arrival pattern, e.g. one that papccl.torch.save_trace wrote in training),
#   LIBS ("papccl openmpi gloo-ring gloo-halving_doubling"),
#   SIZES (all_reduce sizes as -b/-e/-f, "-b 64K -e 16M -f 16"; e.g. "-b 8 -e 64M -f 8", or a
#   list, "--sizes 8,64K,1M,16M")
# --quick: one round, 64 KiB and 1 MiB, patterns balanced and late:2000, few calls (CI smoke).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$root/build}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/papccl-compare.XXXXXX")}
NRANKS=${NRANKS:-4}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-20}
MIN_MS=${MIN_MS:-20}
WARMUP=${WARMUP:-10}
PATTERNS=${PATTERNS:-"balanced:0 late:2000 late:20000 staircase:20000"}
LIBS=${LIBS:-"papccl openmpi gloo-ring gloo-halving_doubling"}
read -r -a SIZES <<<"${SIZES:--b 64K -e 16M -f 16}"
if [ "${1:-}" = --quick ]; then
  ROUNDS=1 ITERS=3 WARMUP=2 MIN_MS=0 PATTERNS="balanced:0 late:2000"
  SIZES=(-b 64K -e 1M -f 16)
fi
mkdir -p "$OUT"
C=$BUILD/perf/compare
cells=$OUT/cells.tsv
: >"$cells"
mpiopts=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpiopts+=(--allow-run-as-root)
if command -v ompi_info >/dev/null && ompi_info 2>/dev/null | grep -q 'MCA btl: vader'; then
  mpiopts+=(--mca btl self,vader)
fi

run_lib() { # lib pattern skew round nranks
  local lib=$1 pat=$2 skew=$3 n=$5 log="$OUT/$1-${2//\//_}-$3-n$5-r$4.log"
  local args=("${SIZES[@]}" -n "$ITERS" -w "$WARMUP" --min-ms "$MIN_MS" --arrival "$pat" --skew "$skew")
  local mpirun=(mpirun "${mpiopts[@]}" -np "$n")
  case $lib in
  papccl) "$BUILD/src/launcher/papcclrun" -n "$n" "$C/papccl_cmp" "${args[@]}" ;;
  openmpi)
    [ -x "$C/mpi_cmp" ] || { echo "# openmpi: mpi_cmp not built" >&2; return 0; }
    "${mpirun[@]}" "$C/mpi_cmp" "${args[@]}" ;;
  gloo-*)
    [ -x "$C/gloo_cmp" ] || { echo "# gloo: gloo_cmp not built (libgloo-dev missing)" >&2; return 0; }
    local store
    store=$(mktemp -d "$OUT/gloo-store.XXXXXX")
    PAPCMP_GLOO_STORE=$store PAPCMP_GLOO_ALGO=${lib#gloo-} \
      "$BUILD/src/launcher/papcclrun" -n "$n" "$C/gloo_cmp" "${args[@]}"
    rm -rf "$store" ;;
  esac >"$log" 2>&1 || {
    echo "# $lib $pat:$skew failed, see $log" >&2
    failed=$((failed + 1))
    return 0
  }
  awk -v r="$4" '$1 == "cell" { print r "\t" $2 "\t" $3 "\t" $4 "\t" $5 "\t" $6 "\t" $7 "\t" $8 "\t" $9 }' \
    "$log" >>"$cells"
}

failed=0
start=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
  for n in $NRANKS; do
    for p in $PATTERNS; do
      for lib in $LIBS; do
        case $p in
        trace:*) run_lib "$lib" "$p" 0 "$round" "$n" ;; # a recorded pattern: trace:FILE
        *) run_lib "$lib" "${p%%:*}" "${p#*:}" "$round" "$n" ;;
        esac
      done
    done
  done
done
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $NRANKS ranks, $ROUNDS round(s) x $ITERS calls, $(($(date +%s) - start)) s"
python3 "$root/perf/compare/table.py" "$cells"
rc=$?
echo "# cells: $cells"
[ "$failed" = 0 ] || echo "# $failed run(s) failed"
[ "$failed" = 0 ] && exit "$rc"
exit 1
