# SPDX-License-Identifier: Apache-2.0
"""What carries torch's gloo allreduce between ranks of one host: TCP on loopback or shared
memory? A gloo-only job (papccl is not loaded, so its shared memory cannot confuse the
answer):

    python3 -m papccl.launch -n 4 perf/torch/gloo_transport.py [--out FILE]

Rank 0 prints (and writes to FILE) three pieces of evidence:
  - the gloo transports compiled into this torch (the source paths of
    third_party/gloo/gloo/transport/NAME/ that torch's library carries);
  - the bytes its process sent over TCP (``ss -tie``, its own sockets) during 10 in-place
    allreduces of 16 MiB, next to what a ring allreduce sends (2 (n-1)/n x 16 MiB a call);
  - its shared-memory mappings (/dev/shm, memfd) and its socket descriptors, after them.
"""
import argparse
import mmap
import os
import re
import subprocess

import torch
import torch.distributed as dist


def compiled_transports():
    """gloo's transport directories named in torch's CPU library (['tcp'], say)."""
    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return sorted({x.decode() for x in re.findall(rb"gloo/transport/([a-z_]+)/", m)})
    except (OSError, ValueError):
        return ["unknown (%s not readable)" % lib]


def own_sockets():
    """The inodes of this process's sockets."""
    inodes = set()
    for d in os.listdir("/proc/self/fd"):
        try:
            m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink("/proc/self/fd/" + d))
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if m:
            inodes.add(int(m.group(1)))
    return inodes


def tcp_bytes(inodes):
    """{inode: bytes acked by the peer} of these TCP sockets (ss -tie), None without ss."""
    try:
        out = subprocess.run(["ss", "-tieH"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.splitlines()
    found = {}
    for i, line in enumerate(lines):
        m = re.search(r"\bino:(\d+)", line)
        if m and int(m.group(1)) in inodes:
            info = line + " " + (lines[i + 1] if i + 1 < len(lines) else "")
            b = re.search(r"bytes_acked:(\d+)", info)
            found[int(m.group(1))] = int(b.group(1)) if b else 0
    return found


def shm_mappings():
    """This process's shared-memory mappings (/dev/shm files, memfds)."""
    with open("/proc/self/maps") as f:
        return sorted({ln.split(None, 5)[-1].strip() for ln in f if "/dev/shm" in ln or "memfd:" in ln})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="also write the report here")
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    x = torch.ones(4 << 20)  # 16 MiB of float32
    dist.all_reduce(x)
    dist.barrier()
    socks = own_sockets()
    before = tcp_bytes(socks) if rank == 0 else None
    for _ in range(a.calls):
        dist.all_reduce(x)
    dist.barrier()
    if rank == 0:
        after = tcp_bytes(socks)
        shm, nsocks = shm_mappings(), len(own_sockets())
        ring = 2 * (n - 1) / n * 16 * a.calls
        sent = "unknown (no ss)" if before is None or after is None else "%.1f MiB" % (
            sum(after[k] - before[k] for k in after.keys() & before.keys()) / 2**20)
        lines = [
            "torch %s, %d ranks on one host, GLOO_DEVICE_TRANSPORT=%s"
            % (torch.__version__, n, os.environ.get("GLOO_DEVICE_TRANSPORT", "unset (tcp)")),
            "gloo transports compiled into torch: %s" % ", ".join(compiled_transports()),
            "rank 0 sent over TCP during %d allreduces of 16 MiB: %s (a ring allreduce sends "
            "%.1f MiB)" % (a.calls, sent, ring),
            "rank 0's shared-memory mappings: %s; sockets open: %d" % (", ".join(shm) or "none", nsocks),
        ]
        text = "\n".join("# gloo: " + ln for ln in lines)
        print(text, flush=True)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
