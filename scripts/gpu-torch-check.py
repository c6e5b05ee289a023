#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch's torch.distributed "nccl" backend on papccl's libnccl.so.2.

Run with papccl's library preloaded, on a machine with one GPU and PyTorch:

  LD_PRELOAD=build/src/nccl/libnccl.so.2 python3 scripts/gpu-torch-check.py

Two processes share GPU 0 (NVIDIA's NCCL refuses that; papccl allows it). Checks that the
NCCL library PyTorch talks to is papccl's (version 2.27.7), that all_reduce, broadcast,
all_gather and reduce_scatter give the right results, and that one DistributedDataParallel
training step runs and leaves both replicas with identical weights. Prints one line per
check and PASS at the end; exits 1 on any failure.
"""
import os
import socket
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, world, port, results):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    lines = []
    ok = True

    def check(name, cond):
        nonlocal ok
        ok = ok and bool(cond)
        lines.append(("ok   " if cond else "FAIL ") + name)

    try:
        version = torch.cuda.nccl.version()
        check("NCCL library is papccl's (version %s)" % (version,), tuple(version)[:3] == (2, 27, 7))
        dist.init_process_group("nccl", rank=rank, world_size=world)
        n = 1 << 20
        x = torch.full((n,), float(rank + 1), device=dev)
        dist.all_reduce(x)
        check("all_reduce sum", torch.all(x == world * (world + 1) / 2).item())
        y = torch.arange(1000, device=dev, dtype=torch.float32) * (rank + 1)
        dist.broadcast(y, src=world - 1)
        check("broadcast", torch.equal(y, torch.arange(1000, device=dev, dtype=torch.float32) * world))
        parts = [torch.empty(500, device=dev, dtype=torch.bfloat16) for _ in range(world)]
        dist.all_gather(parts, torch.full((500,), float(rank), device=dev, dtype=torch.bfloat16))
        check("all_gather bf16", all(torch.all(p == q).item() for q, p in enumerate(parts)))
        inp = [torch.full((300,), float(rank + 10 * q), device=dev) for q in range(world)]
        out = torch.empty(300, device=dev)
        dist.reduce_scatter(out, inp)
        want = sum(float(r + 10 * rank) for r in range(world))
        check("reduce_scatter", torch.all(out == want).item())

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).to(dev)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        torch.manual_seed(100 + rank)  # different data on each rank
        for _ in range(3):
            opt.zero_grad()
            loss = ddp(torch.randn(32, 64, device=dev)).pow(2).mean()
            loss.backward()
            opt.step()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        check("DDP: 3 steps, replicas identical (loss %.4f)" % loss.item(),
              all(torch.equal(gathered[0], g) for g in gathered))
        torch.cuda.synchronize()
        dist.destroy_process_group()
    except Exception as e:  # report, do not hang the parent
        ok = False
        lines.append("FAIL exception: %r" % (e,))
    results.put((rank, ok, lines))


def main():
    import torch.multiprocessing as mp

    world = 2
    port = free_port()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, world, port, results)) for r in range(world)]
    for p in procs:
        p.start()
    got = []
    for _ in procs:
        got.append(results.get(timeout=300))
    for p in procs:
        p.join(timeout=30)
    all_ok = True
    for rank, ok, lines in sorted(got):
        for line in lines:
            print("rank %d: %s" % (rank, line))
        all_ok = all_ok and ok
    print("PASS" if all_ok else "FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
