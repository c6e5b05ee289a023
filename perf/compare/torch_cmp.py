#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch-level peers in the comparison loop: the same C timing loop as the other drivers
(bench_loop.c, loaded from the build as libpapccl_cmp_pyloop.so), whose allreduce is a Python
call on a tensor over the loop's own buffer (torch.frombuffer: no copy). What a PyTorch user
pays per call (the Python call into torch) is part of the time. Two backends
(PAPCMP_TORCH_BACKEND):
  gloo           dist.all_reduce on a gloo process group (the default; cells "torch-gloo");
  deepspeed-shm  deepspeed.comm.inference_all_reduce: DeepSpeed's shared-memory allreduce (its
                 CPU op deepspeed_shm_comm, built by DeepSpeed on first use) on that gloo
                 group, as DeepSpeed's CPU inference calls it. It sums float32/bf16/fp16 only
                 and needs every rank on one host (LOCAL_SIZE = the world size).
Both keep the loop's barriers and float64 statistics on gloo (untimed), so only the timed call
differs.

Run one process per rank under papcclrun with the loop's options:
    PAPCMP_TORCH_STORE=$(mktemp -d) papcclrun -n 4 python3 torch_cmp.py --sizes 8,1M
    PAPCMP_TORCH_BACKEND=deepspeed-shm LOCAL_SIZE=4 ... (the same)
Environment: PAPCMP_LOOP (the loop library; default next to this file in the build tree is
not known, so run.sh passes it), PAPCMP_TORCH_STORE (a fresh directory shared by the ranks).
`torch_cmp.py --probe` loads the backend without ranks (DeepSpeed builds its op then), prints
its versions on one line and exits 0, or 1 with the reason.
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
BACKENDS = {"gloo": "torch-gloo", "deepspeed-shm": "deepspeed-shm"}  # backend: cell name


def deepspeed_shm_op():
    """Loads DeepSpeed's shm op (DeepSpeed compiles it with the host compiler on first use and
    keeps it under torch's extension cache). Returns (deepspeed, op, ISA level of its kernels:
    float32 needs 1 (avx2), bf16/fp16 2 (avx512bw); below, DeepSpeed falls back to gloo)."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # a CUDA torch build on a host without GPUs
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not builder.is_compatible():
        raise RuntimeError("DeepSpeed has no compatible ShareMemCommBuilder here")
    op = builder.load(verbose=False)
    return deepspeed, op, op.vector_kernel_level()


def deepspeed_shm_prepare(n):
    """Before the process group exists, as DeepSpeed's users do: imported later, DeepSpeed's
    default arguments capture the group and keep its threads alive past
    destroy_process_group, into interpreter exit (where gloo then aborts at times)."""
    if os.environ.get("LOCAL_SIZE") != str(n):  # else DeepSpeed never maps its shm segments
        raise RuntimeError(f"set LOCAL_SIZE={n}: every rank on this host")
    _, _, level = deepspeed_shm_op()
    if level < 1:
        raise RuntimeError(f"the shm kernels need avx2 (ISA level {level})")
    import deepspeed.comm  # noqa: F401: see above


def deepspeed_shm_allreduce():
    """deepspeed.comm on the gloo group just made; refuses to run where DeepSpeed would
    silently use gloo instead of its shm kernels (the cells would be mislabelled)."""
    import deepspeed.comm as dscomm
    from deepspeed.comm import comm as dscore  # its backend object lives there (cdb)
    dscomm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    if getattr(dscore.cdb, "shm_comm_op", None) is None or \
            not hasattr(torch.ops.deepspeed, "inference_all_reduce_"):
        raise RuntimeError("deepspeed.comm did not take up its shm op")
    return dscomm.inference_all_reduce


def probe(backend):
    try:
        if backend == "deepspeed-shm":
            ds, _, level = deepspeed_shm_op()
            print(f"deepspeed {ds.__version__}, torch {torch.__version__}, shm kernels at ISA "
                  f"level {level}")
        else:
            print(f"torch {torch.__version__}")
        return 0
    except Exception as e:  # noqa: BLE001: the reason is the answer
        print(f"unavailable: {e!r}")
        return 1


def main():
    backend = os.environ.get("PAPCMP_TORCH_BACKEND", "gloo")
    if backend not in BACKENDS:
        sys.exit(f"torch_cmp: PAPCMP_TORCH_BACKEND is one of {', '.join(BACKENDS)}")
    if sys.argv[1:] == ["--probe"]:
        return probe(backend)
    rank, n = rank_env()
    loop_path, store = os.environ.get("PAPCMP_LOOP"), os.environ.get("PAPCMP_TORCH_STORE")
    if not loop_path or not store:
        sys.exit("torch_cmp: set PAPCMP_LOOP (libpapccl_cmp_pyloop.so) and PAPCMP_TORCH_STORE")
    torch.set_num_threads(1)  # one core per rank, as the other drivers
    f32_sum = dist.all_reduce
    try:  # a run that cannot use DeepSpeed's op fails, with the reason
        if backend == "deepspeed-shm":
            deepspeed_shm_prepare(n)
        dist.init_process_group("gloo", init_method=f"file://{store}/rdv", rank=rank,
                                world_size=n)
        if backend == "deepspeed-shm":
            f32_sum = deepspeed_shm_allreduce()
    except Exception as e:  # noqa: BLE001
        sys.exit(f"torch_cmp: {backend}: {e!r}")
    loop = ctypes.CDLL(loop_path)
    loop.cmpRun.argtypes = [ctypes.POINTER(CmpLib), ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    ar32 = AR32(guarded(lambda ctx, buf, count: f32_sum(
        tensor_at(buf, count, ctypes.c_float, torch.float32))))
    ar64 = AR64(guarded(lambda ctx, buf, count, op: dist.all_reduce(
        tensor_at(buf, count, ctypes.c_double, torch.float64), op=OPS[op])))
    barrier = BARRIER(guarded(lambda ctx: dist.barrier()))
    lib = CmpLib(BACKENDS[backend].encode(), rank, n, None, ar32, ar64, barrier, PREPARE())
    argv = [b"torch_cmp"] + [a.encode() for a in sys.argv[1:]]
    cargv = (ctypes.c_char_p * (len(argv) + 1))(*argv, None)
    rc = loop.cmpRun(ctypes.byref(lib), len(argv), cargv)
    dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main())
