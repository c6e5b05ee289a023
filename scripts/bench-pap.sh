#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# PAP benchmark: allreduce algorithms side by side under arrival patterns, alternating in one
# run, with the late rank's floor (its own copy-in plus copy-out) measured in the same run.
#
# Usage: scripts/bench-pap.sh     (BUILD=dir, default ./build; ROUNDS=r rounds, default 3;
#                                  NS="4 8" rank counts; ITERS=n timed calls per cell (10);
#                                  ALGOS="ring rhd ac2s"; LOGS=dir keeps the logs)
# Each round runs every (ranks, pattern, algorithm) once, in that order, so slow phases of a
# noisy machine hit every algorithm alike; the table shows medians over the rounds of the
# per-cell medians printed by all_reduce_perf (out-of-place column).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$root/build}
ROUNDS=${ROUNDS:-3}
NS=${NS:-"4 8"}
ITERS=${ITERS:-10}
ALGOS=${ALGOS:-"ring rhd ac2s"}
PATTERNS=${PATTERNS:-"balanced:0 late:2000 late:20000"}
LOGS=${LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/bench-pap.XXXXXX")}
mkdir -p "$LOGS"

if [ ! -x "$BUILD/perf/all_reduce_perf" ]; then
  [ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" "$root"
  meson compile -C "$BUILD"
fi
papcclrun=$BUILD/src/launcher/papcclrun
out=$LOGS/cells.tsv
: >"$out"

floor() { # round: median memcpy time (us) of one thread, 16 MiB, 1 MiB, 64 KiB
  for s in 65536 1048576 16777216; do
    t=$("$BUILD/perf/memfloor" -s "$s" -t 1 | awk '/^memfloor_us/ {print $2}')
    printf 'floor\t%s\t%s\t-\t-\t%s\t%s\t-\n' "$1" "$s" "$t" "$t" >>"$out"
  done
}

for round in $(seq 1 "$ROUNDS"); do
  floor "$round"
  for n in $NS; do
    for pat in $PATTERNS; do
      kind=${pat%%:*}
      skew=${pat#*:}
      for algo in $ALGOS; do
        log=$LOGS/r$round-n$n-$kind$skew-$algo.log
        PAPCCL_ALGO=$algo "$papcclrun" -n "$n" "$BUILD/perf/all_reduce_perf" -b 64K -e 16M -f 16 \
          -n "$ITERS" -w 3 -c 0 --arrival "$kind" --skew "$skew" >"$log" 2>&1 ||
          echo "== failed: $log" >&2
        # size, time (us, in the call), tail, inColl, skew: out-of-place half
        awk -v n="$n" -v p="$pat" -v a="$algo" -v r="$round" \
          '$1 ~ /^[0-9]+$/ && NF >= 12 { printf "cell\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r, $1, n, p, $6, $10, $11 "|" a }' \
          "$log" >>"$out"
      done
    done
  done
done

python3 - "$out" <<'EOF'
import sys, statistics as st
cells, floors = {}, {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] == "floor":
        floors.setdefault(int(f[2]), []).append(float(f[5]))
        continue
    _, rnd, size, n, pat, t, tail, rest = f
    incoll, algo = rest.split("|")
    cells.setdefault((int(n), pat, int(size), algo), []).append((float(t), float(tail), float(incoll)))
med = lambda v: st.median(v) if v else float("nan")
algos = sorted({k[3] for k in cells}, key=lambda a: ["ring", "rhd", "ac2s", "chain"].index(a) if a in ["ring", "rhd", "ac2s", "chain"] else 9)
print("# medians over rounds; times in us; tail = last completion - last arrival;")
print("# inColl = mean time in the call over ranks; floor = 2 x memcpy(size) of one thread")
hdr = "| ranks | pattern | size | " + " | ".join(f"{a} tail" for a in algos) + " | " + \
      " | ".join(f"{a} inColl" for a in algos) + " | ring/ac2s tail | ac2s tail/floor |"
print(hdr)
print("|" + "---|" * (hdr.count("|") - 1))
for key in sorted({(k[0], k[1], k[2]) for k in cells}, key=lambda k: (k[0], k[1], k[2])):
    n, pat, size = key
    tails = {a: med([c[1] for c in cells.get((n, pat, size, a), [])]) for a in algos}
    inc = {a: med([c[2] for c in cells.get((n, pat, size, a), [])]) for a in algos}
    fl = 2 * med(floors.get(size, []))
    r = tails.get("ring", float("nan")) / tails.get("ac2s", float("nan")) if "ac2s" in tails else float("nan")
    fr = tails.get("ac2s", float("nan")) / fl if fl == fl else float("nan")
    print(f"| {n} | {pat} | {size} | " + " | ".join(f"{tails[a]:.0f}" for a in algos) + " | " +
          " | ".join(f"{inc[a]:.0f}" for a in algos) + f" | {r:.2f} | {fr:.2f} |")
print()
print("# balanced: ac2s time in the call against the best classic algorithm (ratio > 1: slower)")
for n in sorted({k[0] for k in cells}):
    for size in sorted({k[2] for k in cells}):
        t = {a: med([c[0] for c in cells.get((n, "balanced:0", size, a), [])]) for a in algos}
        best = min(t[a] for a in algos if a in ("ring", "rhd"))
        print(f"balanced n={n} size={size}: ac2s {t.get('ac2s', float('nan')):.0f} us, best classic {best:.0f} us, ratio {t.get('ac2s', float('nan')) / best:.2f}")
EOF
echo "# logs in $LOGS"
