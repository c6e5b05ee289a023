/* SPDX-License-Identifier: Apache-2.0 */
/* The ib backend's pure parts: handle codec, QP state machine, credit rule, MR cache. */
#include "ib/ib_parts.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"

/* ---- Listen handle --------------------------------------------------------------------- */

enum {
  OFF_MAGIC = 0,
  OFF_VERSION = 8,
  OFF_LINK = 10,
  OFF_MTU = 11,
  OFF_RANK = 12,
  OFF_NRANKS = 16,
  OFF_LID = 20,
  OFF_PORT = 22,
  OFF_GID = 24,
  OFF_BOARD_ADDR = 40,
  OFF_BOARD_RKEY = 48,
  OFF_BYTES = 52,
  OFF_SUM = 56,
  OFF_BUF_SIZE = 60,
  OFF_NBUFS = 64
};

static void put(unsigned char* p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* FNV-1a over the encoded handle, the checksum field counted as zero. */
static uint32_t handleSum(const unsigned char* p, size_t bytes) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < bytes; i++) {
    unsigned char b = (i >= OFF_SUM && i < OFF_SUM + 4) ? 0 : p[i];
    h = (h ^ b) * 16777619u;
  }
  return h;
}

size_t papIbHandleSize(int nranks) {
  if (nranks < 1 || nranks > PAP_IB_MAX_RANKS) return 0;
  return PAP_IB_HANDLE_HDR_BYTES + 3 * (size_t)nranks;
}

papcclResult_t papIbHandleEncode(const struct papIbHandle* h, const uint32_t* qpns, void* buf,
                                 size_t bufBytes, const char** whyOut) {
  if (h == NULL || qpns == NULL || buf == NULL) {
    *whyOut = "NULL argument";
    return papcclInvalidArgument;
  }
  size_t bytes = papIbHandleSize(h->nranks);
  if (bytes == 0) {
    *whyOut = "nranks does not fit in the handle (at most PAP_IB_MAX_RANKS)";
    return papcclInvalidUsage;
  }
  if (bytes > bufBytes) {
    *whyOut = "buffer too small for the handle";
    return papcclInvalidArgument;
  }
  if (h->rank < 0 || h->rank >= h->nranks) {
    *whyOut = "rank out of range";
    return papcclInvalidArgument;
  }
  unsigned char* p = (unsigned char*)buf;
  memset(p, 0, bufBytes);
  put(p + OFF_MAGIC, PAP_IB_HANDLE_MAGIC, 8);
  put(p + OFF_VERSION, PAP_IB_HANDLE_VERSION, 2);
  p[OFF_LINK] = h->linkLayer;
  p[OFF_MTU] = h->mtu;
  put(p + OFF_RANK, (uint32_t)h->rank, 4);
  put(p + OFF_NRANKS, (uint32_t)h->nranks, 4);
  put(p + OFF_LID, h->lid, 2);
  p[OFF_PORT] = h->port;
  memcpy(p + OFF_GID, h->gid, 16);
  put(p + OFF_BOARD_ADDR, h->boardAddr, 8);
  put(p + OFF_BOARD_RKEY, h->boardRkey, 4);
  put(p + OFF_BYTES, (uint32_t)bytes, 4);
  put(p + OFF_BUF_SIZE, h->bufSize, 4);
  put(p + OFF_NBUFS, h->nbufs, 4);
  for (int i = 0; i < h->nranks; i++) {
    if (qpns[i] > 0xffffff) {
      *whyOut = "queue-pair number wider than 24 bits";
      return papcclInternalError;
    }
    put(p + PAP_IB_HANDLE_HDR_BYTES + 3 * (size_t)i, qpns[i], 3);
  }
  put(p + OFF_SUM, handleSum(p, bytes), 4);
  return papcclSuccess;
}

papcclResult_t papIbHandleDecode(const void* buf, size_t bufBytes, int expectRank, int expectNranks,
                                 struct papIbHandle* hOut, const char** whyOut) {
  const unsigned char* p = (const unsigned char*)buf;
  if (buf == NULL || hOut == NULL) {
    *whyOut = "NULL argument";
    return papcclInvalidArgument;
  }
  if (bufBytes < PAP_IB_HANDLE_HDR_BYTES) {
    *whyOut = "truncated (shorter than the header)";
    return papcclInternalError;
  }
  if (get(p + OFF_MAGIC, 8) != PAP_IB_HANDLE_MAGIC) {
    *whyOut = "bad magic (not an ib handle)";
    return papcclInternalError;
  }
  if (get(p + OFF_VERSION, 2) != PAP_IB_HANDLE_VERSION) {
    *whyOut = "unsupported version (mixed library versions?)";
    return papcclInternalError;
  }
  uint32_t nranks = (uint32_t)get(p + OFF_NRANKS, 4);
  uint32_t rank = (uint32_t)get(p + OFF_RANK, 4);
  if ((int64_t)nranks != expectNranks) {
    *whyOut = "wrong nranks (the handle belongs to another communicator)";
    return papcclInternalError;
  }
  if ((int64_t)rank != expectRank) {
    *whyOut = "wrong rank";
    return papcclInternalError;
  }
  if (rank >= nranks) {
    *whyOut = "rank out of range";
    return papcclInternalError;
  }
  size_t bytes = papIbHandleSize((int)nranks);
  if (bytes == 0 || get(p + OFF_BYTES, 4) != bytes) {
    *whyOut = "bad length field";
    return papcclInternalError;
  }
  if (bytes > bufBytes) {
    *whyOut = "truncated (queue-pair table cut off)";
    return papcclInternalError;
  }
  if ((uint32_t)get(p + OFF_SUM, 4) != handleSum(p, bytes)) {
    *whyOut = "checksum mismatch (corrupt handle)";
    return papcclInternalError;
  }
  memset(hOut, 0, sizeof(*hOut));
  hOut->rank = (int)rank;
  hOut->nranks = (int)nranks;
  hOut->linkLayer = p[OFF_LINK];
  hOut->mtu = p[OFF_MTU];
  hOut->lid = (uint16_t)get(p + OFF_LID, 2);
  hOut->port = p[OFF_PORT];
  memcpy(hOut->gid, p + OFF_GID, 16);
  hOut->boardAddr = get(p + OFF_BOARD_ADDR, 8);
  hOut->boardRkey = (uint32_t)get(p + OFF_BOARD_RKEY, 4);
  hOut->bufSize = (uint32_t)get(p + OFF_BUF_SIZE, 4);
  hOut->nbufs = (uint32_t)get(p + OFF_NBUFS, 4);
  return papcclSuccess;
}

uint32_t papIbHandleQpn(const void* buf, int idx) {
  return (uint32_t)get((const unsigned char*)buf + PAP_IB_HANDLE_HDR_BYTES + 3 * (size_t)idx, 3);
}

/* ---- Queue-pair state machine ---------------------------------------------------------- */

int papIbNextState(int state, int event) {
  if (state < 0 || state >= PAP_IB_QP_NSTATES || event < 0 || event >= PAP_IB_EV_NEVENTS) return -1;
  if (event == PAP_IB_EV_FAIL) return PAP_IB_QP_ERROR;
  if (event == PAP_IB_EV_TO_RESET) return PAP_IB_QP_RESET;
  static const int forward[PAP_IB_QP_NSTATES] = {
      [PAP_IB_QP_RESET] = PAP_IB_EV_TO_INIT,
      [PAP_IB_QP_INIT] = PAP_IB_EV_TO_RTR,
      [PAP_IB_QP_RTR] = PAP_IB_EV_TO_RTS,
      [PAP_IB_QP_RTS] = -1,
      [PAP_IB_QP_ERROR] = -1,
  };
  return forward[state] == event ? state + 1 : -1;
}

const char* papIbStateName(int state) {
  static const char* const names[PAP_IB_QP_NSTATES] = {"RESET", "INIT", "RTR", "RTS", "ERROR"};
  return state >= 0 && state < PAP_IB_QP_NSTATES ? names[state] : "?";
}

/* ---- Credits ---------------------------------------------------------------------------- */

int papIbShouldReturnCredits(unsigned pending, unsigned unreturned, unsigned nbufs) {
  if (pending == 0) return 0;
  unsigned batch = nbufs / 2 ? nbufs / 2 : 1;
  return pending >= batch || unreturned >= nbufs;
}

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
