# SPDX-License-Identifier: Apache-2.0
"""Failures seen from Python. A rank that hangs (never calls): the others' operation raises
at the group's timeout (the watchdog aborts the communicator), naming op and rank, and the
group refuses later work. A rank that dies, left unreaped by its parent: the survivors' next
operation raises, naming the dead rank, long before the timeout (each survivor, whichever
peer it waits on), and the survivors go on in a new group of their own. Rank 0, the store's
host, dies: the survivors shrink the group through papccl (no store) and go on. Run by
launch.py with 3 ranks."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import papccl.torch
from common import RANK, WORLD, check, expect_error, init, run

TIMEOUT_S = 4
LAST = WORLD - 1


def reinit(method, world, rank):
    dist.init_process_group("papccl", init_method=method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))


def test_hung_rank():
    t = torch.ones(8)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((8,), float(WORLD))), "allreduce before the hang")
    if RANK == LAST:
        time.sleep(TIMEOUT_S + 3)  # hangs: the others' allreduce times out meanwhile
    t0 = time.monotonic()
    # The others time out; the hung rank, when it calls at last, fails as its peers have
    # given up (by its own timeout, or seeing them gone).
    # The timeout names the rank that has not arrived (the watchdog's state dump).
    words = ["papccl", "allreduce", "rank %d" % RANK] + (
        ["timed out", "not arrived: ranks %d" % LAST] if RANK != LAST else [])
    text = expect_error(lambda: dist.all_reduce(torch.ones(1 << 16)), words,
                        "allreduce with a hung rank")
    took = time.monotonic() - t0
    print("rank %d: raised after %.2f s: %s" % (RANK, took, text.splitlines()[0] if text else ""))
    check(took < TIMEOUT_S + 10, "raised within the timeout (%.2f s)" % took)
    expect_error(lambda: dist.all_reduce(torch.ones(4)), ["papccl", "unusable"],
                 "the next op on the broken group")


def test_dead_rank():
    t = torch.ones(8)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((8,), float(WORLD))), "allreduce before the death")
    dist.barrier()
    if RANK == LAST:
        os._exit(0)  # no destroy: the process just ends (launch.py reaps it only later)
    t0 = time.monotonic()
    text = expect_error(lambda: dist.all_reduce(torch.ones(1 << 16)),
                        ["papccl", "allreduce", "rank %d" % RANK], "allreduce with a dead rank")
    took = time.monotonic() - t0
    print("rank %d: raised after %.2f s: %s" % (RANK, took, text.splitlines()[0] if text else ""))
    # Every survivor sees the death, also one that waits on another survivor: "peer 2 (pid
    # P) exited while ..." or "rank 2 (pid P) died without leaving the communicator".
    check("%d (pid" % LAST in text and ("exited" in text or "died" in text),
          "the error names the dead rank: " + text)
    check(took < TIMEOUT_S / 2, "raised before the timeout (%.2f s)" % took)
    expect_error(lambda: dist.all_reduce(torch.ones(4)), ["papccl", "unusable"],
                 "the next op on the broken group")
    # Recovery: destroy the group (its communicator is aborted) and make one of the survivors.
    dist.destroy_process_group()
    reinit("file://%s/survivors" % os.environ["PAPCCL_TEST_DIR"], WORLD - 1, RANK)
    for k in range(20):
        t = torch.full((100,), float(RANK + k))
        dist.all_reduce(t)
        check(torch.equal(t, torch.full((100,), float(sum(r + k for r in range(WORLD - 1))))),
              "allreduce %d of the survivors" % k)


def test_shrink():
    """Rank 0 dies: it hosted the job's store, so no new group can meet through it. The
    survivors shrink the default group through papccl (no store), make the result the
    default, go on; then a DEFAULT shrink of the healthy group (a copy, used with group=),
    and a shrink with a voluntary leaver."""
    t = torch.ones(8)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((8,), float(WORLD))), "allreduce before the death")
    dist.barrier()
    if RANK == 0:
        os._exit(0)  # the store's host
    text = expect_error(lambda: dist.all_reduce(torch.ones(1 << 16)),
                        ["papccl", "allreduce", "rank %d" % RANK], "allreduce with rank 0 dead")
    check("0 (pid" in text and ("exited" in text or "died" in text),
          "the error names rank 0: " + text)
    t0 = time.monotonic()
    old = dist.distributed_c10d._get_default_group()
    new = papccl.torch.shrink(exclude=[0])
    print("rank %d: shrink took %.3f s" % (RANK, time.monotonic() - t0))
    n = WORLD - 1
    check(dist.get_rank() == RANK - 1 and dist.get_world_size() == n,
          "ranks renumbered: %d of %d" % (dist.get_rank(), dist.get_world_size()))
    check(dist.distributed_c10d._get_default_group() is new and new is not old,
          "the shrunk group is the default")
    del old
    me = dist.get_rank()
    for k in range(20):
        t = torch.full((100,), float(me + k))
        dist.all_reduce(t)
        check(torch.equal(t, torch.full((100,), float(sum(r + k for r in range(n))))),
              "allreduce %d of the survivors" % k)
    expect_error(lambda: papccl.torch.shrink(exclude=[me]), ["papccl", "shrink", "exclusion"],
                 "a rank that excludes itself")
    expect_error(lambda: papccl.torch.shrink(exclude=[n]), ["papccl", "shrink", "not in"],
                 "an excluded rank out of range")
    expect_error(lambda: papccl.torch.shrink(exclude=[]), ["papccl", "shrink", "empty"],
                 "an empty exclusion list")
    # A voluntary leaver on a healthy group (SHRINK_DEFAULT): the new rank 0 does not call;
    # the others shrink without it and go on.
    if me != 0:
        sub = papccl.torch.shrink(exclude=[0], abort=False)
        check(dist.get_rank() == me - 1 and dist.get_world_size() == n - 1,
              "the leaver's group: rank %d of %d" % (dist.get_rank(), dist.get_world_size()))
        t = torch.full((7,), float(me))
        dist.all_reduce(t)
        check(torch.equal(t, torch.full((7,), float(sum(range(1, n))))), "allreduce without the leaver")
        stats = papccl.torch.pap_stats(sub)
        check(stats["total"]["nranks"] == n - 1, "pap_stats of the shrunk group")


if __name__ == "__main__":
    # usage: test_failure.py hung|dead|shrink (one job each: a job's group cannot be remade with a
    # rank that is still hung in the old one within torch's store timeouts).
    init(timeout=datetime.timedelta(seconds=TIMEOUT_S))
    run([{"hung": test_hung_rank, "dead": test_dead_rank, "shrink": test_shrink}[sys.argv[1]]])
