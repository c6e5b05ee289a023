# SPDX-License-Identifier: Apache-2.0
"""DistributedDataParallel on the papccl backend: after N steps every replica is bit-identical
and equal to one process trained on the whole batch; the same with a comm hook built on
all_reduce's future and with torch's own allreduce_hook and fp16_compress_hook. Run by
launch.py with 2 and 4 ranks."""
import datetime

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from common import RANK, WORLD, check, init, run, sgd_weight_sum

STEPS = 6
PER_RANK = 8
LR, MOMENTUM = 0.1, 0.9


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


def reference(drop_last=False):
    """One process on the whole batch: the parameters and the largest gradient element seen.
    drop_last: trained as a reduction that loses the last rank's gradient would train it."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    gmax = 0.0
    for x, y in batches():
        opt.zero_grad()
        if drop_last:
            keep = (WORLD - 1) * PER_RANK
            loss = torch.nn.functional.mse_loss(model(x[:keep]), y[:keep]) * (WORLD - 1) / WORLD
        else:
            loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        gmax = max(gmax, max(p.grad.abs().max().item() for p in model.parameters()))
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), gmax


def train(hook=None):
    model = DDP(make_model(), bucket_cap_mb=0.01)  # several buckets
    if hook is not None:
        model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for x, y in batches():
        xs, ys = x[RANK * PER_RANK:(RANK + 1) * PER_RANK], y[RANK * PER_RANK:(RANK + 1) * PER_RANK]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def compare(params, what, tol=None):
    """tol: an absolute tolerance for each element (default rtol 1e-9, atol 1e-12), which
    the result of a reduction that drops the last rank's gradient must fail by a factor 10."""
    everyone = [torch.empty_like(params) for _ in range(WORLD)]
    dist.all_gather(everyone, params)
    check(all(torch.equal(everyone[0], e) for e in everyone), what + ": replicas bit-identical")
    ref, gmax = reference()
    err = (params - ref).abs().max().item()
    if tol is None:
        check(torch.allclose(params, ref, rtol=1e-9, atol=1e-12),
              what + ": equal to one process on the whole batch (max diff %.3g)" % err)
        if RANK == 0:
            print("%s: %d ranks, max diff %.3g (rtol 1e-9, atol 1e-12)" % (what, WORLD, err),
                  flush=True)
    else:
        tol = tol(gmax)
        far = (reference(drop_last=True)[0] - ref).abs().max().item()
        check(err <= tol, "%s: within %.3g of one process on the whole batch (max diff %.3g)"
              % (what, tol, err))
        check(far >= 10 * tol, "%s: a dropped rank's gradient (off by %.3g) would fail the "
              "tolerance %.3g by a factor 10" % (what, far, tol))
        if RANK == 0:
            print("%s: %d ranks, max diff %.3g (tol %.3g, dropped rank %.3g)"
                  % (what, WORLD, err, tol, far), flush=True)
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


def test_ddp_allreduce_hook():
    """torch's allreduce_hook: divide by the world size, then all_reduce SUM."""
    compare(train(default_hooks.allreduce_hook), "DDP with allreduce_hook")


LR_SUM = sgd_weight_sum(LR, MOMENTUM, STEPS)


def fp16_tol(gmax):
    """fp16_compress_hook casts each gradient to float16 and divides it by the world size,
    all_reduces SUM in float16 and casts back: WORLD + 1 roundings (unit roundoff 2**-11) of
    a value no larger than the largest gradient element, moving the final parameters by
    LR_SUM at most; a factor 2 for what the errors do to later gradients (float64 elsewhere:
    its roundings are negligible)."""
    return 2 * LR_SUM * (WORLD + 1) * 2.0 ** -11 * gmax


def test_ddp_fp16_compress_hook():
    compare(train(default_hooks.fp16_compress_hook), "DDP with fp16_compress_hook", fp16_tol)


if __name__ == "__main__":
    init(timeout=datetime.timedelta(seconds=60))
    run([test_ddp, test_ddp_comm_hook, test_ddp_allreduce_hook, test_ddp_fp16_compress_hook])
