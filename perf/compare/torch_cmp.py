#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torch.distributed's gloo backend in the comparison loop: the same C timing loop as the
other drivers (bench_loop.c, loaded from the build as libpapccl_cmp_pyloop.so), whose allreduce
and barrier call dist.all_reduce on a tensor over the loop's own buffer (torch.frombuffer: no
copy). What a PyTorch user pays per call (the Python call into torch) is part of the time.

Run one process per rank under papcclrun with the loop's options:
    PAPCMP_TORCH_STORE=$(mktemp -d) papcclrun -n 4 python3 torch_cmp.py --sizes 8,1M
Environment: PAPCMP_LOOP (the loop library; default next to this file in the build tree is
not known, so run.sh passes it), PAPCMP_TORCH_STORE (a fresh directory shared by the ranks).
"""
import ctypes
import os
import sys

import torch
import torch.distributed as dist


def rank_env():
    for r, n in (("PAPCCL_RANK", "PAPCCL_NRANKS"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                 ("PMI_RANK", "PMI_SIZE")):
        if os.environ.get(r) and os.environ.get(n):
            return int(os.environ[r]), int(os.environ[n])
    sys.exit("torch_cmp: start it with papcclrun (no rank variables found)")


AR32 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
AR64 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.c_int)
BARRIER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
PREPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class CmpLib(ctypes.Structure):  # struct cmpLib of bench_loop.h
    _fields_ = [("name", ctypes.c_char_p), ("rank", ctypes.c_int), ("nranks", ctypes.c_int),
                ("ctx", ctypes.c_void_p), ("allreduceF32", AR32), ("allreduceF64", AR64),
                ("barrier", BARRIER), ("prepare", PREPARE)]


def tensor_at(addr, count, ctype, dtype):
    return torch.frombuffer((ctype * count).from_address(addr), dtype=dtype)


def guarded(fn):
    """A failed call returns 1 to the loop (which then fails the run) instead of raising
    through C."""
    def call(*args):
        try:
            fn(*args)
            return 0
        except Exception as e:  # noqa: BLE001: any failure fails the run, with its reason
            print(f"torch_cmp: {e!r}", file=sys.stderr)
            return 1
    return call


OPS = {0: dist.ReduceOp.MAX, 1: dist.ReduceOp.MIN, 2: dist.ReduceOp.SUM}


def main():
    rank, n = rank_env()
    loop_path, store = os.environ.get("PAPCMP_LOOP"), os.environ.get("PAPCMP_TORCH_STORE")
    if not loop_path or not store:
        sys.exit("torch_cmp: set PAPCMP_LOOP (libpapccl_cmp_pyloop.so) and PAPCMP_TORCH_STORE")
    torch.set_num_threads(1)  # one core per rank, as the other drivers
    dist.init_process_group("gloo", init_method=f"file://{store}/rdv", rank=rank, world_size=n)
    loop = ctypes.CDLL(loop_path)
    loop.cmpRun.argtypes = [ctypes.POINTER(CmpLib), ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    ar32 = AR32(guarded(lambda ctx, buf, count: dist.all_reduce(
        tensor_at(buf, count, ctypes.c_float, torch.float32))))
    ar64 = AR64(guarded(lambda ctx, buf, count, op: dist.all_reduce(
        tensor_at(buf, count, ctypes.c_double, torch.float64), op=OPS[op])))
    barrier = BARRIER(guarded(lambda ctx: dist.barrier()))
    lib = CmpLib(b"torch-gloo", rank, n, None, ar32, ar64, barrier, PREPARE())
    argv = [b"torch_cmp"] + [a.encode() for a in sys.argv[1:]]
    cargv = (ctypes.c_char_p * (len(argv) + 1))(*argv, None)
    rc = loop.cmpRun(ctypes.byref(lib), len(argv), cargv)
    dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main())
