# SPDX-License-Identifier: Apache-2.0
"""Starts N local ranks of a torch.distributed program (what torchrun does on one host,
without torch's elastic agent).

    python3 -m papccl.launch -n 4 train.py [ARGS...]

Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free
port), so ``dist.init_process_group("papccl")`` (env://) works unchanged. When a rank fails,
the others are stopped; the exit status is the first failing rank's.
"""
import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import time


def free_port():
    """A TCP port nobody holds now, taken below the kernel's ephemeral range (as papcclrun
    does): it is released before rank 0 binds it again, and inside that range it could
    meanwhile become the source port of any connection or a bind to port 0 on this host
    (the tests hit that). Falls back to a kernel-chosen port when the range leaves no room."""
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(256 if lo > 10064 else 0):
        port = rng.randrange(10000, lo)
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, nranks, port, extra=None):
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nranks),
               LOCAL_WORLD_SIZE=str(nranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env.update(extra or {})
    return env


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m papccl.launch", description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--nproc", type=int, required=True, help="ranks to start")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.nproc < 1:
        ap.error("--nproc must be >= 1")
    port = free_port()
    procs = [subprocess.Popen([sys.executable, a.script] + a.args, env=rank_env(r, a.nproc, port))
             for r in range(a.nproc)]
    status = 0
    try:
        live = set(range(a.nproc))
        while live:
            for r in sorted(live):
                rc = procs[r].poll()
                if rc is None:
                    continue
                live.discard(r)
                if rc != 0 and status == 0:
                    status = rc if rc > 0 else 128 - rc
                    sys.stderr.write("papccl.launch: rank %d exited with %d; stopping the others\n" % (r, rc))
                    for q in live:
                        procs[q].send_signal(signal.SIGTERM)
            time.sleep(0.05)
    except KeyboardInterrupt:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait()
        status = 130
    return status


if __name__ == "__main__":
    sys.exit(main())
