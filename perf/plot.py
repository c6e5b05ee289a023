#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots of the comparison (perf/compare/run.sh), of one collective's arrival timeline and of
the comparison between hosts (scripts/bench-hosts.sh).

  plot.py --cells OUT/cells.tsv [--ranks N] [--tail-size BYTES] [--timeline timeline.txt]
          [--hosts HOSTS/cells.tsv ...] [--out DIR]

Writes DIR/busbw.png (bus bandwidth against size per library, balanced arrivals),
DIR/tail.png (tail after the last arrival against skew, per pattern and library) and, with
--timeline, DIR/timeline.png (ranks as rows: arrival, start of own work, completion); with
--hosts, DIR/hosts.png (time per call, balanced, and tail after the late host's arrival,
against size, per library; one panel per late host when several runs are given); with
--ddp, DIR/ddp.png (DDP and FSDP2 step time of papccl and gloo per bucket size and straggler
delay, one panel per kind and rank count; the cells.tsv of perf/torch/ddp_bench.py)."""
import argparse
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_cells(path, want=None):
    """Cells of one rank count: `want`, else the first in the file."""
    cells = {}
    nranks = 0
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 9:
            continue
        _, lib, n, pat, size, incoll, tail, skew, _ = f
        if (want or nranks or int(n)) != int(n):
            continue
        nranks = int(n)
        cells.setdefault((lib, pat, int(size)), []).append((float(incoll), float(tail)))
    return cells, nranks


def busbw_plot(cells, nranks, out):
    plt.figure(figsize=(6.4, 4.2))
    libs = sorted({k[0] for k in cells}, key=lambda l: (l != "papccl", l))
    for lib in libs:
        pts = sorted((k[2], statistics.median(x[0] for x in v)) for k, v in cells.items()
                     if k[0] == lib and k[1].startswith("balanced"))
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ys = [p[0] / (p[1] * 1e-6) / 1e9 * 2 * (nranks - 1) / nranks for p in pts]
        plt.plot(xs, ys, marker="o", label=lib, linewidth=2.5 if lib == "papccl" else 1.2)
    plt.xscale("log", base=2)
    plt.yscale("log")
    plt.xlabel("message size (bytes)")
    plt.ylabel("bus bandwidth (GB/s)")
    plt.title(f"allreduce, balanced arrivals, {nranks} ranks on one host")
    plt.grid(True, which="both", alpha=0.3)
    plt.legend()
    plt.tight_layout()
    plt.savefig(os.path.join(out, "busbw.png"), dpi=110)
    plt.close()


def tail_plot(cells, nranks, out, size=None):
    """One panel per arrival pattern; papccl's balanced call after the same work (together:S,
    its own reference) is drawn dashed in every panel, not as a pattern of its own."""
    kinds = sorted({k[1].split(":")[0] for k in cells
                    if not k[1].startswith(("balanced", "together"))})
    sizes = sorted({k[2] for k in cells})
    size = size if size in sizes else sizes[-1]
    libs = sorted({k[0] for k in cells}, key=lambda l: (l != "papccl", l))
    fig, axes = plt.subplots(1, max(1, len(kinds)), figsize=(5.2 * max(1, len(kinds)), 4.2),
                             squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        for lib in libs:
            pts = []
            for (l, pat, s), v in cells.items():
                if l != lib or s != size:
                    continue
                k, skew = pat.split(":") if ":" in pat else (pat, "0")
                if k == kind or k == "balanced":
                    pts.append((float(skew) / 1000, statistics.median(x[1] for x in v) / 1000))
            pts.sort()
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lib,
                        linewidth=2.5 if lib == "papccl" else 1.2)
        # Its tail, as goals.py compares it (the time in the call of together:S counts the
        # wait for ranks the scheduler let start late).
        own = sorted((float(pat.split(":")[1]) / 1000, statistics.median(x[1] for x in v) / 1000)
                     for (l, pat, s), v in cells.items()
                     if l == "papccl" and s == size and pat.startswith(("together:", "balanced")))
        if own:
            ax.plot([p[0] for p in own], [p[1] for p in own], linestyle="--", marker="x", color="0.4",
                    label="papccl balanced after the same work")
        ax.set_xlabel("injected skew (ms)")
        ax.set_ylabel("tail after the last arrival (ms)")
        ax.set_title(f"{kind}: {size >> 20} MiB, {nranks} ranks")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "tail.png"), dpi=110)
    plt.close(fig)


def timeline_plot(path, out):
    rows, title = [], "one allreduce"
    for line in open(path):
        if line.startswith("# papccl"):
            title = line[2:].strip()
        if line.startswith("#") or not line.strip():
            continue
        r, a, s, d = line.split()
        rows.append((int(r), float(a) / 1000, float(s) / 1000, float(d) / 1000))
    plt.figure(figsize=(7.5, 0.6 * len(rows) + 1.6))
    for r, a, s, d in rows:
        plt.plot([a, s], [r, r], color="0.7", linewidth=6, solid_capstyle="butt")
        plt.plot([s, d], [r, r], color="tab:blue", linewidth=6, solid_capstyle="butt")
        plt.plot([a], [r], marker="|", color="k", markersize=16)
        plt.plot([d], [r], marker="|", color="tab:red", markersize=16)
    last = max(a for _, a, _, _ in rows)
    plt.axvline(last, color="tab:orange", linestyle="--", label="last arrival")
    plt.plot([], [], color="0.7", linewidth=6, label="waiting for the commit")
    plt.plot([], [], color="tab:blue", linewidth=6, label="own work (plan running)")
    plt.plot([], [], marker="|", color="k", linestyle="", markersize=12, label="arrival")
    plt.plot([], [], marker="|", color="tab:red", linestyle="", markersize=12, label="completion")
    plt.yticks([r for r, *_ in rows], [f"rank {r}" for r, *_ in rows])
    plt.gca().invert_yaxis()
    plt.xlabel("time from the first arrival (ms)")
    plt.title(title, fontsize=9)
    plt.legend(fontsize=7, loc="lower left")
    plt.grid(True, axis="x", alpha=0.3)
    plt.tight_layout()
    plt.savefig(os.path.join(out, "timeline.png"), dpi=110)
    plt.close()


def hosts_plot(paths, out):
    raw, n = {}, 0
    for path in paths:  # several runs (another late host) go side by side
        r, k = load_cells(path)
        if not r:
            sys.exit(f"plot.py: no cells in {path}")
        n = n or k
        for key, v in r.items():
            raw.setdefault(key, []).extend(v)

    def kind_of(pat):  # "balanced:0", "late-k:1:5000" (the last host), "late:0:5000"
        if not pat.startswith("late"):
            return "balanced"
        if pat.startswith("late-k:"):
            return "last host late"
        return f"host {pat.split(':')[1]} late"

    cells = {}
    for (lib, pat, size), v in raw.items():
        cells.setdefault((lib, kind_of(pat), size), []).extend(v)
    kinds = sorted({k[1] for k in cells}, key=lambda k: (k != "balanced", k != "last host late", k))
    libs = sorted({k[0] for k in cells}, key=lambda l: (l != "papccl", l))
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 4.2), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        idx = 0 if kind == "balanced" else 1
        for lib in libs:
            pts = sorted((k[2], statistics.median(x[idx] for x in v)) for k, v in cells.items()
                         if k[0] == lib and k[1] == kind)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lib,
                        linewidth=2.5 if lib == "papccl" else 1.2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("time per call (us)" if idx == 0 else "tail after the last arrival (us)")
        ax.set_title(f"{n} ranks on separate hosts, {kind}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "hosts.png"), dpi=110)
    plt.close(fig)


def ddp_plot(paths, out):
    """Step time of papccl and gloo per cell: one panel per kind (DDP, FSDP2; rows) and rank
    count (columns). Files of the torch 1.13 benchmark (7 columns, no kind) are DDP."""
    cells, cpus = {}, set()  # (kind, ranks, bucket, delay, backend) -> step ms of each round
    for path in paths:
        with open(path) as f:
            for line in f:
                c = line.rstrip("\n").split("\t")
                if line.startswith("#"):
                    m = re.search(r"(\d+) CPUs", line)
                    cpus.update([int(m.group(1))] if m else [])
                    continue
                if len(c) < 7:
                    continue
                kind = c[7] if len(c) > 7 else "ddp"
                key = (kind, int(c[6]), c[2], float(c[3]), c[1])
                cells.setdefault(key, []).append(float(c[4]))
    if not cells:
        sys.exit("plot.py: no DDP cells in " + " ".join(paths))
    kinds = sorted({k[0] for k in cells}, key=lambda k: k != "ddp")
    ranks = sorted({k[1] for k in cells})
    on = " on %d CPUs" % cpus.pop() if len(cpus) == 1 else ""
    fig, axes = plt.subplots(len(kinds), len(ranks), figsize=(5.5 * len(ranks), 4.0 * len(kinds)),
                             squeeze=False)
    for row, kind in zip(axes, kinds):
        for ax, n in zip(row, ranks):
            keys = sorted({(k[2], k[3]) for k in cells if k[:2] == (kind, n)},
                          key=lambda k: (float(k[0]) if k[0] != "-" else 0, k[1]))
            xs = range(len(keys))
            for off, be in ((-0.2, "papccl"), (0.2, "gloo")):
                ys = [statistics.median(cells.get((kind, n, b, d, be), [float("nan")])) for b, d in keys]
                ax.bar([x + off for x in xs], ys, width=0.4, label=be)
            ax.set_xticks(list(xs))
            ax.set_xticklabels([("+%g ms" % d if b == "-" else "%s MiB\n+%g ms" % (b, d)) for b, d in keys],
                               fontsize=8)
            ax.set_xlabel(("DDP bucket size, " if kind == "ddp" else "") + "straggler's extra compute")
            ax.set_ylabel("step time (ms, median)")
            ax.set_title("%s, %d ranks%s" % ("DDP" if kind == "ddp" else "FSDP2", n, on))
            ax.grid(True, axis="y", alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "ddp.png"), dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells")
    ap.add_argument("--timeline")
    ap.add_argument("--hosts", nargs="+",
                    help="cells.tsv of scripts/bench-hosts.sh --out DIR (several: one per late host)")
    ap.add_argument("--ddp", nargs="+",
                    help="cells.tsv of perf/torch/ddp_bench.py (several: one per rank count, or run.sh's)")
    ap.add_argument("--out", default=".")
    ap.add_argument("--ranks", type=int, help="rank count to plot (default: the first in the cells)")
    ap.add_argument("--tail-size", type=int, help="bytes of the tail plot (default: the largest)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.cells:
        cells, n = load_cells(a.cells, a.ranks)
        if not cells:
            sys.exit(f"plot.py: no cells in {a.cells}")
        busbw_plot(cells, n, a.out)
        tail_plot(cells, n, a.out, a.tail_size)
    if a.timeline:
        timeline_plot(a.timeline, a.out)
    if a.hosts:
        hosts_plot(a.hosts, a.out)
    if a.ddp:
        ddp_plot(a.ddp, a.out)
    print(f"plot.py: wrote the plots to {a.out}")


if __name__ == "__main__":
    main()
