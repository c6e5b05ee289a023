#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The comparison table from run.sh's cells.tsv: medians over rounds, ratio papccl/peer per
cell. Usage: table.py cells.tsv. Exit 1 when any cell counted wrong elements."""
import sys, statistics as st
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
cells = {}
for r, lib, n, pat, size, incoll, tail, skew, wrong in rows:
    cells.setdefault((int(n), pat, int(size), lib), []).append((float(incoll), float(tail), float(wrong)))
libs = []
for r in rows:
    if r[1] not in libs:
        libs.append(r[1])
peers = [l for l in libs if l != "papccl"]
med = lambda v: st.median(v) if v else float("nan")
print("# float32 sum allreduce in place; medians over rounds of per-cell medians; us.")
print("# inColl = mean time in the call over ranks; tail = last completion - last arrival;")
print("# ratio = papccl / peer (below 1: papccl faster)")
hdr = "| ranks | pattern | size | " + " | ".join(f"{l} inColl / tail" for l in libs) + " | " + \
      " | ".join(f"inColl ratio vs {p}" for p in peers) + " | " + \
      " | ".join(f"tail ratio vs {p}" for p in peers) + " |"
print(hdr)
print("|" + "---|" * (hdr.count("|") - 1))
wrong = 0
for n, pat, size in sorted({(k[0], k[1], k[2]) for k in cells}):
    v = {l: cells.get((n, pat, size, l), []) for l in libs}
    wrong += sum(x[2] for l in libs for x in v[l])
    ic = {l: med([x[0] for x in v[l]]) for l in libs}
    tl = {l: med([x[1] for x in v[l]]) for l in libs}
    cols = [f"{ic[l]:.0f} / {tl[l]:.0f}" for l in libs]
    rat = [f"{ic['papccl'] / ic[p]:.2f}" if "papccl" in ic and ic[p] == ic[p] and ic[p] > 0 else "-" for p in peers]
    rtl = [f"{tl['papccl'] / tl[p]:.2f}" if "papccl" in tl and tl[p] == tl[p] and tl[p] > 0 else "-" for p in peers]
    print(f"| {n} | {pat} | {size} | " + " | ".join(cols) + " | " + " | ".join(rat) + " | " + " | ".join(rtl) + " |")
print(f"# wrong elements over every cell: {wrong:.0f}")
sys.exit(1 if wrong else 0)
