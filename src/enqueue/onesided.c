/* SPDX-License-Identifier: Apache-2.0 */
/* One-sided communication over a comm's one-sided channel (docs/ONE-SIDED.md): a second
 * instance of the comm's backend with connections of its own, so that puts never meet the
 * collectives' strictly ordered messages. Each put is a header message and, unless it is a
 * signal alone, a data message; the target's channel thread (papccl-os-<rank>) sleeps in the
 * backend's wait, lands the data in the window and then counts the signal. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "enqueue.h"
#include "futex.h"
#include "log.h"
#include "onesided.h"
#include "transport.h"
#include "wait.h"

enum {
  OS_PUT = 1,
  OS_FENCE = 2
};

/* The header of every one-sided message: 32 bytes on the wire (same host, same ABI: shm; and
 * UCX between hosts of one build). */
struct osHdr {
  uint32_t kind; /* OS_PUT or OS_FENCE */
  uint32_t sigIdx;
  uint64_t winId;
  uint64_t offset;
  uint64_t bytes;
};

/* What arrives from one peer: its next header, or the data of the header before. */
struct osIn {
  struct osHdr hdr;
  struct papReq* req; /* the posted receive, or NULL */
  int data; /* req receives the data of hdr */
  uint64_t seq; /* messages taken from this peer */
  uint64_t fences;
};

struct papOneSided {
  pthread_mutex_t callLock; /* one put or deregistration at a time per comm (their messages
                             * go out in order) */
  pthread_mutex_t lock; /* the state below, between the calls and the thread */
  const struct papTransportOps* tops;
  void* tstate;
  struct papConn** conns; /* [nranks], owned by the backend */
  unsigned char key[16];
  uint64_t* sendSeq; /* [nranks] */
  struct osIn* in; /* [nranks] */
  uint64_t* sig; /* [nranks * PAPCCL_MAX_SIGNALS] signals arrived and not yet taken */
  struct papcclWindow* wins;
  uint64_t nextWinId;
  uint64_t fenceTarget;
  papcclResult_t err; /* the first error the thread met (it stops landing then) */
  pthread_t thread;
  int threadStarted, stop, ready;
};

static uint64_t osTag(uint64_t seq, int part) {
  return ((seq & 0x7fffffffull) << 32) | (uint64_t)part;
}

static void discardSink(void* arg, size_t off, const void* src, size_t bytes) {
  (void)arg, (void)off, (void)src, (void)bytes;
}

static struct papcclWindow* findWindow(struct papOneSided* st, uint64_t id) {
  for (struct papcclWindow* w = st->wins; w; w = w->next)
    if (w->id == id) return w;
  return NULL;
}

/* Where the data of a put header lands (NULL: nowhere, the header is bad; logged). */
static char* putTarget(struct papComm* comm, struct papOneSided* st, int peer,
                       const struct osHdr* h) {
  struct papcclWindow* w = findWindow(st, h->winId);
  if (w == NULL || h->offset > w->size || h->bytes > w->size - h->offset ||
      h->sigIdx >= PAPCCL_MAX_SIGNALS) {
    PAP_WARN(
        "one-sided: put from peer %d does not fit this rank's window %llu (offset %llu, "
        "%llu bytes, window of %zu bytes, signal %u)",
        peer, (unsigned long long)h->winId, (unsigned long long)h->offset,
        (unsigned long long)h->bytes, w ? w->size : (size_t)0, h->sigIdx);
    (void)comm;
    return NULL;
  }
  return w->base + h->offset;
}

/* A header or a put's data arrived from peer: count what is complete, post what comes next. */
static papcclResult_t landOne(struct papComm* comm, struct papOneSided* st, int peer) {
  struct osIn* in = &st->in[peer];
  struct osHdr* h = &in->hdr;
  if (!in->data && h->kind == OS_FENCE) {
    in->fences++;
    in->seq++;
    return papcclSuccess;
  }
  if (!in->data && h->kind != OS_PUT) {
    PAP_WARN("one-sided: message of unknown kind %u from peer %d", h->kind, peer);
    return papcclInternalError;
  }
  if (!in->data && h->bytes > 0) {
    char* dst = putTarget(comm, st, peer, h);
    struct papRecvSink sink = {discardSink, NULL};
    in->data = 1;
    if (dst == NULL) st->err = papcclInternalError; /* land nothing, keep the channel going */
    return st->tops->msg->irecv(st->conns[peer], dst, h->bytes, PAP_MEM_HOST, osTag(in->seq, 1),
                                dst ? NULL : &sink, &in->req);
  }
  /* Data before signal: the data of this put is in the window (or it had none). */
  if (h->sigIdx < PAPCCL_MAX_SIGNALS && (!in->data || st->err == papcclSuccess))
    st->sig[(size_t)peer * PAPCCL_MAX_SIGNALS + h->sigIdx]++;
  in->data = 0;
  in->seq++;
  return papcclSuccess;
}

/* Lands what has arrived from every peer (lock held); *landedOut counts the messages. */
static papcclResult_t drain(struct papComm* comm, struct papOneSided* st, int* landedOut) {
  *landedOut = 0;
  PAP_CHECK(st->tops->msg->progress(st->tstate));
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank) continue;
    struct osIn* in = &st->in[p];
    for (int n = 0; n < 64; n++) {
      if (in->req == NULL && !in->data) {
        PAP_CHECK(st->tops->msg->irecv(st->conns[p], &in->hdr, sizeof(in->hdr), PAP_MEM_HOST,
                                       osTag(in->seq, 0), NULL, &in->req));
        if (in->req == NULL) break; /* no request free now */
      }
      if (in->req == NULL) break;
      int done = 0;
      PAP_CHECK(st->tops->msg->test(in->req, &done, NULL));
      if (!done) break;
      in->req = NULL;
      PAP_CHECK(landOne(comm, st, p));
      (*landedOut)++;
    }
  }
  return papcclSuccess;
}

/* The channel thread: sleeps in the backend's wait, lands what arrives, wakes the waiters. */
static void* osMain(void* arg) {
  struct papComm* comm = (struct papComm*)arg;
  struct papOneSided* st = comm->onesided;
  char name[16];
  snprintf(name, sizeof(name), "papccl-os-%d", comm->rank);
  pthread_setname_np(pthread_self(), name);
  papLogSetContext(comm->rank, comm->lastError, sizeof(comm->lastError));
  for (;;) {
    uint32_t tok = st->tops->wake->waitToken(st->tstate);
    int landed = 0;
    pthread_mutex_lock(&st->lock);
    if (st->stop) {
      pthread_mutex_unlock(&st->lock);
      break;
    }
    if (st->err == papcclSuccess && !papCommAborted(comm)) {
      papcclResult_t res = drain(comm, st, &landed);
      if (res != papcclSuccess) st->err = res;
    }
    pthread_mutex_unlock(&st->lock);
    if (landed)
      st->tops->wake->wake(st->tstate); /* a caller may sleep in WaitSignal */
    else
      st->tops->wake->wait(st->tstate, tok, 1000000000ll);
  }
  return NULL;
}

papcclResult_t papOneSidedOpen(struct papComm* comm, void** handleOut, size_t* handleBytesOut) {
  struct papOneSided* st = NULL;
  int n = comm->nranks;
  *handleOut = NULL;
  PAP_CHECK(papCalloc(&st, 1));
  comm->onesided = st;
  pthread_mutex_init(&st->callLock, NULL);
  pthread_mutex_init(&st->lock, NULL);
  st->tops = comm->tops;
  PAP_CHECK(papCalloc(&st->conns, (size_t)n));
  PAP_CHECK(papCalloc(&st->sendSeq, (size_t)n));
  PAP_CHECK(papCalloc(&st->in, (size_t)n));
  PAP_CHECK(papCalloc(&st->sig, (size_t)n * PAPCCL_MAX_SIGNALS));
  /* Its own key: the backend's names (shm segments) differ from the comm's. */
  memcpy(st->key, comm->key, sizeof(st->key));
  st->key[15] ^= 0x05;
  st->key[14] ^= 0x1d;
  struct papTransportCtx ctx = {
      .rank = comm->rank,
      .nranks = n,
      .key = st->key,
      .hostIds = comm->hostIds,
      .pids = comm->pids,
      .abortFlag = (const volatile int*)&comm->abortFlag,
      .spinNs = comm->oversubscribed ? 0 : (int64_t)comm->spinNs,
  };
  PAP_CHECK(st->tops->init(&ctx, &st->tstate));
  size_t hb = st->tops->caps.handleBytes ? st->tops->caps.handleBytes : PAP_TRANSPORT_HANDLE_BYTES;
  unsigned char* h = NULL;
  PAP_CHECK(papCalloc(&h, hb));
  papcclResult_t res = st->tops->listen(st->tstate, h);
  if (res != papcclSuccess) {
    free(h);
    return res;
  }
  *handleOut = h;
  *handleBytesOut = hb;
  return papcclSuccess;
}

papcclResult_t papOneSidedConnect(struct papComm* comm, const void* handles, size_t hb) {
  struct papOneSided* st = comm->onesided;
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank) continue;
    struct papWait w;
    papWaitInit(&w, "one-sided channel: connecting to a peer",
                (const volatile int*)&comm->abortFlag, 1, comm->spinNs, 100000);
    while (st->conns[p] == NULL) {
      PAP_CHECK(
          st->tops->connect(st->tstate, p, (const char*)handles + (size_t)p * hb, &st->conns[p]));
      if (st->conns[p] != NULL) break;
      uint64_t now = papNowNs();
      PAP_CHECK(papWaitCheck(&w, now));
      if (!papWaitSpin(&w, now)) papWaitSleep(&w);
    }
  }
  return papcclSuccess;
}

papcclResult_t papOneSidedStart(struct papComm* comm) {
  struct papOneSided* st = comm->onesided;
  PAP_CHECK(st->tops->ready(st->tstate));
  int err = pthread_create(&st->thread, NULL, osMain, comm);
  if (err != 0) {
    PAP_WARN("one-sided: cannot start the channel thread: %s", strerror(err));
    return papcclSystemError;
  }
  st->threadStarted = 1;
  st->ready = 1;
  return papcclSuccess;
}

int papOneSidedReady(const struct papComm* comm) {
  return comm->onesided != NULL && comm->onesided->ready;
}

static void freeWindow(struct papcclWindow* w) {
  w->magic = 0;
  free(w->sizes);
  free(w);
}

void papOneSidedFree(struct papComm* comm) {
  struct papOneSided* st = comm->onesided;
  if (st == NULL) return;
  if (st->threadStarted) {
    pthread_mutex_lock(&st->lock);
    st->stop = 1;
    pthread_mutex_unlock(&st->lock);
    st->tops->wake->wake(st->tstate);
    pthread_join(st->thread, NULL);
  }
  if (st->tstate) {
    if (!papCommAborted(comm) && st->err == papcclSuccess &&
        atomic_load_explicit(&comm->asyncError, memory_order_acquire) == papcclSuccess)
      st->tops->live->depart(st->tstate);
    st->tops->finalize(st->tstate); /* closes the connections too */
  }
  while (st->wins) {
    struct papcclWindow* w = st->wins;
    st->wins = w->next;
    freeWindow(w);
  }
  free(st->conns);
  free(st->sendSeq);
  free(st->in);
  free(st->sig);
  pthread_mutex_destroy(&st->lock);
  pthread_mutex_destroy(&st->callLock);
  free(st);
  comm->onesided = NULL;
}

void papOneSidedAddWindow(struct papComm* comm, struct papcclWindow* win) {
  struct papOneSided* st = comm->onesided;
  pthread_mutex_lock(&st->lock);
  win->id = st->nextWinId++;
  win->next = st->wins;
  st->wins = win;
  pthread_mutex_unlock(&st->lock);
}

int papOneSidedHasWindow(struct papComm* comm, const struct papcclWindow* win) {
  struct papOneSided* st = comm->onesided;
  if (st == NULL) return 0;
  pthread_mutex_lock(&st->lock);
  int found = 0;
  for (struct papcclWindow* w = st->wins; w && !found; w = w->next)
    found = w == win;
  pthread_mutex_unlock(&st->lock);
  return found;
}

/* ---- Waits of the calling thread ------------------------------------------------------ */

/* What a caller waits for, under the lock: 1 when it is there. */
typedef int (*osDoneFn)(struct papOneSided* st, void* arg);

struct osSends {
  struct papReq* req[2];
  int n;
};

static int sendsDone(struct papOneSided* st, void* arg) {
  struct osSends* s = (struct osSends*)arg;
  for (int i = 0; i < s->n; i++) {
    if (s->req[i] == NULL) continue;
    int done = 0;
    if (st->tops->msg->test(s->req[i], &done, NULL) != papcclSuccess) return -1;
    if (done) s->req[i] = NULL;
  }
  for (int i = 0; i < s->n; i++)
    if (s->req[i] != NULL) return 0;
  return 1;
}

/* The comm's backend and the channel: a peer gone without leaving fails the call. */
static papcclResult_t osHealth(struct papComm* comm, struct papOneSided* st) {
  PAP_CHECK(papCommCheckDeadPeer(comm));
  return papCommDeadPeerError(comm, st->tops->live->deadPeer(st->tstate));
}

/* One look, under the lock: progress, land what came, ask done. */
static papcclResult_t osLook(struct papComm* comm, struct papOneSided* st, osDoneFn done, void* arg,
                             int* doneOut) {
  int landed = 0;
  pthread_mutex_lock(&st->lock);
  papcclResult_t res = st->err;
  if (res == papcclSuccess) res = drain(comm, st, &landed);
  if (res == papcclSuccess) {
    *doneOut = done(st, arg);
    if (*doneOut < 0) res = papcclSystemError;
  } else if (st->err == papcclSuccess) {
    st->err = res;
  }
  pthread_mutex_unlock(&st->lock);
  if (res == papcclSuccess) return res;
  /* A send the backend failed without a WARN: its peer is gone; the health check names it. */
  PAP_CHECK(osHealth(comm, st));
  PAP_WARN("one-sided: rank %d's channel failed (%s): see the WARN above", comm->rank,
           papcclGetErrorString(res));
  return res;
}

/* Waits, by the rules of the one wait (bounded, sleeping on the channel's doorbell, peers'
 * health checked), until done says so. */
static papcclResult_t osWait(struct papComm* comm, osDoneFn done, void* arg, const char* what) {
  struct papOneSided* st = comm->onesided;
  struct papWait w;
  int ok = 0;
  papWaitInit(&w, what, (const volatile int*)&comm->abortFlag, 1, comm->spinNs, 0);
  w.yield = comm->oversubscribed;
  for (;;) {
    PAP_CHECK(osLook(comm, st, done, arg, &ok));
    if (ok) return papcclSuccess;
    uint64_t now = papNowNs();
    if (papWaitHealthDue(&w, now)) PAP_CHECK(osHealth(comm, st));
    PAP_CHECK(papWaitCheck(&w, now));
    if (papWaitSpin(&w, now)) continue;
    uint32_t tok = st->tops->wake->waitToken(st->tstate);
    PAP_CHECK(osLook(comm, st, done, arg, &ok));
    if (ok) return papcclSuccess;
    st->tops->wake->wait(st->tstate, tok, papWaitSlice(&w, now, 100000000));
    w.spinUntil = papNowNs() + w.spinNs / 4;
  }
}

/* Posts one message to peer (retried while the backend has no request free). */
static papcclResult_t osSend(struct papComm* comm, const void* buf, size_t bytes, int peer,
                             uint64_t tag, struct papReq** reqOut) {
  struct papOneSided* st = comm->onesided;
  struct papWait w;
  papWaitInit(&w, "one-sided: a free send request", (const volatile int*)&comm->abortFlag, 1,
              comm->spinNs, 100000);
  for (;;) {
    pthread_mutex_lock(&st->lock);
    papcclResult_t res =
        st->tops->msg->isend(st->conns[peer], buf, bytes, PAP_MEM_HOST, tag, reqOut);
    pthread_mutex_unlock(&st->lock);
    if (res != papcclSuccess || *reqOut != NULL) return res;
    uint64_t now = papNowNs();
    PAP_CHECK(papWaitCheck(&w, now));
    if (!papWaitSpin(&w, now)) papWaitSleep(&w);
  }
}

/* One header (and data) to peer; returns once both left src (the caller holds callLock). */
static papcclResult_t osPost(struct papComm* comm, const struct osHdr* h, const void* src,
                             int peer) {
  struct papOneSided* st = comm->onesided;
  struct osSends s = {{NULL, NULL}, 0};
  uint64_t seq = st->sendSeq[peer]++;
  PAP_CHECK(osSend(comm, h, sizeof(*h), peer, osTag(seq, 0), &s.req[s.n++]));
  if (h->kind == OS_PUT && h->bytes > 0)
    PAP_CHECK(osSend(comm, src, h->bytes, peer, osTag(seq, 1), &s.req[s.n++]));
  char what[64];
  snprintf(what, sizeof(what), "one-sided: rank %d's put to peer %d", comm->rank, peer);
  return osWait(comm, sendsDone, &s, what);
}

papcclResult_t papOneSidedPut(struct papComm* comm, const void* src, size_t bytes, int peer,
                              const struct papcclWindow* win, size_t offset, int sigIdx) {
  struct papOneSided* st = comm->onesided;
  struct osHdr h = {OS_PUT, (uint32_t)sigIdx, win ? win->id : 0, offset, bytes};
  papcclResult_t res = papcclSuccess;
  pthread_mutex_lock(&st->callLock);
  if (peer == comm->rank) { /* to itself: a copy, then the signal */
    pthread_mutex_lock(&st->lock);
    if (bytes > 0) memmove(win->base + offset, src, bytes);
    st->sig[(size_t)peer * PAPCCL_MAX_SIGNALS + (size_t)sigIdx]++;
    pthread_mutex_unlock(&st->lock);
  } else {
    res = osPost(comm, &h, src, peer);
  }
  pthread_mutex_unlock(&st->callLock);
  return res;
}

struct osWaitArg {
  int nDesc;
  const papcclWaitSignalDesc_t* d;
};

/* Whether every descriptor's count is there (the counts of equal (peer, sigIdx) add up). */
static int signalsDone(struct papOneSided* st, void* arg) {
  struct osWaitArg* a = (struct osWaitArg*)arg;
  for (int i = 0; i < a->nDesc; i++) {
    uint64_t need = 0;
    for (int j = 0; j < a->nDesc; j++)
      if (a->d[j].peer == a->d[i].peer && a->d[j].sigIdx == a->d[i].sigIdx)
        need += (uint64_t)a->d[j].opCnt;
    if (st->sig[(size_t)a->d[i].peer * PAPCCL_MAX_SIGNALS + a->d[i].sigIdx] < need) return 0;
  }
  /* All there: take them. */
  for (int i = 0; i < a->nDesc; i++)
    st->sig[(size_t)a->d[i].peer * PAPCCL_MAX_SIGNALS + a->d[i].sigIdx] -= (uint64_t)a->d[i].opCnt;
  return 1;
}

papcclResult_t papOneSidedWait(struct papComm* comm, int nDesc, const papcclWaitSignalDesc_t* d) {
  struct osWaitArg a = {nDesc, d};
  char what[80];
  snprintf(what, sizeof(what),
           "one-sided: rank %d waits for %d signal descriptor(s) (first: peer %d)", comm->rank,
           nDesc, nDesc > 0 ? d[0].peer : -1);
  /* No callLock: a wait touches only the counts (under lock), so a put from another thread
   * of this rank is not held up behind it. */
  return osWait(comm, signalsDone, &a, what);
}

static int fencesDone(struct papOneSided* st, void* arg) {
  const struct papComm* comm = (const struct papComm*)arg;
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank && st->in[p].fences < st->fenceTarget) return 0;
  return 1;
}

papcclResult_t papOneSidedRemoveWindow(struct papComm* comm, struct papcclWindow* win) {
  struct papOneSided* st = comm->onesided;
  papcclResult_t res = papcclSuccess;
  struct osHdr h = {OS_FENCE, 0, win->id, 0, 0};
  pthread_mutex_lock(&st->callLock);
  st->fenceTarget++;
  for (int p = 0; p < comm->nranks && res == papcclSuccess; p++)
    if (p != comm->rank) res = osPost(comm, &h, NULL, p);
  if (res == papcclSuccess)
    res = osWait(comm, fencesDone, comm, "one-sided: deregistration waits for every rank's puts");
  papOneSidedDropWindow(comm, win);
  pthread_mutex_unlock(&st->callLock);
  return res;
}

void papOneSidedDropWindow(struct papComm* comm, struct papcclWindow* win) {
  struct papOneSided* st = comm->onesided;
  pthread_mutex_lock(&st->lock);
  for (struct papcclWindow** pw = &st->wins; *pw; pw = &(*pw)->next) {
    if (*pw != win) continue;
    *pw = win->next;
    freeWindow(win);
    break;
  }
  pthread_mutex_unlock(&st->lock);
}
