# SPDX-License-Identifier: Apache-2.0
"""A rank that dies: the survivors' next operation raises within the group's timeout (the
dead process is left unreaped, so no liveness check can see it: the watchdog's timeout
does), the error names the op and the rank, the group refuses later work, and the survivors
recover by making a new group of their own. Run by launch.py with 3 ranks."""
import datetime
import os
import time

import torch
import torch.distributed as dist

from common import RANK, WORLD, check, expect_error, init, run

TIMEOUT_S = 4


def test_dead_rank():
    t = torch.ones(8)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((8,), float(WORLD))), "allreduce before the death")
    dist.barrier()
    if RANK == WORLD - 1:
        os._exit(0)  # no destroy: the process just ends (its parent reaps it later)
    t0 = time.monotonic()
    text = expect_error(lambda: dist.all_reduce(torch.ones(1 << 16)),
                        ["papccl", "allreduce", "rank %d" % RANK, "timed out"],
                        "allreduce with a dead rank")
    took = time.monotonic() - t0
    print("rank %d: raised after %.2f s: %s" % (RANK, took, text.splitlines()[0] if text else ""))
    check(took < TIMEOUT_S + 10, "raised within the timeout (%.2f s)" % took)
    expect_error(lambda: dist.all_reduce(torch.ones(4)), ["papccl", "unusable"],
                 "the next op on the broken group")
    # Recovery: abort (destroy) the group and make a new one of the survivors.
    dist.destroy_process_group()
    dist.init_process_group("papccl", init_method="tcp://127.0.0.1:%s" % os.environ["PAPCCL_TEST_PORT2"],
                            rank=RANK, world_size=WORLD - 1, timeout=datetime.timedelta(seconds=60))
    for k in range(20):
        t = torch.full((100,), float(RANK + k))
        dist.all_reduce(t)
        check(torch.equal(t, torch.full((100,), float(sum(r + k for r in range(WORLD - 1))))),
              "allreduce %d of the survivors" % k)


if __name__ == "__main__":
    init(timeout=datetime.timedelta(seconds=TIMEOUT_S))
    run([test_dead_rank])
    dist.destroy_process_group()
