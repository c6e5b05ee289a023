/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA layer's private state of device buffers in stream order (device.c), shared with
 * the accounting and release of a suspended comm's staging (device_mem.c). CUDA builds
 * only. */
#ifndef PAPCCL_CUDA_DEVICE_INT_H_
#define PAPCCL_CUDA_DEVICE_INT_H_

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "param.h"

/* Arrival words: a ring indexed by the arrival number, so that ops of one comm on several
 * streams never see each other's writes. The done word is single: jobs finish in order. */
#define DEV_ARRIVE_SLOTS 1024
#define DEV_WORDS (DEV_ARRIVE_SLOTS + 8)
#define DEV_DONE_WORD DEV_ARRIVE_SLOTS
/* Staging blocks are at least this big, so that small ops reuse them. */
#define DEV_STAGE_MIN (1u << 20)
/* Pinned staging per comm (PAPCCL_CUDA_STAGING_MB) beyond which a caller running ahead of
 * its streams waits for a block to come free (backpressure). */
#define DEV_STAGE_BUDGET ((size_t)papParamCudaStagingMb() << 20)

struct papDevStage {
  struct papDevStage* next;
  void* ptr; /* pinned host memory */
  size_t bytes;
  cudaEvent_t done; /* recorded on the user's stream after the copies back */
  _Atomic int busy; /* set by the API thread, cleared by the progress thread */
  void* ctx; /* the CUDA context it (and its event) belong to */
  int poisoned; /* recording `done` failed: it cannot tell when the block is free again */
};

struct papDevState {
  uint64_t* words; /* pinned, mapped: DEV_WORDS words */
  unsigned long long wordsDev; /* their device address */
  uint64_t nextSeq; /* last arrival number handed out */
  struct papDevStage* stages; /* the pool */
  void* ctx; /* the context the word page belongs to */
  size_t pinnedBytes; /* bytes of the blocks in the pool */
};

#endif /* PAPCCL_CUDA_DEVICE_INT_H_ */
