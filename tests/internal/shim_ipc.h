/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the IPC allreduce plan (src/algo/arena_colls.c) without a GPU: the comms of one
 * process (ranks as threads) get host-memory arenas and a CPU executor for the plan's device
 * steps, which finishes each step only after a few polls, out of order with its posting, so a
 * missing dependency shows as a wrong result. The plan, the engine and the transport messages
 * are the library's own; only the copies and reductions run on the CPU. */
#ifndef PAPCCL_TESTS_SHIM_IPC_H_
#define PAPCCL_TESTS_SHIM_IPC_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* comms[i] must be rank i of one comm of n ranks, idle. arenaBytes per rank. 0 on success. */
int papTestIpcAttachHost(void** comms, int n, size_t arenaBytes);
/* Undoes the attach and frees the arenas (comms idle). */
void papTestIpcDetachHost(void** comms, int n);
/* Device steps comm's executor has run. */
uint64_t papTestIpcSteps(void* comm);
/* 1 when comm set up CUDA IPC at init (its allreduces go through device arenas). */
int papTestIpcOn(void* comm);
/* Forget the cached PAPCCL_* parameters (the next comm reads the environment again). */
void papTestIpcParamReset(void);
/* 1 when comm runs allreduces of count elements of datatype through its arenas. */
int papTestIpcEligible(void* comm, size_t count, int datatype, int redop);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PAPCCL_TESTS_SHIM_IPC_H_ */
