#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs papccl's all_reduce_perf beside MPI_Allreduce and the memory floor, then summarizes.
#
# Usage: scripts/bench-allreduce.sh          (BUILD=dir to pick the build, default ./build;
#                                              LOGS=dir to keep the logs, default a temp dir)
# Summary: papccl 64 MiB allreduce time over the memory floor (2 threads each copying
# 64 MiB at once) and papccl/MPI ratios for the 8-byte latency and the 64 MiB time.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$root/build}
LOGS=${LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/bench-allreduce.XXXXXX")}
ARGS=(-b 8 -e 64M -f 2 -n 20 -w 5)
mkdir -p "$LOGS"

if [ ! -x "$BUILD/perf/all_reduce_perf" ]; then
  [ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" "$root"
  meson compile -C "$BUILD"
fi
papcclrun=$BUILD/src/launcher/papcclrun

run() { # name command...: runs it, keeps stdout in $LOGS/name.log
  local name=$1
  shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$LOGS/$name.log" || echo "== $name failed (exit ${PIPESTATUS[0]})"
}

# The floor is measured before and after the benchmarks; the summary uses the lower one, so a
# busy machine makes the ratios look worse, never better.
run memfloor-before "$BUILD/perf/memfloor" -s 64M -t 2
run papccl-np2 "$papcclrun" -n 2 "$BUILD/perf/all_reduce_perf" "${ARGS[@]}"
run papccl-np4 "$papcclrun" -n 4 "$BUILD/perf/all_reduce_perf" "${ARGS[@]}"

have_mpi=0
if [ -x "$BUILD/perf/mpi_allreduce_bench" ] && command -v mpirun >/dev/null; then
  have_mpi=1
  mpirun=(mpirun --oversubscribe)
  [ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
  if command -v ompi_info >/dev/null; then # shared memory transport: vader (4.x) or sm (5.x)
    if ompi_info 2>/dev/null | grep -q 'MCA btl: vader'; then
      mpirun+=(--mca btl "self,vader")
    else
      mpirun+=(--mca btl "self,sm")
    fi
  fi
  run mpi-np2 "${mpirun[@]}" -np 2 "$BUILD/perf/mpi_allreduce_bench" "${ARGS[@]}"
  run mpi-np4 "${mpirun[@]}" -np 4 "$BUILD/perf/mpi_allreduce_bench" "${ARGS[@]}"
else
  echo "== MPI comparison skipped: mpi_allreduce_bench not built or mpirun missing"
fi

run memfloor-after "$BUILD/perf/memfloor" -s 64M -t 2

# Time (us) of the row whose size is $2 in log $1: the lower of out-of-place and in-place,
# which keeps one noisy cell on a busy machine out of the ratios.
rowtime() {
  awk -v s="$2" '$1 == s && NF >= 13 { print ($6 + 0 < $10 + 0) ? $6 : $10; exit }' "$LOGS/$1.log"
}
ratio() {
  awk -v a="$1" -v b="$2" \
    'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'
}

floor=$(awk '$1 == "memfloor_us" && (f == "" || $2 + 0 < f + 0) { f = $2 } END { print f }' \
  "$LOGS/memfloor-before.log" "$LOGS/memfloor-after.log")
echo
echo "== summary (logs in $LOGS)"
printf "memory floor (2 threads x memcpy 64 MiB, lower of before/after): %s us\n" "$floor"
for n in 2 4; do
  p64=$(rowtime "papccl-np$n" 67108864)
  p8=$(rowtime "papccl-np$n" 8)
  printf "np=%d papccl: 64 MiB %s us = %s x floor; 8 B %s us\n" \
    "$n" "$p64" "$(ratio "$p64" "$floor")" "$p8"
  if [ "$have_mpi" = 1 ]; then
    m64=$(rowtime "mpi-np$n" 67108864)
    m8=$(rowtime "mpi-np$n" 8)
    printf "np=%d MPI:    64 MiB %s us = %s x floor; 8 B %s us\n" \
      "$n" "$m64" "$(ratio "$m64" "$floor")" "$m8"
    printf "np=%d papccl/MPI: 8 B latency %s, 64 MiB time %s\n" \
      "$n" "$(ratio "$p8" "$m8")" "$(ratio "$p64" "$m64")"
  fi
done
