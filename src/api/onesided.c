/* SPDX-License-Identifier: Apache-2.0 */
/* The one-sided entry points (docs/ONE-SIDED.md): window registration (collective: the
 * one-sided channel's handles and the windows' sizes go round through the bootstrap), puts
 * with signals and the signal waits, checked here and run by the enqueue layer's onesided.c. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "api.h"
#include "bootstrap.h"
#include "check.h"
#include "device.h"
#include "enqueue.h"
#include "kernels.h"
#include "log.h"
#include "onesided.h"

/* The comm takes one-sided calls: it takes operations, is set up, and no group is open. */
static papcclResult_t takesCalls(struct papComm* comm, const char* fn) {
  PAP_CHECK(papCommTakesCalls(comm, fn));
  if (comm->tstate == NULL || comm->bs == NULL) {
    PAP_WARN("%s: communicator has no transport (its init failed)", fn);
    return papcclInvalidUsage;
  }
  if (papGroupDepth() > 0) {
    PAP_WARN("%s: one-sided calls are not taken inside a group (call it after papcclGroupEnd)", fn);
    return papcclInvalidUsage;
  }
  /* Operations queued earlier on a non-blocking comm come first. */
  if (!comm->blocking) papCommWaitPendingJobs(comm);
  return papcclSuccess;
}

/* Device or managed memory is refused (host buffers only, docs/ONE-SIDED.md). */
static papcclResult_t hostOnly(struct papComm* comm, const char* fn, const char* what,
                               const void* buf, size_t bytes) {
  if (buf == NULL || bytes == 0 || !papDeviceAvailable()) return papcclSuccess;
  struct papOpDesc d;
  memset(&d, 0, sizeof(d));
  d.comm = comm;
  d.call.sendbuff = buf;
  d.sendBytes = bytes;
  if (!papDeviceOpNeedsStream(&d)) return papcclSuccess;
  PAP_WARN("%s: %s %p is device memory: papccl's one-sided calls take host buffers only", fn, what,
           buf);
  return papcclInvalidUsage;
}

/* The first registration opens the channel on every rank (collective). */
static papcclResult_t channelUp(struct papComm* comm) {
  if (papOneSidedReady(comm)) return papcclSuccess;
  papcclResult_t res;
  void* mine = NULL;
  unsigned char* all = NULL;
  size_t hb = 0;
  if (comm->onesided) papOneSidedFree(comm); /* a failed first try */
  res = papOneSidedOpen(comm, &mine, &hb);
  if (res == papcclSuccess) res = papCalloc(&all, (size_t)comm->nranks * hb);
  if (res == papcclSuccess) {
    memcpy(all + (size_t)comm->rank * hb, mine, hb);
    res = papBootstrapAllGather(comm->bs, all, hb);
  }
  if (res == papcclSuccess) res = papOneSidedConnect(comm, all, hb);
  if (res == papcclSuccess) res = papBootstrapBarrier(comm->bs);
  if (res == papcclSuccess) res = papOneSidedStart(comm);
  /* Every rank's channel is ready before any rank puts. */
  if (res == papcclSuccess) res = papBootstrapBarrier(comm->bs);
  free(mine);
  free(all);
  return res;
}

struct winInfo {
  uint64_t id, size;
};

/* Every rank's id and size of the new window: the ids must agree. */
static papcclResult_t exchangeSizes(struct papComm* comm, const char* fn, struct papcclWindow* w) {
  struct winInfo* info = NULL;
  PAP_CHECK(papCalloc(&info, (size_t)comm->nranks));
  info[comm->rank].id = w->id;
  info[comm->rank].size = w->size;
  papcclResult_t res = papBootstrapAllGather(comm->bs, info, sizeof(*info));
  for (int r = 0; r < comm->nranks && res == papcclSuccess; r++) {
    w->sizes[r] = info[r].size;
    if (info[r].id == info[comm->rank].id) continue;
    PAP_WARN(
        "%s: rank %d registers its window number %llu while this rank registers number "
        "%llu: every rank registers and deregisters windows in the same order",
        fn, r, (unsigned long long)info[r].id, (unsigned long long)info[comm->rank].id);
    res = papcclInvalidUsage;
  }
  free(info);
  return res;
}

PAPCCL_API papcclResult_t papcclCommWindowRegister(papcclComm_t comm, void* buff, size_t size,
                                                   papcclWindow_t* win, int winFlags) {
  const char* fn = "papcclCommWindowRegister";
  if (win != NULL) *win = NULL;
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = takesCalls(comm, fn);
  struct papcclWindow* w = NULL;
  if (res == papcclSuccess && win == NULL) {
    PAP_WARN("%s: win is NULL", fn);
    res = papcclInvalidArgument;
  } else if (res == papcclSuccess && buff == NULL && size > 0) {
    PAP_WARN("%s: buff is NULL with size %zu", fn, size);
    res = papcclInvalidArgument;
  } else if (res == papcclSuccess && winFlags != PAPCCL_WIN_DEFAULT) {
    PAP_WARN(
        "%s: winFlags %#x are not supported (papccl takes PAPCCL_WIN_DEFAULT, 0: no "
        "symmetric or GIN windows)",
        fn, (unsigned)winFlags);
    res = papcclInvalidUsage;
  }
  if (res == papcclSuccess) res = hostOnly(comm, fn, "buff", buff, size);
  if (res == papcclSuccess) res = channelUp(comm);
  if (res == papcclSuccess) res = papCalloc(&w, 1);
  if (res == papcclSuccess) res = papCalloc(&w->sizes, (size_t)comm->nranks);
  if (res == papcclSuccess) {
    w->magic = PAP_WIN_MAGIC;
    w->comm = comm;
    w->base = (char*)buff;
    w->size = size;
    /* In the list before the exchange: a peer that is past it may put at once. */
    papOneSidedAddWindow(comm, w);
    res = exchangeSizes(comm, fn, w);
    if (res != papcclSuccess) papOneSidedDropWindow(comm, w);
  } else if (w != NULL) {
    free(w->sizes);
    free(w);
  }
  if (res == papcclSuccess) *win = w;
  papCommLeave(comm);
  return res;
}

/* win is a live window of comm; says what it is otherwise. */
static papcclResult_t checkWindow(struct papComm* comm, const char* fn, const char* what,
                                  const struct papcclWindow* win) {
  if (win == NULL) {
    PAP_WARN("%s: %s is NULL", fn, what);
    return papcclInvalidArgument;
  }
  if (papOneSidedHasWindow(comm, win)) return papcclSuccess;
  PAP_WARN("%s: %s %p is not a window of this communicator (another comm's, or deregistered)", fn,
           what, (const void*)win);
  return papcclInvalidArgument;
}

PAPCCL_API papcclResult_t papcclCommWindowDeregister(papcclComm_t comm, papcclWindow_t win) {
  const char* fn = "papcclCommWindowDeregister";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = takesCalls(comm, fn);
  if (res == papcclSuccess) res = checkWindow(comm, fn, "win", win);
  if (res == papcclSuccess) res = papOneSidedRemoveWindow(comm, win);
  papCommLeave(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclWinGetUserPtr(papcclComm_t comm, papcclWindow_t win, void** ptr) {
  const char* fn = "papcclWinGetUserPtr";
  if (ptr != NULL) *ptr = NULL;
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = checkWindow(comm, fn, "win", win);
  if (res == papcclSuccess && ptr == NULL) {
    PAP_WARN("%s: ptr is NULL", fn);
    res = papcclInvalidArgument;
  }
  if (res == papcclSuccess) *ptr = win->base;
  papCommLeave(comm);
  return res;
}

/* What every signalling call checks: peer, sigIdx, ctx, flags. */
static papcclResult_t checkSignal(struct papComm* comm, const char* fn, int peer, int sigIdx,
                                  int ctx, unsigned flags) {
  if (peer < 0 || peer >= comm->nranks) {
    PAP_WARN("%s: peer %d is not a rank of this communicator (0..%d)", fn, peer, comm->nranks - 1);
    return papcclInvalidArgument;
  }
  if (sigIdx < 0 || sigIdx >= PAPCCL_MAX_SIGNALS) {
    PAP_WARN("%s: sigIdx %d is out of range (0..%d)", fn, sigIdx, PAPCCL_MAX_SIGNALS - 1);
    return papcclInvalidArgument;
  }
  if (ctx != 0) {
    PAP_WARN("%s: ctx %d is not supported (papccl has one context: 0)", fn, ctx);
    return papcclInvalidUsage;
  }
  if (flags != 0) {
    PAP_WARN("%s: flags %#x are not supported (0 only)", fn, flags);
    return papcclInvalidUsage;
  }
  return papcclSuccess;
}

/* The put's data fits peer's part of win. */
static papcclResult_t checkPut(struct papComm* comm, const char* fn, const void* buf, size_t count,
                               papcclDataType_t dtype, int peer, const struct papcclWindow* win,
                               size_t offset, size_t* bytesOut) {
  PAP_CHECK(papArgCheckType(fn, dtype));
  PAP_CHECK(papArgCheckCount(fn, count, dtype, 1));
  PAP_CHECK(papArgCheckBuf(fn, "localbuff", buf, count, dtype, 1));
  PAP_CHECK(checkWindow(comm, fn, "peerWin", win));
  size_t bytes = count * papKernTypeSize(dtype);
  uint64_t cap = win->sizes[peer];
  if (offset > cap || bytes > cap - offset) {
    PAP_WARN(
        "%s: %zu bytes at byte offset %zu do not fit peer %d's part of the window (%llu "
        "bytes)",
        fn, bytes, offset, peer, (unsigned long long)cap);
    return papcclInvalidArgument;
  }
  *bytesOut = bytes;
  return hostOnly(comm, fn, "localbuff", buf, bytes);
}

PAPCCL_API papcclResult_t papcclPutSignal(const void* localbuff, size_t count,
                                          papcclDataType_t datatype, int peer,
                                          papcclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                                          int ctx, unsigned int flags, papcclComm_t comm,
                                          papcclStream_t stream) {
  const char* fn = "papcclPutSignal";
  (void)stream; /* host buffers: in the caller's order, as host-buffer collectives */
  PAP_CHECK(papCommEnter(comm, fn));
  size_t bytes = 0;
  papcclResult_t res = takesCalls(comm, fn);
  if (res == papcclSuccess) res = checkSignal(comm, fn, peer, sigIdx, ctx, flags);
  if (res == papcclSuccess)
    res = checkPut(comm, fn, localbuff, count, datatype, peer, peerWin, peerWinOffset, &bytes);
  if (res == papcclSuccess)
    res = papOneSidedPut(comm, localbuff, bytes, peer, peerWin, peerWinOffset, sigIdx);
  papCommLeave(comm);
  return res;
}

/* Signals need the channel, which the first window registration opens. */
static papcclResult_t channelOpen(struct papComm* comm, const char* fn) {
  if (papOneSidedReady(comm)) return papcclSuccess;
  PAP_WARN(
      "%s: no window was registered on this communicator yet: register one "
      "(papcclCommWindowRegister, collective) before signalling",
      fn);
  return papcclInvalidUsage;
}

PAPCCL_API papcclResult_t papcclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
                                       papcclComm_t comm, papcclStream_t stream) {
  const char* fn = "papcclSignal";
  (void)stream;
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = takesCalls(comm, fn);
  if (res == papcclSuccess) res = checkSignal(comm, fn, peer, sigIdx, ctx, flags);
  if (res == papcclSuccess) res = channelOpen(comm, fn);
  if (res == papcclSuccess) res = papOneSidedPut(comm, NULL, 0, peer, NULL, 0, sigIdx);
  papCommLeave(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclWaitSignal(int nDesc, const papcclWaitSignalDesc_t* signalDescs,
                                           papcclComm_t comm, papcclStream_t stream) {
  const char* fn = "papcclWaitSignal";
  (void)stream;
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = takesCalls(comm, fn);
  if (res == papcclSuccess && (nDesc < 0 || (nDesc > 0 && signalDescs == NULL))) {
    PAP_WARN("%s: nDesc %d with signalDescs %p", fn, nDesc, (const void*)signalDescs);
    res = papcclInvalidArgument;
  }
  for (int i = 0; i < nDesc && res == papcclSuccess; i++) {
    const papcclWaitSignalDesc_t* d = &signalDescs[i];
    res = checkSignal(comm, fn, d->peer, d->sigIdx, d->ctx, 0);
    if (res == papcclSuccess && d->opCnt < 0) {
      PAP_WARN("%s: signalDescs[%d].opCnt is %d (negative)", fn, i, d->opCnt);
      res = papcclInvalidArgument;
    }
  }
  if (res == papcclSuccess && nDesc > 0) res = channelOpen(comm, fn);
  if (res == papcclSuccess && nDesc > 0) res = papOneSidedWait(comm, nDesc, signalDescs);
  papCommLeave(comm);
  return res;
}
