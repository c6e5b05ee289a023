/* SPDX-License-Identifier: Apache-2.0 */
/* The ib memory registration cache. */
#include "ib/ib_mrcache.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"

/* ---- Registration cache ----------------------------------------------------------------- */

static void lruUnlink(struct papIbMrCache* c, struct papIbMrEntry* e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    c->head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    c->tail = e->prev;
  e->prev = e->next = NULL;
}

static void lruPushFront(struct papIbMrCache* c, struct papIbMrEntry* e) {
  e->prev = NULL;
  e->next = c->head;
  if (c->head) c->head->prev = e;
  c->head = e;
  if (c->tail == NULL) c->tail = e;
}

static void entryFree(struct papIbMrCache* c, struct papIbMrEntry* e) {
  lruUnlink(c, e);
  c->ops.dereg(c->ops.arg, e->mr);
  c->count--;
  free(e);
}

/* Evicts idle entries from the LRU end while the cache holds more than cap. */
static void evict(struct papIbMrCache* c) {
  struct papIbMrEntry* e = c->tail;
  while (c->count > c->cap && e != NULL) {
    struct papIbMrEntry* prev = e->prev;
    if (e->refs == 0) {
      entryFree(c, e);
      c->evictions++;
    }
    e = prev;
  }
}

papcclResult_t papIbMrCacheInit(struct papIbMrCache* c, const struct papIbMrOps* ops, int cap,
                                size_t pageSize) {
  if (c == NULL || ops == NULL || ops->reg == NULL || ops->dereg == NULL || cap < 0 ||
      pageSize == 0 || (pageSize & (pageSize - 1)) != 0) {
    PAP_WARN("ib: invalid registration cache parameters (cap %d, page size %zu)", cap, pageSize);
    return papcclInvalidArgument;
  }
  memset(c, 0, sizeof(*c));
  c->ops = *ops;
  c->cap = cap;
  c->pageSize = pageSize;
  return papcclSuccess;
}

papcclResult_t papIbMrCacheGet(struct papIbMrCache* c, const void* addr, size_t bytes, int access,
                               struct papIbMrEntry** entryOut) {
  if (c == NULL || addr == NULL || entryOut == NULL) {
    PAP_WARN("ib: registration cache lookup with a NULL argument");
    return papcclInvalidArgument;
  }
  uintptr_t lo = (uintptr_t)addr;
  if (bytes == 0) bytes = 1;
  if (lo + bytes < lo) {
    PAP_WARN("ib: registration of %zu bytes at %p wraps around", bytes, addr);
    return papcclInvalidArgument;
  }
  uintptr_t hi = lo + bytes;
  for (struct papIbMrEntry* e = c->head; e != NULL; e = e->next) {
    if (!e->stale && e->addr <= lo && hi <= e->addr + e->bytes && (e->access & access) == access) {
      e->refs++;
      c->hits++;
      lruUnlink(c, e);
      lruPushFront(c, e);
      *entryOut = e;
      return papcclSuccess;
    }
  }
  uintptr_t alo = lo & ~(uintptr_t)(c->pageSize - 1);
  uintptr_t ahi = (hi + c->pageSize - 1) & ~(uintptr_t)(c->pageSize - 1);
  if (ahi < hi) ahi = hi; /* the last page ends the address space */
  struct papIbMrEntry* e = NULL;
  PAP_CHECK(papCalloc(&e, 1));
  papcclResult_t res = c->ops.reg(c->ops.arg, (void*)alo, (size_t)(ahi - alo), access, &e->mr);
  if (res != papcclSuccess) {
    free(e);
    return res;
  }
  e->addr = alo;
  e->bytes = (size_t)(ahi - alo);
  e->access = access;
  e->refs = 1;
  c->misses++;
  c->count++;
  lruPushFront(c, e);
  evict(c);
  *entryOut = e;
  return papcclSuccess;
}

void papIbMrCachePut(struct papIbMrCache* c, struct papIbMrEntry* e) {
  if (c == NULL || e == NULL) return;
  if (e->refs <= 0) {
    PAP_WARN("ib: registration cache entry released more often than taken");
    return;
  }
  if (--e->refs > 0) return;
  if (e->stale)
    entryFree(c, e);
  else
    evict(c);
}

int papIbMrCacheInvalidate(struct papIbMrCache* c, const void* addr, size_t bytes) {
  if (c == NULL) return 0;
  uintptr_t lo = (uintptr_t)addr, hi = lo + (bytes ? bytes : 1);
  int deferred = 0;
  struct papIbMrEntry* e = c->head;
  while (e != NULL) {
    struct papIbMrEntry* next = e->next;
    if (e->addr < hi && lo < e->addr + e->bytes) {
      if (e->refs == 0) {
        entryFree(c, e);
      } else if (!e->stale) {
        e->stale = 1;
        deferred++;
      }
    }
    e = next;
  }
  return deferred;
}

int papIbMrCacheDestroy(struct papIbMrCache* c) {
  if (c == NULL) return 0;
  int inUse = 0;
  while (c->head) {
    inUse += c->head->refs > 0;
    entryFree(c, c->head);
  }
  return inUse;
}
