# SPDX-License-Identifier: Apache-2.0
"""PAP telemetry from Python: with one rank late at every allreduce, pap_stats names it (last
op, window and totals) and save_trace writes its lateness. Run by launch.py with 4 ranks."""
import datetime
import os
import time

import torch
import torch.distributed as dist

import papccl.torch as pt
from common import RANK, WORLD, check, expect_error, init, run

LATE = WORLD - 1
DELAY_S = 0.02
CALLS = 12


def test_pap_stats():
    for _ in range(CALLS):
        if RANK == LATE:
            time.sleep(DELAY_S)  # "slow data loading" on one rank
        t = torch.ones(1024)
        dist.all_reduce(t)
    s = pt.pap_stats(last=CALLS)
    last, win, total = s["last"], s["window"], s["total"]
    print("rank %d: last %s; window straggler %d, late counts %s, mean lateness %s"
          % (RANK, {k: last[k] for k in ("seq", "op", "algo", "late_rank", "skew_us", "tail_us")},
             win["straggler"], win["late_count"], [round(v) for v in win["mean_lateness_us"]]))
    check(last is not None and last["op"] == "allreduce", "the last op is the allreduce")
    check(last["complete"], "every arrival of the last op was seen")
    check(last["late_rank"] == LATE, "the last op's late rank is %d (got %d)" % (LATE, last["late_rank"]))
    check(last["order"][-1] == LATE and sorted(last["order"][:WORLD]) == list(range(WORLD)),
          "arrival order ends with the late rank: %s" % last["order"])
    check(last["lateness_us"][LATE] > DELAY_S * 1e6 / 2, "the late rank's lateness (%.0f us)"
          % last["lateness_us"][LATE])
    check(last["skew_us"] >= last["lateness_us"][LATE] - 1, "skew covers the late rank")
    check(win["ops"] == CALLS and win["straggler"] == LATE, "window straggler %d" % win["straggler"])
    check(win["late_count"][LATE] > CALLS // 2, "late counts %s" % win["late_count"])
    check(total["ops"] >= CALLS and total["late_count"][LATE] > CALLS // 2, "totals count the late rank")
    # 4 KiB on one host: each allreduce took the flat path (papPathDecide), counted as such.
    check(total["path_ops"]["flat"] >= CALLS and total["last_path"] == "flat"
          and total["last_path_why"].startswith("flat: "),
          "path counts %s, last %s (%s)" % (total["path_ops"], total["last_path"], total["last_path_why"]))
    path = os.path.join(os.environ["PAPCCL_TEST_DIR"], "trace.%d" % RANK)
    n = pt.save_trace(path, last=CALLS)
    rows = [list(map(float, l.split())) for l in open(path) if l.strip() and not l.startswith("#")]
    check(n == len(rows) and n >= CALLS // 2, "trace rows %d" % len(rows))
    check(all(len(r) == WORLD and r[LATE] == max(r) for r in rows), "every trace row has the late rank last")
    expect_error(lambda: pt.pap_stats(last=0), ["last"], "pap_stats(last=0)")
    gloo = dist.new_group(backend="gloo")
    expect_error(lambda: pt.pap_stats(gloo), ["not a papccl process group"], "pap_stats on a gloo group")


if __name__ == "__main__":
    init(timeout=datetime.timedelta(seconds=60))
    run([test_pap_stats])
