# SPDX-License-Identifier: Apache-2.0
"""Every operation of the papccl backend against values computed here, on every rank.

Run by launch.py with 2, 3 and 4 ranks. Each rank builds every rank's input from (rank,
index), so the expected result of every collective is computed locally.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

import papccl.torch

from common import RANK, WORLD, check, expect_error, init, run

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool]
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
N = 37  # elements: not a multiple of anything papccl chunks by


def inp(r, dtype, n=N):
    """Rank r's input: small values, exact in every dtype, no overflow in a product of 4."""
    i = torch.arange(n)
    if dtype == torch.bool:
        return ((i + r) % 2 == 0)
    return (((i + r) % 3) + 1).to(dtype)


def all_inputs(dtype, n=N):
    return [inp(r, dtype, n) for r in range(WORLD)]


def reference(op, dtype, xs):
    """The reduction of xs as torch computes it (in int64 / float64)."""
    wide = torch.float64 if dtype in FLOATS else torch.int64
    s = torch.stack([x.to(wide) for x in xs])
    if op == "SUM":
        v = s.sum(0)
    elif op == "PRODUCT":
        v = s.prod(0)
    elif op == "MIN":
        v = s.min(0).values
    elif op == "MAX":
        v = s.max(0).values
    elif op == "AVG":
        v = s.sum(0) / len(xs) if dtype in FLOATS else torch.div(s.sum(0), len(xs), rounding_mode="floor")
    elif op == "PREMUL_SUM":
        v = s.sum(0) * 2
    else:
        v = s[0].clone()
        for x in s[1:]:
            v = {"BAND": v & x, "BOR": v | x, "BXOR": v ^ x}[op]
    if dtype == torch.bool:
        return v != 0
    return v.to(dtype)


def make_op(op):
    if op == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(2.0)
    return getattr(dist.ReduceOp, op)


def valid(op, dtype):
    if op in ("BAND", "BOR", "BXOR"):
        return dtype not in FLOATS
    if op in ("AVG", "PREMUL_SUM"):
        return dtype != torch.bool
    return True


OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM", "BAND", "BOR", "BXOR"]


# Unit roundoff of each floating dtype.
UNIT_ROUNDOFF = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -24,
                 torch.float64: 2.0 ** -53}


def same(got, op, dtype, xs):
    """got is op's reduction of the inputs xs. The inputs are small integers: every sum (at
    most 12, doubled by PREMUL_SUM), product (at most 81), minimum and maximum is exact in
    every dtype and every order, so got must equal the reference bit for bit (torch.equal).
    A floating AVG is not exact (1/3 is rounded): it is held to the bound of the rounding of
    1/n, of each product or the one division, and of each of the n-1 additions, each at most
    one unit roundoff of sum|x|/n (as the C tests' CheckAvgApprox)."""
    if op == "AVG" and dtype in FLOATS:
        s = torch.stack([x.double() for x in xs])
        n = len(xs)
        exact = s.sum(0) / n
        bound = (n + 2) * UNIT_ROUNDOFF[dtype] * s.abs().sum(0) / n
        return got.dtype == dtype and bool(((got.double() - exact).abs() <= bound).all())
    return torch.equal(got, reference(op, dtype, xs))


def test_allreduce():
    for dtype in DTYPES:
        for op in OPS:
            t = inp(RANK, dtype)
            if not valid(op, dtype):
                expect_error(lambda: dist.all_reduce(t, op=make_op(op)), ["papccl", "allreduce"],
                             "allreduce %s %s" % (op, dtype))
                continue
            dist.all_reduce(t, op=make_op(op))
            check(same(t, op, dtype, all_inputs(dtype)),
                  "allreduce %s %s: %s" % (op, dtype, t[:6].tolist()))


def test_reduce():
    for dtype in DTYPES:
        for op in OPS:
            if not valid(op, dtype):
                continue
            root = (len(op) + DTYPES.index(dtype)) % WORLD
            t = inp(RANK, dtype)
            dist.reduce(t, root, op=make_op(op))
            if RANK == root:
                ok = same(t, op, dtype, all_inputs(dtype))
            else:
                ok = torch.equal(t, inp(RANK, dtype))  # a non-root's input stays as it was
            check(ok, "reduce %s %s root %d" % (op, dtype, root))


def test_reduce_scatter():
    for dtype in DTYPES:
        for op in OPS:
            if not valid(op, dtype):
                continue
            ins = [inp(RANK * WORLD + j, dtype) for j in range(WORLD)]
            out = torch.empty(N, dtype=dtype)
            dist.reduce_scatter(out, ins, op=make_op(op))
            mine = [inp(r * WORLD + RANK, dtype) for r in range(WORLD)]
            check(same(out, op, dtype, mine), "reduce_scatter %s %s" % (op, dtype))
            # The single-buffer form.
            flat = torch.cat(ins)
            out2 = torch.empty(N, dtype=dtype)
            dist._reduce_scatter_base(out2, flat, op=make_op(op))
            check(same(out2, op, dtype, mine), "_reduce_scatter_base %s %s" % (op, dtype))


def test_movement():
    for dtype in DTYPES:
        # broadcast from every root
        for root in range(WORLD):
            t = inp(RANK, dtype)
            dist.broadcast(t, root)
            check(torch.equal(t, inp(root, dtype)), "broadcast %s root %d" % (dtype, root))
        # allgather, list and single-buffer forms
        outs = [torch.empty(N, dtype=dtype) for _ in range(WORLD)]
        dist.all_gather(outs, inp(RANK, dtype))
        check(all(torch.equal(outs[r], inp(r, dtype)) for r in range(WORLD)), "all_gather %s" % dtype)
        flat = torch.empty(N * WORLD, dtype=dtype)
        dist._all_gather_base(flat, inp(RANK, dtype))
        check(torch.equal(flat, torch.cat(all_inputs(dtype))), "_all_gather_base %s" % dtype)
        # gather and scatter, root 1 % WORLD
        root = 1 % WORLD
        mine = inp(RANK, dtype)
        gl = [torch.empty(N, dtype=dtype) for _ in range(WORLD)] if RANK == root else None
        dist.gather(mine, gl, dst=root)
        check(torch.equal(mine, inp(RANK, dtype)), "gather %s keeps the input" % dtype)
        if RANK == root:
            check(all(torch.equal(gl[r], inp(r, dtype)) for r in range(WORLD)), "gather %s" % dtype)
        out = torch.empty(N, dtype=dtype)
        sl = [inp(10 + r, dtype) for r in range(WORLD)] if RANK == root else None
        dist.scatter(out, sl, src=root)
        check(torch.equal(out, inp(10 + RANK, dtype)), "scatter %s" % dtype)
        # all-to-all, equal splits
        src = torch.cat([inp(RANK * WORLD + p, dtype) for p in range(WORLD)])
        dst = torch.empty_like(src)
        dist.all_to_all_single(dst, src)
        want = torch.cat([inp(p * WORLD + RANK, dtype) for p in range(WORLD)])
        check(torch.equal(dst, want), "all_to_all_single %s" % dtype)


def test_alltoall_uneven():
    # Rank r sends (r + p) % 3 + 1 rows of 2 to rank p; rows carry (sender, receiver, k).
    def rows(s, p):
        k = (s + p) % 3 + 1
        return torch.tensor([[s * 100 + p * 10 + j, -1] for j in range(k)], dtype=torch.int64)

    src = torch.cat([rows(RANK, p) for p in range(WORLD)])
    in_splits = [rows(RANK, p).shape[0] for p in range(WORLD)]
    out_splits = [rows(p, RANK).shape[0] for p in range(WORLD)]
    dst = torch.empty(sum(out_splits), 2, dtype=torch.int64)
    dist.all_to_all_single(dst, src, out_splits, in_splits)
    check(torch.equal(dst, torch.cat([rows(p, RANK) for p in range(WORLD)])), "all_to_all_single uneven")
    # The list form, tensors of different sizes per peer.
    ins = [rows(RANK, p).float() for p in range(WORLD)]
    outs = [torch.empty_like(rows(p, RANK).float()) for p in range(WORLD)]
    dist.all_to_all(outs, ins)
    check(all(torch.equal(outs[p], rows(p, RANK).float()) for p in range(WORLD)), "all_to_all list")


def test_noncontiguous():
    base = torch.arange(4 * N, dtype=torch.float32).reshape(N, 4) + RANK
    t = base[:, 1]  # a strided column
    check(not t.is_contiguous(), "the column is strided")
    dist.all_reduce(t)
    want = sum((torch.arange(4 * N, dtype=torch.float32).reshape(N, 4) + r)[:, 1] for r in range(WORLD))
    check(torch.equal(base[:, 1], want), "allreduce on a strided view writes through")
    check(torch.equal(base[:, 0], (torch.arange(4 * N, dtype=torch.float32).reshape(N, 4) + RANK)[:, 0]),
          "allreduce on a strided view leaves the rest")
    tt = (torch.arange(6, dtype=torch.float64).reshape(2, 3) + RANK).t()  # transposed
    dist.broadcast(tt, 0)
    check(torch.equal(tt, torch.arange(6, dtype=torch.float64).reshape(2, 3).t()), "broadcast transposed")
    outs = [torch.empty(3, 2, dtype=torch.float64).t() for _ in range(WORLD)]
    dist.all_gather(outs, (torch.arange(6, dtype=torch.float64).reshape(2, 3) + RANK))
    check(all(torch.equal(outs[r], torch.arange(6, dtype=torch.float64).reshape(2, 3) + r)
              for r in range(WORLD)), "all_gather into transposed outputs")
    # all_gather_coalesced (outs[r][i]: rank r's input i) of two inputs of different
    # shapes, into strided outputs; and a bitwise op on a strided tensor.
    ins = [torch.arange(6, dtype=torch.int32).reshape(2, 3) * (RANK + 1), torch.full((5,), RANK + 7, dtype=torch.int32)]
    outs = [[torch.empty(3, 2, dtype=torch.int32).t(), torch.empty(10, dtype=torch.int32)[::2]] for _ in range(WORLD)]
    dist.all_gather_coalesced(outs, ins)
    check(all(torch.equal(outs[r][0], torch.arange(6, dtype=torch.int32).reshape(2, 3) * (r + 1)) and
              torch.equal(outs[r][1], torch.full((5,), r + 7, dtype=torch.int32)) for r in range(WORLD)),
          "all_gather_coalesced of two inputs into strided outputs")
    b = (torch.full((3, 2), 1 << RANK, dtype=torch.int64)).t()
    dist.all_reduce(b, op=dist.ReduceOp.BOR)
    check(torch.equal(b, torch.full((2, 3), (1 << WORLD) - 1, dtype=torch.int64)), "BOR on a strided view")


def test_coalesced_and_p2p():
    ts = [torch.full((3,), float(RANK + 1)), torch.full((5,), float(2 * RANK))]
    dist.all_reduce_coalesced(ts)
    s1 = sum(r + 1 for r in range(WORLD))
    s2 = sum(2 * r for r in range(WORLD))
    check(torch.equal(ts[0], torch.full((3,), float(s1))) and torch.equal(ts[1], torch.full((5,), float(s2))),
          "all_reduce_coalesced")
    # Ring exchange with batch_isend_irecv: every rank sends before it receives.
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    if WORLD > 1:
        send = torch.full((1000,), float(RANK))
        recv = torch.empty(1000)
        ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        check(torch.equal(recv, torch.full((1000,), float(prv))), "batch_isend_irecv ring")
        # Blocking send/recv in an order that matches.
        for src in range(WORLD):
            t = torch.full((7,), float(src * 3)) if src == RANK else torch.empty(7)
            if src == RANK:
                for dst in range(WORLD):
                    if dst != RANK:
                        dist.send(t, dst)
            else:
                dist.recv(t, src)
                check(torch.equal(t, torch.full((7,), float(src * 3))), "send/recv from %d" % src)
        # recv(src=None): rank 0 takes every other rank's message in whatever order they come;
        # the returned rank must name the sender of the data that arrived. Then each rank
        # sends twice more; per sender the messages come in order.
        if RANK == 0:
            got = []
            for _ in range(3 * (WORLD - 1)):
                t = torch.empty(11, dtype=torch.int64)
                src = dist.recv(t)
                check(torch.equal(t[1:], torch.full((10,), src * 100 + int(t[0]), dtype=torch.int64)),
                      "recv(src=None) data matches its source %d" % src)
                got.append((src, int(t[0])))
            for p in range(1, WORLD):
                check([k for s, k in got if s == p] == [0, 1, 2], "recv(src=None) order from %d" % p)
        else:
            for k in range(3):
                t = torch.full((11,), RANK * 100 + k, dtype=torch.int64)
                t[0] = k
                dist.send(t, 0)
    dist.barrier()


def test_async_and_futures():
    # Work objects complete in order; futures carry the result; a then() chain runs.
    ts = [torch.full((100,), float(RANK + k)) for k in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    fut = works[-1].get_future().then(lambda f: f.value()[0] * 2)
    for w in works:
        w.wait()
        check(w.is_completed() and w.is_success(), "work completed and succeeded")
    for k, t in enumerate(ts):
        check(torch.equal(t, torch.full((100,), float(sum(r + k for r in range(WORLD))))), "async allreduce %d" % k)
    check(torch.equal(fut.wait(), ts[-1] * 2), "future then() chain")
    # Once wait() returned, the work's future is done, so a then() added after wait() runs at
    # once, in the caller's thread (as with gloo; torchft's DDP relies on it).
    late = 0
    for _ in range(300):
        w = dist.all_reduce(torch.ones(8), async_op=True)
        w.wait()
        late += not w.get_future().done()
    check(late == 0, "future done once wait() returned (%d of 300 were not)" % late)
    # wait(timeout) on an op whose peer is late: rank 0 times out waiting, then waits again.
    if WORLD > 1:
        t = torch.ones(4)
        if RANK == 1:
            time.sleep(1.0)
        w = dist.all_reduce(t, async_op=True)
        if RANK == 0:
            expect_error(lambda: w.wait(timeout=datetime.timedelta(milliseconds=100)),
                         ["timed out"], "wait with a short timeout")
        w.wait()
        check(torch.equal(t, torch.full((4,), float(WORLD))), "the op goes on after a wait timeout")


def test_groups():
    if WORLD < 3:
        return
    g1 = dist.new_group([0, 1])
    g2 = dist.new_group(list(range(1, WORLD)))
    t = torch.full((5,), float(RANK))
    if RANK in (0, 1):
        dist.all_reduce(t, group=g1)
        check(torch.equal(t, torch.full((5,), 1.0)), "allreduce on new_group([0, 1])")
    t = torch.full((5,), float(RANK))
    if RANK >= 1:
        dist.all_reduce(t, group=g2)
        check(torch.equal(t, torch.full((5,), float(sum(range(1, WORLD))))), "allreduce on new_group(1..)")
        dist.broadcast(t, src=WORLD - 1, group=g2)  # global rank as src
    dist.barrier()
    check(dist.get_backend(g2 if RANK >= 1 else None) == "papccl", "backend name")


def test_errors():
    bad = torch.ones(4, dtype=torch.int16)
    expect_error(lambda: dist.all_reduce(bad), ["papccl", "allreduce", "Short"], "int16 dtype")
    # torch reduces complex tensors as real pairs for SUM itself; what reaches papccl as
    # complex (a broadcast, an allgather) travels as its real and imaginary parts.
    c = torch.full((4,), complex(RANK, 1), dtype=torch.complex64)
    dist.all_reduce(c)
    check(torch.equal(c, torch.full((4,), complex(sum(range(WORLD)), WORLD), dtype=torch.complex64)),
          "complex SUM through torch's real view")
    c = torch.full((4,), complex(RANK, -RANK), dtype=torch.complex128)
    dist.broadcast(c, WORLD - 1)
    check(torch.equal(c, torch.full((4,), complex(WORLD - 1, 1 - WORLD), dtype=torch.complex128)),
          "complex broadcast")
    expect_error(lambda: dist.all_reduce(torch.ones(4, dtype=torch.complex64), op=dist.ReduceOp.MAX),
                 ["MAX", "complex"], "complex MAX")
    sp = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (4,))
    expect_error(lambda: dist.all_reduce(sp), ["papccl"], "sparse tensor")
    expect_error(lambda: dist.all_gather([torch.empty(4)] * (WORLD + 1), torch.ones(4)),
                 ["papccl", "allgather", "output list"], "allgather with a wrong list")
    expect_error(lambda: dist.all_gather([torch.empty(3)] * WORLD, torch.ones(4)),
                 ["papccl", "allgather", "elements"], "allgather with mismatched sizes")
    expect_error(lambda: dist._all_gather_base(torch.empty(4 * WORLD + 1), torch.ones(4)),
                 ["papccl", "elements"], "_all_gather_base with a wrong size")
    expect_error(lambda: dist.all_reduce(torch.ones(4, dtype=torch.float32), op=dist.ReduceOp.BAND),
                 ["papccl", "bitwise"], "BAND on floats")
    # The group still works after local errors.
    t = torch.ones(3)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((3,), float(WORLD))), "the group works after argument errors")


def test_objects():
    """torch's object collectives (pickled bytes through allgather, broadcast, gather and
    scatter of uint8 tensors)."""
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": RANK, "name": "r%d" % RANK})
    check(objs == [{"rank": r, "name": "r%d" % r} for r in range(WORLD)], "all_gather_object")
    lst = [("from", RANK), list(range(RANK + 3))] if RANK == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    check(lst == [("from", 0), [0, 1, 2]], "broadcast_object_list")
    root = WORLD - 1
    got = [None] * WORLD if RANK == root else None
    dist.gather_object("x" * (RANK + 1), got, dst=root)
    if RANK == root:
        check(got == ["x" * (r + 1) for r in range(WORLD)], "gather_object")
    out = [None]
    dist.scatter_object_list(out, [{"to": r} for r in range(WORLD)] if RANK == 0 else None, src=0)
    check(out == [{"to": RANK}], "scatter_object_list")


def test_reinit():
    """Destroy and make the default group again in this process, through file:// and
    tcp:// (the first init was env://), and with the per-device backend string."""
    def again(method, what, backend="papccl"):
        dist.barrier()
        dist.destroy_process_group()
        dist.init_process_group(backend, init_method=method, rank=RANK, world_size=WORLD,
                                timeout=datetime.timedelta(seconds=60))
        t = torch.full((9,), float(RANK))
        dist.all_reduce(t)
        check(torch.equal(t, torch.full((9,), float(sum(range(WORLD))))), "allreduce after re-init " + what)
        check(dist.get_backend() == backend, "backend after re-init %s: %s" % (what, dist.get_backend()))
        pg = dist.group.WORLD._get_backend(torch.device("cpu"))
        check(isinstance(pg, papccl.torch.ProcessGroupPapccl), "cpu backend after re-init %s: %r"
              % (what, pg))

    again("file://%s/store" % os.environ["PAPCCL_TEST_DIR"], "through file://")
    again("tcp://127.0.0.1:%s" % os.environ["PAPCCL_TEST_PORT2"], "through tcp://")
    # One papccl backend serves both device types (torch makes one when they name the same).
    again("file://%s/store2" % os.environ["PAPCCL_TEST_DIR"], "as cpu:papccl,cuda:papccl",
          "cpu:papccl,cuda:papccl")


if __name__ == "__main__":
    init(timeout=datetime.timedelta(seconds=60))
    run([test_allreduce, test_reduce, test_reduce_scatter, test_movement, test_alltoall_uneven,
         test_noncontiguous, test_coalesced_and_p2p, test_async_and_futures, test_groups,
         test_errors, test_objects, test_reinit])
