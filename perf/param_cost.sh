#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The cost of a setting, measured side by side: all_reduce_perf under papcclrun with the
# environment A, then with B, PAIRS times in turn; every run times each call alone (a barrier
# before it, --arrival balanced) and reports the median time in the call. Prints the medians
# of both and the median over pairs of the ratio A/B, out of place and in place.
#
#   perf/param_cost.sh A B [VAR=VALUE ...]   (A and B: one VAR=VALUE each, or "" for none)
#   NP=2 SIZE=8 PAIRS=30 ITERS=2000 BUILD=build perf/param_cost.sh \
#       PAPCCL_CHECK_MISMATCH=1 PAPCCL_CHECK_MISMATCH=0 PAPCCL_FLAT_MAX_BYTES=0
#   Two builds (a change against its base): BUILD_A=DIR BUILD_B=DIR perf/param_cost.sh "" ""
set -eu
if [ $# -lt 2 ]; then
  sed -n '3,10p' "$0" >&2
  exit 2
fi
A=$1
B=$2
shift 2
COMMON=("$@")
NP=${NP:-2}
SIZE=${SIZE:-8}
PAIRS=${PAIRS:-30}
ITERS=${ITERS:-2000}
BUILD=${BUILD:-build}
BUILD_A=${BUILD_A:-$BUILD}
BUILD_B=${BUILD_B:-$BUILD}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
run() { # $1: the setting, $2: the build; prints "oop ip" (median us in the call)
  local line
  line=$(env ${1:+"$1"} "${COMMON[@]}" "$2/src/launcher/papcclrun" -np "$NP" "$2/perf/all_reduce_perf" \
    -b "$SIZE" -e "$SIZE" -n "$ITERS" -w 200 --arrival balanced 2>&1 | awk -v s="$SIZE" '$1 == s')
  # columns: size count type redop root | time algbw busbw wrong tail inColl skew | x2
  echo "$line" | awk '{print $11, $18}'
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq "$PAIRS"); do
  echo "$i A $(run "$A" "$BUILD_A")" >>"$out"
  echo "$i B $(run "$B" "$BUILD_B")" >>"$out"
done
[ "$BUILD_A" != "$BUILD_B" ] && A="$BUILD_A${A:+ $A}" && B="$BUILD_B${B:+ $B}"
"$PY" - "$out" "$A" "$B" "$NP" "$SIZE" <<'EOF'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
runs = {"A": {}, "B": {}}
for r in rows:
    if len(r) == 4:
        runs[r[1]][int(r[0])] = (float(r[2]), float(r[3]))
pairs = sorted(set(runs["A"]) & set(runs["B"]))
if not pairs:
    sys.exit("no run printed a result line (is the build there?)")
med = lambda k, c: st.median(runs[k][i][c] for i in pairs)
ratio = lambda c: st.median(runs["A"][i][c] / runs["B"][i][c] for i in pairs)
print("# %s ranks, %s B, %d pairs; median us in the call (out of place / in place)"
      % (sys.argv[4], sys.argv[5], len(pairs)))
print("A %-28s %8.2f / %8.2f" % (sys.argv[2] or "(none)", med("A", 0), med("A", 1)))
print("B %-28s %8.2f / %8.2f" % (sys.argv[3] or "(none)", med("B", 0), med("B", 1)))
print("A/B, median of per-pair ratios: %.3f / %.3f" % (ratio(0), ratio(1)))
EOF
