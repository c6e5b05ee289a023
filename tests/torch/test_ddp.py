# SPDX-License-Identifier: Apache-2.0
"""DistributedDataParallel on the papccl backend: after N steps every replica is bit-identical
and equal to one process trained on the whole batch; the same with a comm hook built on
all_reduce's future. Run by launch.py with 2 and 4 ranks."""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from common import RANK, WORLD, check, init, run

STEPS = 6
PER_RANK = 8


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                               torch.nn.Tanh(), torch.nn.Linear(64, 4)).double()


def batches():
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x = torch.randn(PER_RANK * WORLD, 16, generator=g, dtype=torch.float64)
        y = torch.randn(PER_RANK * WORLD, 4, generator=g, dtype=torch.float64)
        yield x, y


def reference():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train(hook=None):
    model = DDP(make_model(), bucket_cap_mb=0.01)  # several buckets
    if hook is not None:
        model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches():
        xs, ys = x[RANK * PER_RANK:(RANK + 1) * PER_RANK], y[RANK * PER_RANK:(RANK + 1) * PER_RANK]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def compare(params, what):
    everyone = [torch.empty_like(params) for _ in range(WORLD)]
    dist.all_gather(everyone, params)
    check(all(torch.equal(everyone[0], e) for e in everyone), what + ": replicas bit-identical")
    ref = reference()
    check(torch.allclose(params, ref, rtol=1e-9, atol=1e-12),
          what + ": equal to one process on the whole batch (max diff %.3g)"
          % (params - ref).abs().max().item())
    check(not torch.equal(params, torch.cat([p.detach().reshape(-1) for p in make_model().parameters()])),
          what + ": training moved the weights")


def test_ddp():
    compare(train(), "DDP")


def mean_hook(state, bucket):
    """A comm hook: sum through papccl's future, then divide."""
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0].div_(WORLD))


def test_ddp_comm_hook():
    compare(train(mean_hook), "DDP with a comm hook")


if __name__ == "__main__":
    init(timeout=datetime.timedelta(seconds=60))
    run([test_ddp, test_ddp_comm_hook])
