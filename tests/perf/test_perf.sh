#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The perf binaries: every binary's output layout against nccl-tests' (check_format.py), with
# threads and with papcclrun; -c catching a corrupted result (exit code 7); the arrival
# columns. Usage: test_perf.sh BUILD_DIR
set -uo pipefail
B=${1:?build dir}
here=$(cd "$(dirname "$0")" && pwd)
check="python3 $here/check_format.py"
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

for b in all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf reduce_perf \
  alltoall_perf sendrecv_perf gather_perf scatter_perf; do
  # Ranks as threads (-t), every type and op where the collective reduces, every root.
  out=$tmp/$b.t.txt
  if timeout 120 "$B/perf/$b" -t 3 -b 8 -e 64K -f 16 -c 1 -n 2 -w 1 -d all -o all -r -1 >"$out" 2>&1; then
    if $check "$b" <"$out" >"$tmp/chk" 2>&1; then ok "$b -t 3: $(cat "$tmp/chk")"; else bad "$b -t 3: $(cat "$tmp/chk")"; fi
  else
    bad "$b -t 3 exited with $? ($(tail -3 "$out" | tr '\n' ' '))"
  fi
  # Ranks as processes (papcclrun), in-place and out-of-place checked.
  out=$tmp/$b.p.txt
  if timeout 120 "$B/src/launcher/papcclrun" -n 4 "$B/perf/$b" -b 1 -e 1M -f 32 -c 1 -n 2 -w 1 >"$out" 2>&1; then
    if $check "$b" <"$out" >"$tmp/chk" 2>&1; then ok "$b -n 4: $(cat "$tmp/chk")"; else bad "$b -n 4: $(cat "$tmp/chk")"; fi
  else
    bad "$b papcclrun -n 4 exited with $? ($(tail -3 "$out" | tr '\n' ' '))"
  fi
  # A corrupted result must be counted and end with exit code 7.
  out=$tmp/$b.c.txt
  PAPCCL_PERF_CORRUPT=1 timeout 120 "$B/perf/$b" -t 2 -b 4K -e 4K -c 1 -n 1 -w 0 >"$out" 2>&1
  rc=$?
  if [ "$rc" = 7 ] && grep -q "# Out of bounds values : [1-9][0-9]* FAILED" "$out"; then
    ok "$b: a corrupted result gives exit 7 and FAILED"
  else
    bad "$b: corrupted result: exit $rc ($(grep 'Out of bounds' "$out"))"
  fi
done

# The PAP columns.
out=$tmp/arrival.txt
if timeout 120 "$B/perf/all_reduce_perf" -t 4 -b 64K -e 1M -f 16 -c 1 -n 3 -w 1 --arrival late:1 --skew 2000 >"$out" 2>&1 &&
  $check all_reduce_perf --arrival <"$out" >"$tmp/chk" 2>&1; then
  ok "all_reduce_perf --arrival: $(cat "$tmp/chk")"
else
  bad "all_reduce_perf --arrival: $(cat "$tmp/chk" 2>/dev/null) $(tail -3 "$out" | tr '\n' ' ')"
fi

# Warm-up calls follow the arrival pattern: papccl's selector learns the injected skew (5 ms)
# and takes the PAP plan before the timed calls. Warm-ups without the pattern taught it the
# balanced skew instead (about 0.2 ms), and the timed calls ran the classic plan.
out=$tmp/adapt.txt
if PAPCCL_DEBUG=INFO PAPCCL_DEBUG_SUBSYS=PAP timeout 120 "$B/src/launcher/papcclrun" -n 4 \
  "$B/perf/all_reduce_perf" -b 1M -e 1M -c 1 -n 2 -w 16 --arrival late --skew 5000 >"$out" 2>&1 &&
  grep -Eq 'PAP selector: 1048576-byte allreduce on 4 ranks -> ac2s \(skew EMA ([3-9][0-9]{3}|[0-9]{5,})\.' "$out"; then
  ok "all_reduce_perf --arrival: the warm-up calls carry the pattern"
else
  bad "all_reduce_perf --arrival warm-up: $(grep -E 'selector|^ +1048576' "$out" | tr '\n' ' ')"
fi

# The side-by-side cost of a setting (perf/param_cost.sh): one pair, a ratio line with numbers;
# a build without the binaries is an error, not a table.
root=$(cd "$here/../.." && pwd)
out=$tmp/param_cost.txt
if NP=2 SIZE=8 PAIRS=1 ITERS=20 BUILD=$B timeout 120 "$root/perf/param_cost.sh" \
  PAPCCL_CHECK_MISMATCH=1 PAPCCL_CHECK_MISMATCH=0 >"$out" 2>&1 &&
  grep -Eq '^A/B, median of per-pair ratios: [0-9]+\.[0-9]{3} / [0-9]+\.[0-9]{3}$' "$out"; then
  ok "param_cost.sh: $(tail -1 "$out")"
else
  bad "param_cost.sh: $(tr '\n' ' ' <"$out")"
fi
if BUILD=$tmp/none PAIRS=1 timeout 60 "$root/perf/param_cost.sh" "" "" >"$out" 2>&1; then
  bad "param_cost.sh without a build succeeded: $(tr '\n' ' ' <"$out")"
else
  ok "param_cost.sh without a build fails: $(tail -1 "$out")"
fi

[ "$fails" = 0 ] && echo "all perf checks passed" || echo "$fails perf check(s) failed"
[ "$fails" = 0 ]
