# SPDX-License-Identifier: Apache-2.0
"""DDP and FSDP2 step time on papccl against gloo, side by side in one job, balanced and
with one straggler (the last rank computes D ms more per step, as a slower data pipeline
or a slower core would: it holds its CPU, it does not sleep).

    PYTHONPATH=build/python python3 -m papccl.launch -n 4 perf/torch/ddp_bench.py --out DIR
    python3 perf/torch/ddp_bench.py --table DIR2/cells.tsv DIR4/cells.tsv   # markdown table

One job holds both backends (the default group is papccl, a second group over the same ranks
is gloo; FSDP2 gets a DeviceMesh over each group, ``DeviceMesh.from_group``), so every cell of
a round runs under the same machine load; each round runs every (kind, bucket size,
straggler delay, backend) cell once, the backends alternating (papccl first in even rounds,
gloo first in odd ones). A cell builds a fresh model (same seed), runs --warmup steps, then
--steps timed steps; a step is the straggler's compute (on the last rank), forward, backward
and the optimizer step, timed on every rank; the cell's value is the median over steps of the
slowest rank's step.

DDP: ``bucket_cap_mb`` is the bucket axis. FSDP2 (``fully_shard`` on every layer, then the
root; ``reshard_after_forward`` left at its default, True) has no bucket: its unit of
communication is the layer (an all-gather before its forward and its backward, a
reduce-scatter of its gradient), so its cells have bucket "-".

Rank 0 writes DIR/cells.tsv (round, backend, bucket MiB or -, delay ms, step ms, papccl's
median tail over the timed collectives in us, ranks, kind) and, for every papccl DDP cell
with a straggler, the arrival pattern of the last round's timed allreduces as
DIR/trace-b{bucket}-d{delay}.txt (``--arrival trace:FILE``).
``--profile`` then runs, per kind, the cell with the largest straggler and bucket once more on
each backend under torch.profiler and writes rank 0's and the straggler's profile (phases,
papccl's record of its collectives, operator table) as
DIR/profile-{kind}-{backend}-{N}ranks-r{rank}.txt.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

BACKENDS = ("papccl", "gloo")


def make_model(width, layers):
    """``layers`` blocks of Linear(width, width) + ReLU, then a 10-way classifier: the blocks
    are FSDP2's units."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)]
    return nn.Sequential(*blocks, nn.Linear(width, 10))


def straggle(ms, work):
    """Computes for ``ms`` of wall time (perf_counter): small matmuls on one thread, so the
    late rank holds its core the whole time, as a rank with more work would."""
    end = time.perf_counter() + ms / 1000
    a, b, c = work
    while time.perf_counter() < end:
        torch.mm(a, b, out=c)


def last_seq(be):
    """The sequence number of the papccl group's last recorded collective (-1: none)."""
    if be != "papccl":
        return -1
    import papccl.torch as pt

    last = pt.pap_stats(last=1)["last"]
    return last["seq"] if last else -1


def build(kind, be, groups, meshes, args, bucket_mb):
    model = make_model(args.width, args.layers)
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, process_group=groups[be], bucket_cap_mb=bucket_mb)
    from torch.distributed.fsdp import fully_shard

    for block in model[:-1]:
        fully_shard(block, mesh=meshes[be])
    fully_shard(model, mesh=meshes[be])
    return model


PHASES = ("straggler", "forward", "backward", "optimizer")


def run_cell(kind, be, groups, meshes, args, bucket_mb, delay_ms, rank, world, prof=None):
    """Returns the timed steps' durations, their phases' (PHASES, seconds per step) and, for
    papccl, the last collective's sequence number before them. With ``prof`` (a path), the
    timed steps run under torch.profiler and this rank's profile goes there."""
    model = build(kind, be, groups, meshes, args, bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    work = [torch.randn(64, 64, generator=g) for _ in range(3)]
    late = rank == world - 1 and delay_ms > 0
    times, phases = [], []
    mark = -1
    profiler = None
    for s in range(args.warmup + args.steps):
        if s == args.warmup:
            dist.barrier(group=groups["gloo"])
            mark = last_seq(be)
            if prof:
                profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                profiler.__enter__()
        t = [time.perf_counter()]
        if late:
            with torch.profiler.record_function("straggler_compute"):
                straggle(delay_ms, work)
        t.append(time.perf_counter())
        opt.zero_grad()
        with torch.profiler.record_function("forward"):
            loss = nn.functional.cross_entropy(model(x), y)
        t.append(time.perf_counter())
        with torch.profiler.record_function("backward"):
            loss.backward()
        t.append(time.perf_counter())
        with torch.profiler.record_function("optimizer"):
            opt.step()
        t.append(time.perf_counter())
        if s >= args.warmup:
            times.append(t[-1] - t[0])
            phases.append([b - a for a, b in zip(t, t[1:])])
    if profiler:
        profiler.__exit__(None, None, None)
        write_profile(prof, profiler, (kind, be, world, rank, bucket_mb, delay_ms), times, phases, mark)
    return times, phases, mark


def write_profile(path, profiler, cell, times, phases, mark):
    """One rank's profile of a cell: its phases (medians over the timed steps), papccl's
    record of its collectives (time in the call, tail after the last arrival) and
    torch.profiler's operator table."""
    kind, be, world, rank, bucket_mb, delay_ms = cell
    med = [statistics.median(p[i] for p in phases) * 1e3 for i in range(len(PHASES))]
    with open(path, "w") as f:
        f.write("# %s on %s, %d ranks, rank %d, bucket %s MiB, straggler +%g ms (last rank), "
                "%d timed steps\n" % (kind, be, world, rank, bucket_mb, delay_ms, len(times)))
        f.write("# step ms: %s\n" % " ".join("%.1f" % (t * 1e3) for t in times))
        f.write("# phase medians, ms: %s\n" % ", ".join("%s %.1f" % pm for pm in zip(PHASES, med)))
        if be == "papccl":
            import papccl.torch as pt

            hist = [h for h in pt.pap_stats(last=4096)["history"] if h["seq"] > mark]
            for op in sorted({h["op"] for h in hist}):
                hs = [h for h in hist if h["op"] == op]
                f.write("# papccl %s: %.1f a step, median in the call %.0f us, tail %.0f us, "
                        "skew %.0f us\n" % (op, len(hs) / len(times),
                                              statistics.median(h["time_in_coll_us"] for h in hs),
                                              statistics.median(h["tail_us"] for h in hs),
                                              statistics.median(h["skew_us"] for h in hs)))
        f.write(profiler.key_averages().table(sort_by="cpu_time_total", row_limit=30))


def cell_value(times, group, world):
    """The median over steps of the slowest rank's step, in ms (on every rank)."""
    t = torch.tensor(times, dtype=torch.float64)
    alls = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(alls, t, group=group)
    return statistics.median(torch.stack(alls).max(0).values.tolist()) * 1e3


def papccl_tail(mark):
    """papccl's median tail (us) over the collectives after ``mark``, '' when none."""
    import papccl.torch as pt

    hist = pt.pap_stats(last=4096)["history"]
    timed = [h["tail_us"] for h in hist if h["seq"] > mark and h["complete"]]
    return "%.0f" % statistics.median(timed) if timed else ""


def plan(args):
    """Every cell of a round: (kind, bucket MiB or None, delay ms)."""
    delays = [float(d) for d in args.delays.split(",")]
    cells = []
    for kind in args.kinds.split(","):
        buckets = [float(b) for b in args.buckets.split(",")] if kind == "ddp" else [None]
        cells += [(kind, b, d) for b in buckets for d in delays]
    return cells


def bench(args, rank, world, groups, meshes, tsv):
    cells = plan(args)
    for rnd in range(args.rounds):
        for kind, b, d in cells:
            order = BACKENDS if rnd % 2 == 0 else BACKENDS[::-1]
            for be in order:
                times, _, mark = run_cell(kind, be, groups, meshes, args, b, d, rank, world)
                step_ms = cell_value(times, groups["gloo"], world)
                tail = papccl_tail(mark) if be == "papccl" else ""
                if be == "papccl" and kind == "ddp" and rank == 0 and d > 0 and rnd == args.rounds - 1:
                    import papccl.torch as pt

                    pt.save_trace(os.path.join(args.out, "trace-b%g-d%g.txt" % (b, d)), since_seq=mark)
                if rank == 0:
                    tsv.write("%d\t%s\t%s\t%g\t%.3f\t%s\t%d\t%s\n"
                              % (rnd, be, "-" if b is None else "%g" % b, d, step_ms, tail, world, kind))
                    tsv.flush()


def profile(args, rank, world, groups, meshes):
    """After the rounds (so that the profiler's cost stays out of the cells): per kind, the
    cell with the largest straggler and bucket once more on each backend, under
    torch.profiler on every rank; --profile-ranks say which ranks write theirs."""
    pick = {}
    for kind, b, d in plan(args):
        if kind not in pick or (d, b or 0) > (pick[kind][2], pick[kind][1] or 0):
            pick[kind] = (kind, b, d)
    keep = {world - 1 if int(r) < 0 else int(r) for r in args.profile_ranks.split(",")}
    for kind, b, d in pick.values():
        for be in BACKENDS:
            path = os.path.join(args.out, "profile-%s-%s-%dranks-r%d.txt" % (kind, be, world, rank))
            times, _, _ = run_cell(kind, be, groups, meshes, args, b, d, rank, world, prof=path)
            if rank not in keep:
                os.unlink(path)
            step_ms = cell_value(times, groups["gloo"], world)
            if rank == 0:
                print("# profiled %s %s bucket %s +%g ms: %.1f ms a step (under the profiler)"
                      % (kind, be, b, d, step_ms), flush=True)


def load(paths):
    """cells.tsv rows as {(ranks, kind, bucket, delay, backend): [step ms per round]} and
    papccl's tails as {(ranks, kind, bucket, delay): [us]}. Files of the torch 1.13 version
    (7 columns) are DDP."""
    steps, tails = {}, {}
    for path in paths:
        with open(path) as f:
            for line in f:
                c = line.rstrip("\n").split("\t")
                if line.startswith("#") or len(c) < 7:
                    continue
                kind = c[7] if len(c) > 7 else "ddp"
                key = (int(c[6]), kind, c[2], float(c[3]))
                steps.setdefault(key + (c[1],), []).append(float(c[4]))
                if c[1] == "papccl" and c[5]:
                    tails.setdefault(key, []).append(float(c[5]))
    return steps, tails


def table(paths):
    """The markdown table of perf/README.md's PyTorch section, from cells.tsv files."""
    steps, tails = load(paths)
    keys = sorted({k[:4] for k in steps},
                  key=lambda k: (k[1] != "ddp", -k[0], float(k[2]) if k[2] != "-" else 0, k[3]))
    rows = ["| kind | ranks | bucket | straggler | papccl step ms | gloo step ms | papccl / gloo "
            "| papccl tail |", "|---|---|---|---|---|---|---|---|"]
    for k in keys:
        p, q = steps.get(k + ("papccl",)), steps.get(k + ("gloo",))
        if not p or not q:
            continue
        p, q = statistics.median(p), statistics.median(q)
        tail = statistics.median(tails[k]) / 1000 if k in tails else float("nan")
        rows.append("| %s | %d | %s | %s | %.1f | %.1f | %.2fx | %.1f ms |"
                    % ("DDP" if k[1] == "ddp" else "FSDP2", k[0], "-" if k[2] == "-" else k[2] + " MiB",
                       "+%g ms" % k[3] if k[3] else "-", p, q, p / q, tail))
    return "\n".join(rows)


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--kinds", default="ddp,fsdp2", help="ddp, fsdp2 or both")
    ap.add_argument("--buckets", default="1,25", help="DDP bucket_cap_mb values")
    ap.add_argument("--delays", default="0,2,20", help="the straggler's extra compute, ms per step")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2,
                    help="samples per rank and step (small: the step is mostly communication)")
    ap.add_argument("--profile", action="store_true",
                    help="after the rounds, profile one cell per kind and backend (see profile)")
    ap.add_argument("--profile-ranks", default="0,-1",
                    help="ranks whose profiles are kept (-1: the straggler)")
    ap.add_argument("--out", default=".")
    ap.add_argument("--table", nargs="+", metavar="CELLS_TSV",
                    help="print the markdown table of these files and exit")
    return ap.parse_args()


def main():
    args = parse()
    if args.table:
        print(table(args.table))
        return
    import papccl.torch  # noqa: F401  (registers the backend)
    from torch.distributed.device_mesh import DeviceMesh

    torch.set_num_threads(1)
    dist.init_process_group("papccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"papccl": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    meshes = {be: DeviceMesh.from_group(g, "cpu") for be, g in groups.items()}
    for be, m in meshes.items():
        assert dist.get_backend(m.get_group()) == be, (be, dist.get_backend(m.get_group()))
    tsv = None
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        nparams = sum(p.numel() for p in make_model(args.width, args.layers).parameters())
        head = ("# %d ranks, %d CPUs, torch %s, model %d x %d + 10 (%.1f MiB of fp32 gradients), "
                "batch %d per rank, %s, %d rounds x %d timed steps (+%d warm-up)"
                % (world, os.cpu_count(), torch.__version__, args.layers, args.width,
                   nparams * 4 / 2**20, args.batch, args.kinds, args.rounds, args.steps, args.warmup))
        print(head, flush=True)
        tsv = open(os.path.join(args.out, "cells.tsv"), "w")
        tsv.write(head + "\n")
        tsv.write("#round\tbackend\tbucket_mib\tdelay_ms\tstep_ms\tpapccl_tail_us\tranks\tkind\n")
    t0 = time.perf_counter()
    bench(args, rank, world, groups, meshes, tsv)
    if rank == 0:
        tsv.close()
        print(table([os.path.join(args.out, "cells.tsv")]))
        print("# %.0f s" % (time.perf_counter() - t0), flush=True)
    if args.profile:
        profile(args, rank, world, groups, meshes)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
