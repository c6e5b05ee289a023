#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The speed goals of a host comparison (perf/README.md, "Goals"), judged from run.sh's
cells.tsv and the floors it measured in the same run (floors.tsv). Prints one line per cell
and goal: papccl's figure, the reference, the ratio, the bound, and whether it holds.
Usage: goals.py cells.tsv [floors.tsv]. Medians over rounds, as in table.py. Always exits 0:
a goal is a target to report, not a test."""
import statistics as st
import sys

LATE_MIN_BYTES = 65536  # tails are judged from 64 KiB up
nan = float("nan")


def load_cells(path):
    """(lib, ranks, pattern, size) -> {round: (inColl, tail)}."""
    cells = {}
    for line in open(path):
        if not line.strip():
            continue
        r, lib, n, pat, size, incoll, tail, _skew, _wrong = line.rstrip("\n").split("\t")
        cells.setdefault((lib, int(n), pat, int(size)), {})[r] = (float(incoll), float(tail))
    return cells


def load_floors(path):
    """round -> {name: value}; names: exchange_us (2-rank cache-line exchange), copy_gbps
    (two threads copying at once, bytes per ns over both), memfloor64_us (2 threads each
    memcpy 64 MiB)."""
    floors = {}
    if path is None:
        return {}
    for line in open(path):
        if line.strip():
            _r, name, value = line.split()
            floors.setdefault(name, []).append(float(value))
    return {k: st.median(v) for k, v in floors.items()}


def main():
    cells = load_cells(sys.argv[1])
    floors = load_floors(sys.argv[2] if len(sys.argv) > 2 else None)
    peers = sorted({k[0] for k in cells} - {"papccl"})
    rows = []

    def med(key, field):
        v = cells.get(key, {})
        return st.median(x[field] for x in v.values()) if v else nan

    def best(n, pat, size, field):
        vals = [(med((p, n, pat, size), field), p) for p in peers if (p, n, pat, size) in cells]
        return min(vals) if vals else (nan, "-")

    def paired(n, pat, size, field):
        """Median over rounds of papccl / the best peer of that round: the libraries of one
        round ran minutes apart, rounds may not (this VM changes speed by 2x between them)."""
        own = cells.get(("papccl", n, pat, size), {})
        rs = []
        for r, v in own.items():
            ref = [cells[(p, n, pat, size)][r][field] for p in peers
                   if r in cells.get((p, n, pat, size), {})]
            if ref and min(ref) > 0:
                rs.append(v[field] / min(ref))
        return st.median(rs) if rs else nan

    def judge(goal, cell, value, ref, bound, what, pair=nan):
        r = value / ref if ref == ref and ref > 0 and value == value else nan
        decide = pair if pair == pair else r
        ok = "-" if decide != decide else ("holds" if decide <= bound else "MISS")
        rows.append((goal, cell, f"{value:.1f}", f"{ref:.1f} ({what})", f"{r:.2f}",
                     f"{pair:.2f}" if pair == pair else "-", f"<= {bound}", ok))

    def by_round(num, nf, den, df):
        """Median over rounds of cells[num][r][nf] / cells[den][r][df] (rounds in both)."""
        a, b = cells.get(num, {}), cells.get(den, {})
        rs = [a[r][nf] / b[r][df] for r in a if r in b and b[r][df] > 0]
        return st.median(rs) if rs else nan

    def own_ratio(n, pat, size, tail):
        """The tail against papccl's balanced call after the same work (pattern together:S,
        every rank S us late): a call after S us of work finds colder caches than one back to
        back, whoever is late. Its tail (last arrival to last completion) is the reference:
        where ranks outnumber CPUs, ranks computing together reach the call as the scheduler
        lets their spins end, so their time in the call also holds waits for each other."""
        skew = pat.split(":", 1)[1] if ":" in pat else ""
        key = ("papccl", n, "together:" + skew, size)
        if not skew or key not in cells:
            return
        judge("late: tail <= own balanced after the same work", f"{n} ranks, {pat}, {size} B",
              tail, med(key, 1), 1.0, "papccl together:" + skew + " tail",
              by_round(("papccl", n, pat, size), 1, key, 1))

    for (lib, n, pat, size) in sorted(cells, key=lambda k: k[1:]):
        if lib != "papccl":
            continue
        incoll, tail = med((lib, n, pat, size), 0), med((lib, n, pat, size), 1)
        cell = f"{n} ranks, {pat}, {size} B"
        if pat.startswith("together"):
            # Every rank did the same work before the call: balanced, as a training step is.
            ref, who = best(n, pat, size, 0)
            if ref == ref:
                judge("balanced after work <= best peer", cell, incoll, ref, 1.0, who,
                      paired(n, pat, size, 0))
            continue
        if pat.startswith("balanced"):
            ref, who = best(n, pat, size, 0)
            judge("balanced <= best peer", cell, incoll, ref, 1.0, who, paired(n, pat, size, 0))
            if n == 2 and size <= 8 and "exchange_us" in floors:
                judge("2 ranks 8 B <= 2x line floor", cell, incoll, floors["exchange_us"], 2.0,
                      "line exchange")
            if n == 2 and size == 64 << 20 and "memfloor64_us" in floors:
                judge("64 MiB, 2 ranks <= 1.5x memory floor", cell, incoll,
                      floors["memfloor64_us"], 1.5, "2 x memcpy 64 MiB")
            continue
        if size < LATE_MIN_BYTES:
            continue
        ref, who = best(n, pat, size, 1)
        judge("late: tail <= 0.7x best peer", cell, tail, ref, 0.7, who, paired(n, pat, size, 1))
        bal = med(("papccl", n, "balanced:0", size), 0)
        if bal == bal:
            # The same ratio for the peer with the best tail: what the machine does to a
            # call that comes after a wait, whoever runs it.
            pb = med((who, n, "balanced:0", size), 0)
            ptail = med((who, n, pat, size), 1)
            peer = f"; {who}'s own: {ptail / pb:.2f}x" if pb == pb and pb > 0 else ""
            judge("late: tail <= own balanced", cell, tail, bal, 1.0,
                  "papccl balanced inColl" + peer,
                  by_round(("papccl", n, pat, size), 1, ("papccl", n, "balanced:0", size), 0))
        own_ratio(n, pat, size, tail)
        if n == 4 and size == 16 << 20 and pat.endswith(":20000") and "copy_gbps" in floors:
            floor_us = (n + 2) * size / floors["copy_gbps"] / 1000.0
            judge("16 MiB, 20 ms late, 4 ranks: tail <= 1.5x post-arrival floor", cell, tail,
                  floor_us, 1.5, f"(n+2) x size at {floors['copy_gbps']:.2f} GB/s")
    print("# ratio: of the medians over rounds; paired: the median over rounds of each round's")
    print("# ratio against that round's best peer (decides where there is one)")
    print("| goal | cell | papccl us | reference us | ratio | paired | bound | |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    held = sum(1 for r in rows if r[-1] == "holds")
    missed = sum(1 for r in rows if r[-1] == "MISS")
    print(f"# goals: {held} hold, {missed} missed, {len(rows) - held - missed} without a reference")
    if floors:
        print("# floors (medians over rounds): " +
              ", ".join(f"{k} {v:.3f}" for k, v in sorted(floors.items())))


if __name__ == "__main__":
    main()
