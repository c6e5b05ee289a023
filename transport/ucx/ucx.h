/* SPDX-License-Identifier: Apache-2.0 */
/* The ucx backend's check of a peer's listen handle, callable without a worker (the fuzzers
 * use it). */
#ifndef PAPCCL_TRANSPORT_UCX_UCX_H_
#define PAPCCL_TRANSPORT_UCX_UCX_H_

#include <stddef.h>
#include <stdint.h>

/* Layout (host order): magic u64, board address u64, worker address length u32, packed key
 * length u32; the worker address follows, then the key (the ucx backend itself sends address
 * 0 and no key: its board is served with messages). */
#define PAP_UCX_HANDLE_HDR_BYTES 24

/* What a handle holds; the pointers point into it. */
struct papUcxHandleInfo {
  uint64_t boardAddr;
  const void* addr; /* the worker address */
  size_t addrLen;
  const void* rkey; /* the board's packed key */
  size_t rkeyLen;
};

/* Checks a peer's handle (handleBytes readable, at least the header): 0 with *infoOut filled,
 * or -1 when its magic is wrong or its lengths run past handleBytes. */
int papUcxHandleCheck(const void* handle, size_t handleBytes, struct papUcxHandleInfo* infoOut);

#endif /* PAPCCL_TRANSPORT_UCX_UCX_H_ */
