# SPDX-License-Identifier: Apache-2.0
"""torchft's fault-tolerant DDP on papccl (papccl.torchft.ProcessGroupPapccl), real processes:
two replica groups of one rank each under a torchft Lighthouse, CPU tensors.

- gloo: both replicas train STEPS steps on torchft's own gloo group (each replica its own
  data), the reference;
- healthy: the same on papccl; both replicas must end with the gloo run's weights (so the
  allreduce's numbers are checked, not only that the replicas agree);
- failure: replica 1 kills itself (SIGKILL) in the middle of a step, after its forward pass;
  replica 0's allreduce with it must fail (papccl sees the dead peer), torchft discards that
  step, a new replica-1 process starts, joins (torchft heals it from replica 0's state and
  reconfigures the group: a new papccl communicator) and both go on to STEPS, redoing the
  discarded step with both replicas. Both must end with the healthy run's weights.

Usage: python3 test_torchft.py            (the driver; exit 0 when every check held, 77 when
torchft is not installed). It runs this file again as each replica: ... replica ID ARGS.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

import torch
from torch import nn

STEPS = 6
KILL_AT = 3
LR = 0.1


def data(step, replica):
    g = torch.Generator().manual_seed(1000 * step + replica)
    return torch.rand(4, 8, generator=g), torch.rand(4, 3, generator=g)


def model():
    torch.manual_seed(42)
    return nn.Linear(8, 3)


def grads(m, step, replica):
    x, y = data(step, replica)
    m.zero_grad()
    nn.functional.mse_loss(m(x), y).backward()
    return [p.grad.clone() for p in m.parameters()]


def replica(rid, lighthouse, out, kill_at, pg_kind):
    import torch.distributed as dist
    from torchft.ddp import DistributedDataParallel
    from torchft.manager import Manager
    from torchft.optim import OptimizerWrapper

    if pg_kind == "gloo":
        from torchft.process_group import ProcessGroupGloo as Group
    else:
        from papccl.torchft import ProcessGroupPapccl as Group

    torch.set_num_threads(1)
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    manager = Manager(
        pg=Group(timeout=timedelta(seconds=20)), min_replica_size=2,
        load_state_dict=lambda s: (m.load_state_dict(s["model"]), opt.load_state_dict(s["opt"])),
        state_dict=lambda: {"model": m.state_dict(), "opt": opt.state_dict()},
        replica_id=str(rid), store_addr="localhost", store_port=store.port, rank=0,
        world_size=1, lighthouse_addr=lighthouse, port=0, timeout=timedelta(seconds=20),
        quorum_timeout=timedelta(seconds=60))
    ddp = DistributedDataParallel(manager, m)
    optw = OptimizerWrapper(manager, opt)
    committed, failed = [], 0
    while manager.current_step() < STEPS:
        step = manager.current_step()
        x, y = data(step, rid)
        optw.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)  # dies in the middle of the step
        loss.backward()
        optw.step()
        if manager.current_step() > step:
            committed.append((step, manager.num_participants()))
        else:
            failed += 1
    with open(out, "w") as f:
        json.dump({"weights": [p.detach().tolist() for p in m.parameters()],
                   "committed": committed, "discarded": failed}, f)
    manager.shutdown(wait=False)


def run_case(name, kill, pg_kind="papccl"):
    """Runs one case; returns replica 0's weights when every check of the case held, else
    None."""
    from torchft._torchft import LighthouseServer

    lh = LighthouseServer(bind="[::]:0", min_replicas=2)
    tmp = tempfile.mkdtemp(prefix="papccl-torchft-")
    outs = [os.path.join(tmp, "r%d.json" % r) for r in range(2)]

    def start(rid, kill_at):
        return subprocess.Popen([sys.executable, __file__, "replica", str(rid), lh.address(),
                                 outs[rid], str(kill_at), pg_kind])

    t0 = time.time()
    procs = [start(0, -1), start(1, KILL_AT if kill else -1)]
    ok = True
    if kill:
        procs[1].wait(timeout=300)
        ok &= procs[1].returncode == -signal.SIGKILL
        print("%s: replica 1 died (%s) after %.1f s; starting its replacement"
              % (name, procs[1].returncode, time.time() - t0), flush=True)
        procs[1] = start(1, -1)
    for p in procs:
        p.wait(timeout=300)
        ok &= p.returncode == 0
    lh.shutdown()
    if not ok:
        print("FAIL %s: a replica exited badly: %s" % (name, [p.returncode for p in procs]))
        return None
    res = [json.load(open(o)) for o in outs]
    shutil.rmtree(tmp, ignore_errors=True)
    w = [[torch.tensor(t) for t in r["weights"]] for r in res]
    same = all(torch.equal(a, b) for a, b in zip(w[0], w[1]))
    steps = [s for s, _ in res[0]["committed"]]
    print("%s: %.1f s; replica 0 committed steps %s (participants %s), discarded %d; "
          "replicas equal: %s" % (name, time.time() - t0, steps,
                                  [n for _, n in res[0]["committed"]], res[0]["discarded"],
                                  same), flush=True)
    good = same and steps == list(range(STEPS))
    good &= res[0]["discarded"] >= 1 if kill else res[0]["discarded"] == 0
    print("%s: %s" % (name, "ok" if good else "FAIL"), flush=True)
    return w[0] if good else None


def close(name, got, want):
    if got is None or want is None:
        return False
    diff = max(float((a - b).abs().max()) for a, b in zip(got, want))
    ok = diff <= 1e-6
    print("%s: max |difference| %.3g: %s" % (name, diff, "ok" if ok else "FAIL"), flush=True)
    return ok


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "replica":
        replica(int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
        return 0
    try:
        import torchft  # noqa: F401
    except ImportError as e:
        print("SKIP: torchft is not installed (%s): scripts/setup-venv.sh installs it" % e)
        return 77
    gloo = run_case("gloo", kill=False, pg_kind="gloo")
    healthy = run_case("healthy", kill=False)
    failure = run_case("failure", kill=True)
    ok = close("healthy papccl against gloo", healthy, gloo)
    ok = close("failure run against healthy run", failure, healthy) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
