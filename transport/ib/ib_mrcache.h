/* SPDX-License-Identifier: Apache-2.0 */
/* The ib backend's memory registration cache, driven through register/deregister callbacks
 * (so that it is tested without a device). */
#ifndef PAPCCL_TRANSPORT_IB_IB_MRCACHE_H_
#define PAPCCL_TRANSPORT_IB_IB_MRCACHE_H_

#include <stddef.h>
#include <stdint.h>

#include "papccl.h"

/* ---- Registration cache ----------------------------------------------------------------- */

struct papIbMrOps {
  /* Registers [addr, addr + bytes) with access flags; *mrOut is the backend's handle. */
  papcclResult_t (*reg)(void* arg, void* addr, size_t bytes, int access, void** mrOut);
  void (*dereg)(void* arg, void* mr);
  void* arg;
};

struct papIbMrEntry {
  struct papIbMrEntry* prev; /* LRU list, most recent first */
  struct papIbMrEntry* next;
  uintptr_t addr; /* page-aligned registered range */
  size_t bytes;
  int access;
  int refs; /* users between Get and Put */
  int stale; /* invalidated while in use: deregistered at the last Put, never hit again */
  void* mr; /* owned; released through ops.dereg */
};

struct papIbMrCache {
  struct papIbMrOps ops;
  size_t pageSize;
  int cap; /* idle entries kept beyond this are evicted, least recently used first */
  int count;
  struct papIbMrEntry* head; /* most recently used */
  struct papIbMrEntry* tail;
  uint64_t hits, misses, evictions;
};

/* cap 0 keeps nothing: every Get registers and the last Put deregisters. */
papcclResult_t papIbMrCacheInit(struct papIbMrCache* c, const struct papIbMrOps* ops, int cap,
                                size_t pageSize);
/* A registration covering [addr, addr + bytes) with at least `access`: a cached one that
 * contains the range (a hit), else a new registration of the page-aligned range. Each
 * successful Get must be paired with one Put. A failing ops.reg is returned as is. */
papcclResult_t papIbMrCacheGet(struct papIbMrCache* c, const void* addr, size_t bytes, int access,
                               struct papIbMrEntry** entryOut);
void papIbMrCachePut(struct papIbMrCache* c, struct papIbMrEntry* e);
/* Forgets registrations overlapping [addr, addr + bytes) (the memory is being freed): idle
 * ones are deregistered now, in-use ones at their last Put. Returns how many were deferred. */
int papIbMrCacheInvalidate(struct papIbMrCache* c, const void* addr, size_t bytes);
/* Deregisters everything; returns how many entries were still in use. */
int papIbMrCacheDestroy(struct papIbMrCache* c);

#endif /* PAPCCL_TRANSPORT_IB_IB_MRCACHE_H_ */
