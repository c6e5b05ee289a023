#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The papccl torch.distributed backend on CUDA tensors: 2 processes sharing one GPU.

  PYTHONPATH=BUILD/python python3 scripts/gpu-torch-backend.py [--device cpu]

Each rank: all_reduce (f32, bf16), all_gather_into_tensor, reduce_scatter_tensor with AVG,
broadcast, send/recv and recv from any source on CUDA tensors, checked against values
computed locally; then 3 DDP steps of a small MLP on CUDA compared element-wise with a
single-process reference trained on the concatenated batches (same seed; fp32, TF32 off:
rtol 1e-5, atol 1e-6). --device cpu runs the same checks on CPU tensors (a dry run of
this script on a machine without a GPU). Prints one line per check and PASS at the end;
exits 1 on any failure.
"""
import argparse
import os
import socket
import sys

STEPS, BATCH, DIN, DOUT = 3, 16, 32, 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(DIN, 64), torch.nn.Tanh(), torch.nn.Linear(64, DOUT))


def batches(torch, rank):
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(BATCH, DIN, generator=g), torch.randn(BATCH, DOUT, generator=g))
            for _ in range(STEPS)]


def train(torch, model, data, dev):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
        opt.step()


def collectives(torch, dist, rank, world, dev, check):
    x = torch.full((1 << 20,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    check("all_reduce f32 (1 Mi elements)", torch.all(x == world * (world + 1) / 2).item())
    b = torch.full((999,), float(rank + 1), device=dev, dtype=torch.bfloat16)
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    check("all_reduce bf16 MAX", torch.all(b == float(world)).item())
    out = torch.empty(world * 100, device=dev)
    dist.all_gather_into_tensor(out, torch.full((100,), float(rank), device=dev))
    check("all_gather_into_tensor", torch.equal(out.cpu(), torch.arange(world).repeat_interleave(100).float()))
    inp = torch.arange(world * 50, device=dev, dtype=torch.float32) + 10 * rank
    rs = torch.empty(50, device=dev)
    dist.reduce_scatter_tensor(rs, inp, op=dist.ReduceOp.AVG)
    want = torch.arange(rank * 50, rank * 50 + 50, dtype=torch.float32) + 10 * (world - 1) / 2
    check("reduce_scatter_tensor AVG", torch.allclose(rs.cpu(), want))
    y = torch.arange(1000, device=dev, dtype=torch.float32) * (rank + 1)
    dist.broadcast(y, src=world - 1)
    check("broadcast", torch.equal(y.cpu(), torch.arange(1000, dtype=torch.float32) * world))
    t = torch.full((77,), float(rank + 5), device=dev)
    if rank == 0:
        dist.send(t, 1)
        got = torch.empty(77, device=dev)
        src = dist.recv(got)  # any source
        check("recv from any source (src %d)" % src, src == 1 and torch.all(got == 6.0).item())
    else:
        got = torch.empty(77, device=dev)
        dist.recv(got, 0)
        check("send/recv", torch.all(got == 5.0).item())
        dist.send(t, 0)


def rank_main(rank, world, port, device, results):
    import torch
    import torch.distributed as dist

    import papccl.torch  # noqa: F401  (registers "papccl")

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    lines, ok = [], [True]

    def check(name, cond):
        ok[0] = ok[0] and bool(cond)
        lines.append(("ok   " if cond else "FAIL ") + name)

    try:
        if device == "cuda":
            torch.cuda.set_device(0)
            torch.backends.cuda.matmul.allow_tf32 = False
        dev = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
        dist.init_process_group("cpu:papccl,cuda:papccl", rank=rank, world_size=world)
        collectives(torch, dist, rank, world, dev, check)
        model = make_model(torch).to(dev)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if device == "cuda" else None)
        train(torch, ddp, batches(torch, rank), dev)
        ref = make_model(torch).to(dev)
        full = [(torch.cat([batches(torch, r)[s][0] for r in range(world)]),
                 torch.cat([batches(torch, r)[s][1] for r in range(world)])) for s in range(STEPS)]
        train(torch, ref, full, dev)
        worst = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
        close = all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(model.parameters(), ref.parameters()))
        check("DDP %d steps on %s = single-process reference (max |diff| %.2e)" % (STEPS, device, worst), close)
        if device == "cuda":
            torch.cuda.synchronize()
        dist.destroy_process_group()
    except Exception as e:  # report, do not hang the parent
        ok[0] = False
        lines.append("FAIL exception: %r" % (e,))
    results.put((rank, ok[0], lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = ap.parse_args()
    import torch.multiprocessing as mp

    world, port = 2, free_port()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, world, port, args.device, results)) for r in range(world)]
    for p in procs:
        p.start()
    got = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    all_ok = all(ok for _, ok, _ in got)
    for rank, _, lines in sorted(got):
        for line in lines:
            print("rank %d: %s" % (rank, line))
    print("PASS" if all_ok else "FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
