# SPDX-License-Identifier: Apache-2.0
"""Runs a test script as N ranks (real processes) of one torch.distributed job.

usage: launch.py [--timeout S] [--nranks N ...] SCRIPT [ARGS...]

For each N given (default 2), starts N processes of ``python3 SCRIPT ARGS`` with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (a free port per job; PAPCCL_TEST_PORT2 another
one, PAPCCL_TEST_DIR a folder of the job's own), and fails when any rank
exits non-zero or the job outlives --timeout (then every rank is killed, and the output of
each is shown). The interpreter is this one (the one that has torch).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from papccl.launch import free_port, rank_env


def run_job(nranks, script, args, timeout):
    port, port2 = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="papccl-torch-")
    procs = []
    t0 = time.monotonic()
    for r in range(nranks):
        env = rank_env(r, nranks, port, {"PAPCCL_TEST_PORT2": str(port2), "PAPCCL_TEST_DIR": tmp})
        procs.append(subprocess.Popen([sys.executable, script] + args, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = [None] * nranks
    deadline = t0 + timeout
    timed_out = False
    for r, p in enumerate(procs):
        try:
            outs[r], _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            for q in procs:
                q.kill()
            outs[r], _ = p.communicate()
    for r, p in enumerate(procs):
        if outs[r] is None:
            outs[r], _ = p.communicate()
    shutil.rmtree(tmp, ignore_errors=True)
    ok = not timed_out and all(p.returncode == 0 for p in procs)
    took = time.monotonic() - t0
    for r, p in enumerate(procs):
        sys.stdout.write("---- %d ranks, rank %d (exit %s)\n%s" % (nranks, r, p.returncode, outs[r]))
    sys.stdout.write("==== %d ranks: %s in %.1f s%s\n" % (nranks, "ok" if ok else "FAILED", took,
                                                      " (timed out)" if timed_out else ""))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--nranks", type=int, action="append")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    ok = True
    for n in a.nranks or [2]:
        ok = run_job(n, a.script, a.args, a.timeout) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
