# SPDX-License-Identifier: Apache-2.0
"""Train a small convolutional network on scikit-learn's handwritten digits (8x8 images,
1,797 samples, shipped in scikit-learn's wheel) with DistributedDataParallel on papccl.

    python3 -m papccl.launch -n 4 python/examples/train_ddp.py

(with PYTHONPATH=build/python before `meson install`). Prints each epoch's loss, test accuracy
and median step time on rank 0, then what papccl saw of the ranks' arrivals.
--straggler-ms D makes the last rank's data loading D ms slower per step, to see papccl's
arrival telemetry find it; --backend gloo runs the same on gloo.
"""
import argparse
import datetime
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import papccl.torch as pt


def load_digits():
    from sklearn.datasets import load_digits as sk_digits  # scikit-learn (python/requirements-torch.txt)
    d = sk_digits()
    x = torch.tensor(d.data, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(y), generator=g)
    x, y = x[perm], y[perm]
    cut = len(y) * 4 // 5
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="papccl")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    ap.add_argument("--straggler-ms", type=float, default=0.0)
    ap.add_argument("--expect-accuracy", type=float, default=0.0,
                    help="exit 1 when the final test accuracy is below this (a smoke check)")
    args = ap.parse_args()

    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    (xtr, ytr), (xte, yte) = load_digits()
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    steps = len(ytr) // (args.batch * world)
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(epoch)
        perm = torch.randperm(len(ytr), generator=g)
        times, losses = [], []
        model.train()
        for s in range(steps):
            t0 = time.perf_counter()
            if rank == world - 1 and args.straggler_ms > 0:
                time.sleep(args.straggler_ms / 1000)  # slow data loading on one rank
            idx = perm[(s * world + rank) * args.batch:(s * world + rank + 1) * args.batch]
            opt.zero_grad()
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        if rank == 0:
            print("epoch %d: loss %.4f, test accuracy %.3f, step %.2f ms (median of %d)"
                  % (epoch, sum(losses) / len(losses), acc, statistics.median(times) * 1e3, steps),
                  flush=True)
    if args.backend == "papccl":
        st = pt.pap_stats(last=steps)
        w = st["window"]
        if rank == 0:
            print("papccl: last %d allreduces: straggler %d, times last per rank %s, mean "
                  "lateness per rank (us) %s, mean skew %.0f us"
                  % (w["ops"], w["straggler"], w["late_count"],
                     [round(v) for v in w["mean_lateness_us"]], w["mean_skew_us"]), flush=True)
    dist.destroy_process_group()
    if rank == 0:
        print("final test accuracy %.3f" % acc)
    if acc < args.expect_accuracy:
        raise SystemExit("rank %d: test accuracy %.3f is below %.3f" % (rank, acc, args.expect_accuracy))


if __name__ == "__main__":
    main()
