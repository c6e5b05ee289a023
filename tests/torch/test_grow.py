# SPDX-License-Identifier: Apache-2.0
"""The loop users want, from PyTorch (docs/FAULTS.md section 5): 4 ranks run checked
allreduces; one dies; the survivors see it, shrink (papccl.torch.shrink) and go on; a
replacement process joins with the id (papccl.torch.grow_id, papccl.torch.grow) and they
grow back to 4; twice. Run by launch.py with 6 processes: RANK 0..3 are the job's ranks,
4 and 5 the replacements (started with the others, each waits for its id in a file of the
job's folder, as a launcher would hand it over)."""
import datetime
import os
import time

import torch
import torch.distributed as dist

import papccl.torch
from common import RANK, check, expect_error, run

N = 4
ROUNDS = 2
VICTIMS = [1, 2]  # the rank killed in each round: process 1, then process 3
TIMEOUT = datetime.timedelta(seconds=30)
DIR = os.environ.get("PAPCCL_TEST_DIR", "/tmp")


def put(name, data):
    tmp = os.path.join(DIR, name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, os.path.join(DIR, name))


def get(name, timeout_s=120):
    path = os.path.join(DIR, name)
    end = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError("no %s after %d s" % (name, timeout_s))
        time.sleep(0.002)
    with open(path, "rb") as f:
        return f.read()


def allreduces(me, base):
    for k in range(6):
        n = 3 if k % 2 else 1 << 14
        t = torch.full((n,), float(me + base + k))
        dist.all_reduce(t)
        want = float(sum(r + base + k for r in range(N)))
        check(torch.equal(t, torch.full((n,), want)), "allreduce %d after %d: %s, want %s"
              % (k, base, t[0].item(), want))


def test_grow_loop():
    if RANK < N:
        dist.init_process_group("papccl", init_method="file://%s/init" % DIR, rank=RANK,
                                world_size=N, timeout=TIMEOUT)
        first = 0
    else:
        first = RANK - N + 1
        uid = get("grow-id-%d" % (first - 1))
        expect_error(lambda: papccl.torch.grow(N, None, rank=N - 1), ["papccl", "grow", "id"],
                     "a new rank without the id")
        papccl.torch.grow(N, uid, rank=N - 1, timeout=TIMEOUT)
    for rnd in range(first, ROUNDS + 1):
        me = dist.get_rank()
        check(dist.get_world_size() == N, "round %d: %d ranks" % (rnd, dist.get_world_size()))
        allreduces(me, 10 * rnd)
        if rnd == ROUNDS:
            break
        victim = VICTIMS[rnd]
        if me == victim:
            put("death-%d" % rnd, repr(time.time()).encode())
            os._exit(0)  # dies: no destroy, no word to the others
        expect_error(lambda: dist.all_reduce(torch.ones(1 << 16)), ["papccl", "allreduce"],
                     "round %d: allreduce with a dead rank" % rnd)
        seen = time.time() - float(get("death-%d" % rnd))
        t0 = time.monotonic()
        papccl.torch.shrink(exclude=[victim])
        shrink_s = time.monotonic() - t0
        mine = dist.get_rank()
        check(mine == (me if me < victim else me - 1) and dist.get_world_size() == N - 1,
              "round %d: shrunk to rank %d of %d" % (rnd, mine, dist.get_world_size()))
        allreduces_shrunk = torch.ones(5)
        dist.all_reduce(allreduces_shrunk)
        check(torch.equal(allreduces_shrunk, torch.full((5,), float(N - 1))),
              "round %d: the survivors go on" % rnd)
        t0 = time.monotonic()
        if mine == 0:
            uid = papccl.torch.grow_id()
            put("grow-id-%d" % rnd, uid)
            papccl.torch.grow(N, uid)
        else:
            papccl.torch.grow(N)
        grow_s = time.monotonic() - t0
        check(dist.get_rank() == mine, "round %d: a survivor keeps its rank" % rnd)
        print("torch round %d: rank %d: death seen in %.1f ms, shrink %.1f ms, grow back to %d "
              "%.1f ms" % (rnd, mine, seen * 1e3, shrink_s * 1e3, N, grow_s * 1e3), flush=True)
    stats = papccl.torch.pap_stats()
    check(stats["total"]["nranks"] == N, "pap_stats of the grown group")


if __name__ == "__main__":
    run([test_grow_loop])
