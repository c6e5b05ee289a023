# SPDX-License-Identifier: Apache-2.0
"""DDP step time on papccl against gloo, side by side in one job, with and without a
straggler (one rank's data loading slower by D ms per step).

    PYTHONPATH=build/python python3 -m papccl.launch -n 4 perf/torch/ddp_bench.py --out DIR

One job holds both backends (the default group is papccl, a second group over the same ranks
is gloo), so every cell of a round runs under the same machine load; each round runs every
(bucket size, straggler delay, backend) cell once, backends alternating. A cell builds a
fresh DDP model (same seed), runs --warmup steps, then --steps timed steps; a step is the
straggler's sleep (on the last rank), forward, backward (DDP's bucketed allreduces) and the
optimizer step, timed on every rank; the cell's value is the median over steps of the
slowest rank's step. Rank 0 writes DIR/cells.tsv (round, backend, bucket MiB, delay ms, step
ms, papccl's median tail over the timed allreduces in us, ranks) and prints medians over rounds with the papccl/gloo ratio. For every
papccl cell with a straggler it writes the arrival pattern of the last round's timed steps'
allreduces as DIR/trace-b{bucket}-d{delay}.txt (``--arrival trace:FILE``).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import papccl.torch as pt


def make_model(width, layers):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*mods, nn.Linear(width, 10))


def last_seq(be):
    """The sequence number of the papccl group's last recorded collective (-1: none)."""
    if be != "papccl":
        return -1
    last = pt.pap_stats(last=1)["last"]
    return last["seq"] if last else -1


def run_cell(pg, be, args, bucket_mb, delay_ms, rank, world):
    """Returns the timed steps' durations and, for papccl, the last collective's sequence
    number before them."""
    model = DDP(make_model(args.width, args.layers), process_group=pg, bucket_cap_mb=bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    times = []
    mark = -1
    for s in range(args.warmup + args.steps):
        if s == args.warmup:
            mark = last_seq(be)
        t0 = time.perf_counter()
        if rank == world - 1 and delay_ms > 0:
            time.sleep(delay_ms / 1000)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if s >= args.warmup:
            times.append(time.perf_counter() - t0)
    return times, mark


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--buckets", default="1,25", help="DDP bucket_cap_mb values")
    ap.add_argument("--delays", default="0,2,20", help="the straggler's extra ms per step")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2, help="samples per rank and step (small: the step is mostly communication)")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("papccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"papccl": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    buckets = [float(b) for b in args.buckets.split(",")]
    delays = [float(d) for d in args.delays.split(",")]
    nparams = sum(p.numel() for p in make_model(args.width, args.layers).parameters())
    cells = {}
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        tsv = open(os.path.join(args.out, "cells.tsv"), "w")
        print("# %d ranks, model %d x %d + 10 (%.1f MiB of fp32 gradients), batch %d per rank, "
              "%d rounds x %d timed steps (+%d warm-up)"
              % (world, args.layers, args.width, nparams * 4 / 2**20, args.batch, args.rounds,
                 args.steps, args.warmup), flush=True)
    for rnd in range(args.rounds):
        for b in buckets:
            for d in delays:
                order = ["papccl", "gloo"] if rnd % 2 == 0 else ["gloo", "papccl"]
                for be in order:
                    times, mark = run_cell(groups[be], be, args, b, d, rank, world)
                    t = torch.tensor(times, dtype=torch.float64)
                    alls = [torch.empty_like(t) for _ in range(world)]
                    dist.all_gather(alls, t, group=groups["gloo"])
                    slowest = torch.stack(alls).max(0).values
                    step_ms = statistics.median(slowest.tolist()) * 1e3
                    tail = ""
                    if be == "papccl":
                        hist = pt.pap_stats(last=4096)["history"]
                        timed = [h["tail_us"] for h in hist if h["seq"] > mark and h["complete"]]
                        tail = "%.0f" % statistics.median(timed) if timed else ""
                        if rank == 0 and d > 0 and rnd == args.rounds - 1:
                            path = os.path.join(args.out, "trace-b%g-d%g.txt" % (b, d))
                            pt.save_trace(path, since_seq=mark)
                    if rank == 0:
                        tsv.write("%d\t%s\t%g\t%g\t%.3f\t%s\t%d\n" % (rnd, be, b, d, step_ms, tail, world))
                        tsv.flush()
                        cells.setdefault((b, d, be), []).append(step_ms)
    if rank == 0:
        print("| bucket MiB | straggler ms | papccl step ms | gloo step ms | papccl / gloo |")
        print("|---|---|---|---|---|")
        for b in buckets:
            for d in delays:
                p = statistics.median(cells[(b, d, "papccl")])
                q = statistics.median(cells[(b, d, "gloo")])
                print("| %g | %g | %.1f | %.1f | %.2fx |" % (b, d, p, q, p / q))
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
