#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The arrival protocol at 16 to 8,192 ranks, on paper (docs/SCALE.md).

A LogP-style model of one collective's arrival phase on three designs of the board:
  flat  - the message board as built: every rank sends its arrival to rank 0 and gets a
          reply; rank 0 pushes the statistics (every stamp) to every rank; releases come back.
  host  - arrivals aggregated per host: the ranks of a host arrive on their shared-memory
          board; the host's leader sends one notice to rank 0 when its host is complete (and
          one when its first rank arrives, so that the decider sees early hosts); rank 0
          replies to the leaders, which hand the commit to their ranks through shared memory;
          statistics travel as a fixed-size summary.
  tree  - the host notices combined along a k-ary tree of leaders: each leader forwards one
          notice per subtree, the commit comes back down the same tree.
Costs per message: o (CPU time to send or to receive one small message, at the sender and
at the receiver), L (one-way wire latency), B (bytes per second a process moves). A process
handles its messages one after another, so rank 0's queue is the bottleneck of 'flat'.

Prints, for each network (measured here and assumed for InfiniBand) and rank count, what
rank 0 handles per collective and how long after the last arrival every rank knows the
plan, next to the time of an 8-byte allreduce (recursive doubling: log2(N) steps of L + 2o)
as the yardstick of what an arrival phase may cost.

usage: scripts/scale-model.py [--gpus-per-host G] [--fanout K]
"""
import argparse
import math

# Network parameters: L and o in microseconds, B in bytes per microsecond.
NETWORKS = [
    # Measured on this machine (scripts/bench-hosts.sh, network namespaces over veth, UCX over
    # TCP): ucx_perftest tag latency 9.2 us one-way, 105,000 small messages/s on one stream.
    ("TCP (measured here)", 9.2, 9.5, 1600.0),
    # Assumed: InfiniBand NDR through UCX, small-message one-way latency ~1.5 us, one core
    # sending or receiving ~2 M small messages/s (o = 0.5 us), 50 GB/s per port.
    ("InfiniBand NDR (assumed)", 1.5, 0.5, 50000.0),
]
SHM_ATOMIC_US = 0.2  # an arrival on a host's shared-memory board (CAS + stores), measured ~0.1-0.3
SHM_WAKE_US = 2.0  # handing the commit to the host's ranks through shared memory (a doorbell)


def flat(n, lat, o, bw):
    """Rank 0 serves every arrival; the last one queues behind the others in a burst."""
    msgs_in = 2 * (n - 1)  # arrivals + releases
    stats_bytes = n * 8 * (2 * n + 2)  # the stamps of every rank to every rank
    msgs_out = (n - 1) + n  # replies + statistics pushes
    busy = (msgs_in + msgs_out) * o + stats_bytes / bw
    # Balanced: n - 1 requests arrive together; the last is served after the others.
    commit = lat + (n - 1) * o + o + lat
    return msgs_in + msgs_out, busy, commit, stats_bytes


def host(n, g, lat, o, bw):
    h = max(1, n // g)
    msgs_in = 2 * (h - 1) + (h - 1)  # first-arrival and complete notices + releases
    msgs_out = 2 * (h - 1)  # commit replies + summary pushes (fixed size)
    busy = (msgs_in + msgs_out) * o + h * 64 / bw
    commit = SHM_ATOMIC_US + lat + (h - 1) * o + o + lat + SHM_WAKE_US
    return msgs_in + msgs_out, busy, commit, h * 64


def tree(n, g, k, lat, o, bw):
    h = max(1, n // g)
    depth = max(1, math.ceil(math.log(h, k))) if h > 1 else 0
    c = min(k, max(1, h - 1))  # children of a leader
    msgs = 4 * c  # rank 0 hears from and answers its children (notice, commit, release)
    busy = msgs * o + c * 64 / bw
    # Up and down the tree; each level's leader handles its children one after another.
    commit = SHM_ATOMIC_US + 2 * depth * (lat + c * o) + SHM_WAKE_US
    return msgs, busy, commit, c * 64


def allreduce8(n, lat, o):
    return math.ceil(math.log2(n)) * (lat + 2 * o)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus-per-host", type=int, default=8)
    ap.add_argument("--fanout", type=int, default=16)
    a = ap.parse_args()
    g, k = a.gpus_per_host, a.fanout
    for name, lat, o, bw in NETWORKS:
        print(f"\n### {name}: L = {lat} us, o = {o} us, B = {bw / 1000:g} GB/s; "
              f"{g} ranks per host, tree fan-out {k}\n")
        print("| ranks | hosts | 8 B allreduce | flat: msgs at rank 0 | flat: rank 0 busy | "
              "flat: plan known | host: msgs | host: busy | host: plan known | "
              "tree: msgs | tree: busy | tree: plan known |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in (16, 64, 256, 1024, 4096, 8192):
            fm, fb, fc, _ = flat(n, lat, o, bw)
            hm, hb, hc, _ = host(n, g, lat, o, bw)
            tm, tb, tc, _ = tree(n, g, k, lat, o, bw)
            print(f"| {n} | {max(1, n // g)} | {us(allreduce8(n, lat, o))} | {fm} | {us(fb)} | "
                  f"{us(fc)} | {hm} | {us(hb)} | {us(hc)} | {tm} | {us(tb)} | {us(tc)} |")


def us(x):
    if x >= 10000:
        return f"{x / 1000:.0f} ms"
    if x >= 1000:
        return f"{x / 1000:.1f} ms"
    return f"{x:.0f} us" if x >= 10 else f"{x:.1f} us"


if __name__ == "__main__":
    main()
