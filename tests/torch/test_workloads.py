# SPDX-License-Identifier: Apache-2.0
"""Real workloads on the papccl backend, each compared element-wise with one process that
computes the same thing on the whole data (same seed, same data): FSDP2 (fully_shard) of a
small transformer, and DTensor sharded matmuls. Run by launch.py with 2 and 4 ranks.

FSDP2 reduces gradients with reduce_scatter_tensor and gathers parameters with
all_gather_into_tensor; the reduction it asks for depends on the gradients' dtype: float64
takes SUM with a division before and after, float32 and bfloat16 take AVG, a gradient divide
factor other than the world size takes PREMUL_SUM. Each of those is one case here.

Every FSDP2 tolerance is checked against the result a wrong reduction would give (the
reference trained with the last rank's data left out of the gradient): the check fails
unless that result lies at least MARGIN tolerances away from the right one (2 for the
bfloat16 reduction, see there). Tolerances: docs/PYTORCH.md, "Tests".
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from common import RANK, WORLD, check, init, run, sgd_weight_sum

# A vocabulary, a width and a sequence length that 2 and 4 do not divide: FSDP2 pads the
# uneven shards of the embedding, the head and the positions.
VOCAB, WIDTH, HEADS, SEQ, LAYERS = 11, 12, 3, 7, 2
PER_RANK, STEPS, LR, MOMENTUM = 3, 4, 0.1, 0.9
MARGIN = 10  # a wrong result must lie this many tolerances away from the right one


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(),
                                 nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        h = self.ln1(x)
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Tiny(nn.Module):
    """Embedding and positions, LAYERS blocks of causal attention and MLP, a head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(0.1 * torch.randn(SEQ, WIDTH))
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        x = self.emb(tokens) + self.pos[:tokens.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def make_tiny(dtype):
    torch.manual_seed(0)
    return Tiny().to(dtype)


def token_batches():
    """The whole batch of every step: PER_RANK sequences per rank, rank r's are rows
    r*PER_RANK... ."""
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        yield torch.randint(0, VOCAB, (PER_RANK * WORLD, SEQ + 1), generator=g)


def lm_losses(model, tokens):
    """Each sequence's mean next-token cross entropy."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1),
                           reduction="none").view(tokens.shape[0], -1).mean(1)


def flat(params):
    return torch.cat([p.detach().reshape(-1) for p in params])


def reference_lm(dtype, scale=1.0, drop_last=False):
    """One process on the whole batch, the gradient of `scale` times the mean loss: the
    parameters after STEPS steps, each step's mean loss, the largest gradient element seen.
    drop_last: trained as a reduction that loses the last rank's gradient would train it."""
    model = make_tiny(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    weights = torch.full((WORLD,), scale / WORLD, dtype=dtype)
    if drop_last:
        weights[-1] = 0
    losses, gmax, g1 = [], 0.0, 0.0
    for tokens in token_batches():
        opt.zero_grad()
        per_seq = lm_losses(model, tokens)
        (per_seq.view(WORLD, PER_RANK).mean(1) * weights).sum().backward()
        grads = [p.grad for p in model.parameters()]
        gmax = max(gmax, max(g.abs().max().item() for g in grads))
        g1 = max(g1, sum(g.abs().sum().item() for g in grads))
        opt.step()
        losses.append(per_seq.mean().item())
    return Result(flat(model.parameters()), torch.tensor(losses, dtype=torch.float64), gmax, g1)


class Result:
    """Parameters (float64), each step's loss; for a reference, the largest gradient element
    and the largest gradient's sum of absolute values over the steps."""

    def __init__(self, params, losses, gmax=0.0, g1=0.0):
        self.params, self.losses, self.gmax, self.g1 = params.double(), losses, gmax, g1


def train_fsdp(dtype, mp=None, divide_factor=None):
    """fully_shard on every block and the root, STEPS steps of SGD on this rank's share;
    returns the full parameters (gathered from the shards) and the global loss of each step
    (the mean of the ranks' losses)."""
    mesh = init_device_mesh("cpu", (WORLD,))
    model = make_tiny(dtype)
    kw = {"mesh": mesh}
    if mp is not None:
        kw["mp_policy"] = mp
    for b in model.blocks:
        fully_shard(b, **kw)
    fully_shard(model, **kw)
    if divide_factor is not None:
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.set_gradient_divide_factor(divide_factor)
    check(all(isinstance(p, DTensor) for p in model.parameters()), "FSDP2 sharded the parameters")
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for tokens in token_batches():
        mine = tokens[RANK * PER_RANK:(RANK + 1) * PER_RANK]
        opt.zero_grad()
        loss = lm_losses(model, mine).mean()
        loss.backward()
        opt.step()
        everyone = [torch.zeros(1, dtype=torch.float64) for _ in range(WORLD)]
        dist.all_gather(everyone, loss.detach().double().reshape(1))
        losses.append(torch.cat(everyone).mean().item())
    full = flat(p.full_tensor() for p in model.parameters())
    return Result(full, torch.tensor(losses, dtype=torch.float64))


def compare(what, got, ref, wrong, tols, margin=MARGIN, loss_margin=MARGIN):
    """got (a Result) within tol of ref element-wise, the losses within loss_tol (tols: both),
    everyone's copy bit-identical, and `wrong` (a faulty reduction's Result) at least
    `margin` tolerances away in parameters, `loss_margin` in loss (None: not required)."""
    tol, loss_tol = tols
    err = (got.params - ref.params).abs().max().item()
    check(err <= tol, "%s: parameters within %.3g of one process (max diff %.3g)"
          % (what, tol, err))
    lerr = (got.losses - ref.losses).abs().max().item()
    check(lerr <= loss_tol, "%s: losses within %.3g of one process (max diff %.3g)"
          % (what, loss_tol, lerr))
    far = (wrong.params - ref.params).abs().max().item()
    lfar = (wrong.losses - ref.losses).abs().max().item()
    check(far >= margin * tol, "%s: a dropped rank's gradient (parameters off by %.3g) would "
          "fail the tolerance %.3g by a factor %g" % (what, far, tol, margin))
    check(loss_margin is None or lfar >= loss_margin * loss_tol, "%s: a dropped rank's gradient "
          "(loss off by %.3g) would fail the tolerance %.3g by a factor %s"
          % (what, lfar, loss_tol, loss_margin))
    everyone = [torch.empty_like(got.params) for _ in range(WORLD)]
    dist.all_gather(everyone, got.params)
    check(all(torch.equal(everyone[0], e) for e in everyone), what + ": ranks agree bit for bit")
    if RANK == 0:
        print("%s: %d ranks, max diff parameters %.3g (tol %.3g, dropped rank %.3g), loss %.3g "
              "(tol %.3g, dropped rank %.3g)" % (what, WORLD, err, tol, far, lerr, loss_tol, lfar),
              flush=True)


LR_SUM = sgd_weight_sum(LR, MOMENTUM, STEPS)
# The terms a weight's gradient sums (one per position of the batch), in another order on the
# ranks (their shares) than in the one process.
TERMS = PER_RANK * WORLD * SEQ


def tolerances(ref, compute, reduce=None):
    """The parameters' and the loss's tolerances, from unit roundoffs u (half the dtype's
    eps). Parameters: each step's gradient is off by TERMS roundings in its computation (dtype
    `compute`) and WORLD + 1 in its reduction (dtype `reduce`: one to cast or divide, one per
    sum) of a value no larger than the largest gradient element; a step's gradient moves the
    final parameters by LR_SUM at most (a factor 2 for what the errors do to later gradients);
    and each of STEPS updates rounds the parameters (no larger than ref's largest) and the
    momentum. Loss: parameters off by tol move it by the gradient's sum of absolute values
    times tol at most (first order), and its mean over TERMS positions rounds TERMS times."""
    u = torch.finfo(compute).eps / 2
    ur = torch.finfo(reduce or compute).eps / 2
    pmax = ref.params.abs().max().item()
    tol = 2 * LR_SUM * ref.gmax * (TERMS * u + (WORLD + 1) * ur) + 2 * STEPS * u * pmax
    return tol, ref.g1 * tol + TERMS * u * ref.losses.abs().max().item()


def test_fsdp2_float64():
    """float64 gradients: reduce_scatter SUM, divided before and after."""
    ref = reference_lm(torch.float64)
    compare("FSDP2 float64", train_fsdp(torch.float64), ref,
            reference_lm(torch.float64, drop_last=True), tolerances(ref, torch.float64))


def test_fsdp2_float32():
    """float32 gradients: reduce_scatter AVG."""
    ref = reference_lm(torch.float32)
    compare("FSDP2 float32", train_fsdp(torch.float32), ref,
            reference_lm(torch.float32, drop_last=True), tolerances(ref, torch.float32))


def test_fsdp2_bfloat16_reduce():
    """float32 parameters, gradients reduced in bfloat16 (MixedPrecisionPolicy): AVG on
    bfloat16. Its worst case, WORLD + 1 roundings of 2**-9, is within a factor 10 of a dropped
    rank's share of the gradient (1/WORLD): the margin asked is 2; the loss's first-order
    bound is above a dropped rank's effect (it still catches a missing divide)."""
    ref = reference_lm(torch.float32)
    got = train_fsdp(torch.float32, mp=MixedPrecisionPolicy(reduce_dtype=torch.bfloat16))
    compare("FSDP2 bfloat16 reduce", got, ref, reference_lm(torch.float32, drop_last=True),
            tolerances(ref, torch.float32, torch.bfloat16), margin=2, loss_margin=None)


def test_fsdp2_divide_factor():
    """A gradient divide factor of 2*WORLD: reduce_scatter PREMUL_SUM(1/(2*WORLD)), the
    gradient of half the mean loss."""
    ref = reference_lm(torch.float32, scale=0.5)
    compare("FSDP2 PREMUL_SUM", train_fsdp(torch.float32, divide_factor=2.0 * WORLD), ref,
            reference_lm(torch.float32, 0.5, drop_last=True), tolerances(ref, torch.float32))


# DTensor: C = A @ B with A (M x K), B (K x N); M and N uneven on 2 and 4 ranks.
M, K, N = 10, 24, 6


def matmul_data(dtype):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(M, K, generator=g, dtype=dtype)
    b = torch.randn(K, N, generator=g, dtype=dtype)
    dc = torch.randn(M, N, generator=g, dtype=dtype)  # the gradient of C, for backward
    return a, b, dc


def matmul_tol(x, y):
    """Each element of x @ y is a sum of n products (n: x's columns), its rounding in another
    order is off by at most 2n unit roundoffs of n times the largest product."""
    n, unit = x.shape[1], torch.finfo(x.dtype).eps / 2
    return 2 * n * unit * n * (x.abs().max() * y.abs().max()).item()


def check_close(what, got, want, tol):
    err = (got - want).abs().max().item()
    check(got.shape == want.shape and err <= tol, "%s: within %.3g of torch.matmul (max diff "
          "%.3g, shape %s)" % (what, tol, err, tuple(got.shape)))
    return err


def test_dtensor_row_sharded():
    """A Shard(0), B Replicate: C is Shard(0), gathered (uneven) by full_tensor(); backward
    gives A's gradient Shard(0) and B's Partial, which full_tensor() sums across the ranks."""
    mesh = init_device_mesh("cpu", (WORLD,))
    for dtype in (torch.float64, torch.float32):
        a, b, dc = matmul_data(dtype)
        da = distribute_tensor(a, mesh, [Shard(0)]).requires_grad_()
        db = distribute_tensor(b, mesh, [Replicate()]).requires_grad_()
        c = torch.matmul(da, db)
        check(c.placements == (Shard(0),), "row sharded matmul: C is %s" % (c.placements,))
        tol = matmul_tol(a, b)
        errs = [check_close("A Shard(0) @ B %s" % dtype, c.full_tensor(), a @ b, tol)]
        c.backward(distribute_tensor(dc, mesh, [Shard(0)]))
        check(db.grad.placements == (Partial(),), "dB is %s" % (db.grad.placements,))
        ga, gb = da.grad.full_tensor(), db.grad.full_tensor()
        errs.append(check_close("dA %s" % dtype, ga, dc @ b.T, matmul_tol(dc, b.T)))
        errs.append(check_close("dB %s" % dtype, gb, a.T @ dc, matmul_tol(a.T, dc)))
        if RANK == 0:
            print("DTensor row sharded %s: %d ranks, max diffs C %.3g dA %.3g dB %.3g (tol C %.3g)"
                  % (dtype, WORLD, errs[0], errs[1], errs[2], tol), flush=True)


def test_dtensor_partial():
    """A Shard(1), B Shard(0): C is Partial (each rank a part of every sum), made whole by an
    allreduce (Replicate) or a reduce-scatter (Shard(0), uneven)."""
    mesh = init_device_mesh("cpu", (WORLD,))
    for dtype in (torch.float64, torch.float32):
        a, b, _ = matmul_data(dtype)
        da = distribute_tensor(a, mesh, [Shard(1)])
        db = distribute_tensor(b, mesh, [Shard(0)])
        c = torch.matmul(da, db)
        check(c.placements == (Partial(),), "inner sharded matmul: C is %s" % (c.placements,))
        want, tol = a @ b, matmul_tol(a, b)
        whole = c.redistribute(mesh, [Replicate()]).to_local()
        e1 = check_close("A Shard(1) @ B Shard(0) -> Replicate %s" % dtype, whole, want, tol)
        rows = c.redistribute(mesh, [Shard(0)])
        chunks = want.chunk(WORLD)  # DTensor's Shard(0): torch.chunk's pieces, then empty
        mine = chunks[RANK] if RANK < len(chunks) else want[:0]
        e2 = check_close("-> Shard(0) local %s" % dtype, rows.to_local(), mine, tol)
        e3 = check_close("-> Shard(0) full %s" % dtype, rows.full_tensor(), want, tol)
        # A sum that lost a rank's part misses a whole product term of the K ones: far off.
        part = (a[:, :K // WORLD] @ b[:K // WORLD]).abs().max().item()
        check(part >= MARGIN * tol,
              "a lost part (%.3g) would fail the tolerance %.3g" % (part, tol))
        if RANK == 0:
            print("DTensor partial %s: %d ranks, max diffs replicate %.3g shard %.3g/%.3g "
                  "(tol %.3g)" % (dtype, WORLD, e1, e2, e3, tol), flush=True)


if __name__ == "__main__":
    init(timeout=datetime.timedelta(seconds=120))
    run([test_fsdp2_float64, test_fsdp2_float32, test_fsdp2_bfloat16_reduce,
         test_fsdp2_divide_factor, test_dtensor_row_sharded, test_dtensor_partial])
