#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Memcheck over every collective: for each perf binary, 2 ranks as separate processes
# (papcclrun), each under valgrind, small sizes, results checked (-c 1). A memcheck error or a
# definite leak in any rank fails the collective (valgrind exits 99); its log is printed.
# usage: run.sh BUILD_DIR    (exit 77, meson's skip, when valgrind is not installed)
# environment: VALGRIND (the valgrind program), PAPCCL_VG_COLLS (collectives to run; default all)
set -uo pipefail
B=${1:?build dir}
here=$(cd "$(dirname "$0")" && pwd)
supp=$here/../valgrind.supp
vg=${VALGRIND:-valgrind}
if ! command -v "$vg" >/dev/null 2>&1; then
  echo "SKIP: valgrind is not installed (Debian: apt-get install valgrind)"
  exit 77
fi

colls=${PAPCCL_VG_COLLS:-"all_reduce broadcast reduce all_gather reduce_scatter alltoall gather scatter sendrecv"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Waits under valgrind: one thread runs at a time, so polling only delays the thread being
# waited for; sleep at once. Small chunks and FIFO slots so that these small sizes still go
# through the pipelined and flow-controlled paths. A hang fails within the timeout.
export PAPCCL_SPIN_US=0
export PAPCCL_TIMEOUT_S=120
export PAPCCL_CHUNK_SIZE=4096
export PAPCCL_SHM_SLOT_SIZE=4096
export PAPCCL_SHM_NSLOTS=4
export PAPCCL_TRANSPORT=shm

vg_args=(--error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
  --show-leak-kinds=definite --track-fds=yes --fair-sched=yes --num-callers=30)
[ -f "$supp" ] && vg_args+=("--suppressions=$supp")

fails=0
# check NAME BINARY [VAR=VALUE...]: one 2-rank run of BINARY under memcheck.
check() {
  local name=$1 bin=$B/perf/$2_perf log=$tmp/${1// /_} t0=$SECONDS rc fdleak
  shift 2
  # Sizes 8 B .. 32 KiB: below, at and across the 4 KiB chunk; in and out of place checked.
  env "$@" timeout 300 "$B/src/launcher/papcclrun" -n 2 --timeout 240 -- \
    "$vg" "${vg_args[@]}" --log-file="$log.%q{PAPCCL_RANK}.vg" \
    "$bin" -b 8 -e 32K -f 8 -c 1 -n 1 -w 1 >"$log.out" 2>&1
  rc=$?
  # valgrind reports descriptors still open at exit but does not fail on them: fail here on
  # any not inherited from the parent, which the library opened and did not close.
  fdleak=$(awk '/== Open (file descriptor|AF_UNIX socket) [0-9]+/ { open = $0; next }
    open != "" { if ($0 !~ /<inherited from parent>/) print open; open = "" }' "$log".*.vg 2>/dev/null)
  if [ "$rc" = 0 ] && [ -z "$fdleak" ]; then
    echo "ok   $name: 2 ranks under memcheck, no errors, no definite leaks ($((SECONDS - t0)) s)"
    return
  fi
  fails=$((fails + 1))
  echo "FAIL $name: exit $rc ($((SECONDS - t0)) s)${fdleak:+; descriptors left open}"
  tail -n 20 "$log.out"
  for f in "$log".*.vg; do
    [ -f "$f" ] || continue
    echo "--- $(basename "$f")"
    cat "$f"
  done
}

for c in $colls; do
  check "$c" "$c"
done
# Allreduce once more with each of its algorithms forced (the default picks by size).
if [ -z "${PAPCCL_VG_COLLS:-}" ]; then
  for a in ring rhd ac2s chain small; do
    check "all_reduce algo $a" all_reduce PAPCCL_ALGO=$a
  done
fi
[ "$fails" = 0 ] && echo "valgrind: all collectives clean" || echo "valgrind: $fails collective(s) failed"
[ "$fails" = 0 ]
