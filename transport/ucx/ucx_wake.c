/* SPDX-License-Identifier: Apache-2.0 */
/* The ucx backend's progress, sleep and wake-up (wake) and liveness (live): the worker's
 * passes, the one poller of its event fd, the doorbell (transport/doorbell.h), wake-ups as
 * active messages, endpoint failures and departures. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "log.h"
#include "ucx/ucx_int.h"

/* The thread that holds the poller role of a worker (papUcxWait), if this thread does. */
static __thread struct ucxState* pollerOf;

/* One pass of the worker by any thread. The poller sleeps on the worker's event fd, which
 * signals only new events (edge-triggered): when another thread's pass consumed some, what
 * that pass left behind would go unnoticed until the poller's timeout. So a pass that did
 * work while someone else polls wakes the poller, which drains and re-arms. */
unsigned papUcxProgressOnce(struct ucxState* st) {
  pthread_mutex_lock(&st->wlock);
  unsigned n = ucp_worker_progress(st->worker);
  if (st->outHead) papUcxFlushOut(st);
  pthread_mutex_unlock(&st->wlock);
  if (n != 0 && pollerOf != st && atomic_load_explicit(&st->poller, memory_order_seq_cst))
    papDoorbellKick(&st->bell);
  return n;
}

static ucs_status_t amWake(void* arg, const void* header, size_t headerLen, void* data, size_t len,
                           const ucp_am_recv_param_t* param) {
  (void)header, (void)headerLen, (void)data, (void)len, (void)param;
  papDoorbellRing(&((struct ucxState*)arg)->bell);
  return UCS_OK;
}

/* Drives the worker until it has nothing more to do; returns how many events it handled. */
static unsigned ucxDrain(struct ucxState* st) {
  unsigned total = 0, n;
  while ((n = papUcxProgressOnce(st)) != 0)
    total += n;
  return total;
}

static int ucxPeerAlive(void* state, int peer) {
  struct ucxState* st = (struct ucxState*)state;
  if (peer < 0 || peer >= st->base.ctx.nranks || st->conns[peer] == NULL) return 1;
  return !atomic_load_explicit(&st->conns[peer]->dead, memory_order_acquire);
}

/* A peer whose endpoint failed although it did not depart: the comm is broken for every
 * rank, also one that waits on another peer. */
static int ucxDeadPeer(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  for (int p = 0; p < st->base.ctx.nranks; p++) {
    struct papConn* c = st->conns[p];
    if (p == st->base.ctx.rank || c == NULL ||
        !atomic_load_explicit(&c->dead, memory_order_acquire))
      continue;
    if (!atomic_load_explicit(&c->departed, memory_order_acquire)) return p;
  }
  return -1;
}

/* Tells every peer that this rank leaves in good order, before its endpoints close (one
 * eager message each, on the same endpoint, so it arrives before the close; bounded wait). */
static void ucxDepart(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  /* The header must outlive a send still in flight at the deadline: then it is left. */
  struct ucxHomeHdr* h = (struct ucxHomeHdr*)malloc(sizeof(*h));
  ucs_status_ptr_t* reqs = (ucs_status_ptr_t*)calloc((size_t)st->base.ctx.nranks, sizeof(*reqs));
  if (reqs == NULL || h == NULL) {
    free(reqs);
    free(h);
    return;
  }
  *h = (struct ucxHomeHdr){0, st->base.ctx.rank, 0};
  int left = 0;
  pthread_mutex_lock(&st->wlock);
  for (int p = 0; p < st->base.ctx.nranks; p++) {
    struct papConn* c = st->conns[p];
    if (p == st->base.ctx.rank || c == NULL || atomic_load_explicit(&c->dead, memory_order_acquire))
      continue;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_EAGER;
    reqs[p] = ucp_am_send_nbx(c->ep, UCX_AM_DEPART, h, sizeof(*h), NULL, 0, &prm);
  }
  uint64_t deadline = papNowNs() + 200000000ull;
  for (int p = 0; p < st->base.ctx.nranks; p++) {
    if (!UCS_PTR_IS_PTR(reqs[p])) continue;
    while (ucp_request_check_status(reqs[p]) == UCS_INPROGRESS && papNowNs() < deadline)
      ucp_worker_progress(st->worker);
    left += ucp_request_check_status(reqs[p]) == UCS_INPROGRESS;
    ucp_request_free(reqs[p]);
  }
  pthread_mutex_unlock(&st->wlock);
  free(reqs);
  if (!left) free(h);
}

static ucs_status_t amDepart(void* arg, const void* header, size_t headerLen, void* data,
                             size_t len, const ucp_am_recv_param_t* param) {
  (void)data, (void)len;
  struct ucxState* st = (struct ucxState*)arg;
  struct ucxHomeHdr h;
  if (papUcxAmHeader(header, headerLen, param, &h) != 0 || h.from < 0 ||
      h.from >= st->base.ctx.nranks || st->conns == NULL || st->conns[h.from] == NULL)
    return UCS_OK;
  atomic_store_explicit(&st->conns[h.from]->departed, 1, memory_order_release);
  return UCS_OK;
}

static uint32_t ucxWaitToken(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  return papDoorbellToken(&st->bell);
}

/* Sleeps until the worker has events, wake() or notify() ring, or the timeout. Anything the
 * worker does before sleeping (a message in, a request done) counts as a change: the
 * caller looks again first. */
void papUcxWait(void* state, uint32_t token, int64_t timeoutNs) {
  struct ucxState* st = (struct ucxState*)state;
  ucxDrain(st); /* completions ring the bell */
  if (timeoutNs <= 0 || papAborted(st->base.ctx.abortFlag)) return;
  if (papDoorbellToken(&st->bell) != token) return;
  /* One thread at a time arms the worker and sleeps on its event fd (the poller); the
   * others sleep on the eventfd only. Two threads arming and progressing one worker lose
   * its edge-triggered events: a reply that one of them consumed while the other armed
   * left the second asleep until its timeout. Whatever the poller's progress completes
   * rings the bell, which wakes the others. */
  int expected = 0;
  int isPoller = atomic_compare_exchange_strong(&st->poller, &expected, 1);
  if (isPoller) {
    pollerOf = st;
    ucxDrain(st); /* nobody else progressed it while we were not the poller */
    ucs_status_t s = UCS_ERR_BUSY;
    if (papDoorbellToken(&st->bell) == token) {
      pthread_mutex_lock(&st->wlock);
      s = ucp_worker_arm(st->worker);
      pthread_mutex_unlock(&st->wlock);
    }
    if (s != UCS_OK) {
      pollerOf = NULL;
      atomic_store_explicit(&st->poller, 0, memory_order_seq_cst);
      ucxDrain(st); /* UCS_ERR_BUSY: events are pending; go and look */
      return;
    }
  }
  struct pollfd fds[2] = {{st->bell.fd, POLLIN, 0}, {st->efd, POLLIN, 0}};
  /* To the ns: a sleep cut where a predicted event's margin starts (papWaitSlice) must end
   * there, not at the next whole ms. */
  struct timespec ts = {(time_t)(timeoutNs / 1000000000ll), (long)(timeoutNs % 1000000000ll)};
  papDoorbellSleepEnter(&st->bell);
  /* A thread that sleeps on the eventfd alone needs a poller behind it: if the poller left
   * meanwhile (it rings the sleepers it counts as it leaves; seq_cst on both sides, so one
   * of us sees the other), do not sleep: come back and take the role. */
  int covered = isPoller || atomic_load_explicit(&st->poller, memory_order_seq_cst);
  if (covered && papDoorbellUnchanged(&st->bell, token)) ppoll(fds, isPoller ? 2 : 1, &ts, NULL);
  if (isPoller) {
    pollerOf = NULL;
    atomic_store_explicit(&st->poller, 0, memory_order_seq_cst);
    ucxDrain(st);
    /* Events that arrive from now on have no poller: hand the role to a sleeper. */
    if (papDoorbellSleepers(&st->bell) > 1) papDoorbellRing(&st->bell);
  }
  papDoorbellSleepLeave(&st->bell); /* the last sleeper resets the eventfd */
  if (!isPoller) ucxDrain(st);
}

static void ucxWake(void* state) {
  papDoorbellWake(&((struct ucxState*)state)->bell);
}

static void ucxNotify(void* state, int peer) {
  struct ucxState* st = (struct ucxState*)state;
  if (peer == st->base.ctx.rank) {
    ucxWake(state);
    return;
  }
  if (peer < 0 || peer >= st->base.ctx.nranks || st->conns[peer] == NULL) return;
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  pthread_mutex_lock(&st->wlock);
  ucs_status_ptr_t req = ucp_am_send_nbx(st->conns[peer]->ep, UCX_AM_WAKE, NULL, 0, NULL, 0, &p);
  if (UCS_PTR_IS_PTR(req)) ucp_request_free(req); /* released when it completes */
  pthread_mutex_unlock(&st->wlock);
}

papcclResult_t papUcxWakeHandlers(struct ucxState* st) {
  PAP_CHECK(papUcxSetAm(st, UCX_AM_WAKE, amWake));
  return papUcxSetAm(st, UCX_AM_DEPART, amDepart);
}

const struct papWakeOps papUcxWakeOps = {
    .waitToken = ucxWaitToken,
    .wait = papUcxWait,
    .wake = ucxWake,
    .notify = ucxNotify,
};

const struct papLiveOps papUcxLiveOps = {
    .peerAlive = ucxPeerAlive,
    .deadPeer = ucxDeadPeer,
    .depart = ucxDepart,
};
