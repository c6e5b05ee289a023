#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The comparison table from run.sh's cells.tsv: medians over rounds, ratio papccl/peer per
cell. Usage: table.py cells.tsv [failed.tsv]. A library run that failed (failed.tsv: round,
lib, ranks, pattern) shows FAIL in every cell of its rank count and pattern instead of leaving
the medians of the other rounds. Exit 1 when any run failed or any cell counted wrong
elements."""
import statistics as st
import sys

rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
failed = set()
if len(sys.argv) > 2:
    for l in open(sys.argv[2]):
        if l.strip():
            _r, lib, n, pat = l.rstrip("\n").split("\t")
            failed.add((int(n), pat, lib))
cells = {}
for r, lib, n, pat, size, incoll, tail, skew, wrong in rows:
    cells.setdefault((int(n), pat, int(size), lib), []).append((float(incoll), float(tail), float(wrong)))
libs = []
for r in rows:
    if r[1] not in libs:
        libs.append(r[1])
for _n, _p, lib in sorted(failed):
    if lib not in libs:
        libs.append(lib)
if "papccl" in libs:
    libs.remove("papccl")
    libs.insert(0, "papccl")
peers = [l for l in libs if l != "papccl"]
nan = float("nan")
med = lambda v: st.median(v) if v else nan


def ratio(a, b):
    return f"{a / b:.2f}" if a == a and b == b and b > 0 else "-"


print("# float32 sum allreduce in place; medians over rounds of per-cell medians; us.")
print("# inColl = mean time in the call over ranks; tail = last completion - last arrival;")
print("# ratio = papccl / peer (below 1: papccl faster); best = the fastest peer in the cell")
hdr = "| ranks | pattern | size | " + " | ".join(f"{l} inColl / tail" for l in libs) + \
      " | inColl vs best | tail vs best | " + " | ".join(f"inColl vs {p}" for p in peers) + " |"
print(hdr)
print("|" + "---|" * (hdr.count("|") - 1))
wrong = 0
keys = {(k[0], k[1], k[2]) for k in cells}
for n, pat, size in sorted(keys):
    v = {l: cells.get((n, pat, size, l), []) for l in libs}
    wrong += sum(x[2] for l in libs for x in v[l])
    bad = {l for l in libs if (n, pat, l) in failed}
    ic = {l: nan if l in bad else med([x[0] for x in v[l]]) for l in libs}
    tl = {l: nan if l in bad else med([x[1] for x in v[l]]) for l in libs}
    cols = ["FAIL" if l in bad else f"{ic[l]:.1f} / {tl[l]:.1f}" if v[l] else "-" for l in libs]
    best_ic = min([ic[p] for p in peers if ic[p] == ic[p]], default=nan)
    best_tl = min([tl[p] for p in peers if tl[p] == tl[p]], default=nan)
    pap_ic, pap_tl = ic.get("papccl", nan), tl.get("papccl", nan)
    rat = [ratio(pap_ic, ic[p]) for p in peers]
    print(f"| {n} | {pat} | {size} | " + " | ".join(cols) + f" | {ratio(pap_ic, best_ic)} | "
          f"{ratio(pap_tl, best_tl)} | " + " | ".join(rat) + " |")
print(f"# wrong elements over every cell: {wrong:.0f}; failed runs: {len(failed)}")
for n, pat, lib in sorted(failed):
    print(f"# FAIL: {lib} at {n} ranks, {pat}")
sys.exit(1 if wrong or failed else 0)
