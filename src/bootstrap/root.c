/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap root service: one detached thread per rendezvous collects every rank's hello
 * (validating each, dropping strangers), sends all ranks the address table, then exits. */
#include "bootstrap_state.h"

#include "alloc.h"
#include "check.h"
#include "futex.h"
#include "log.h"
#include "param.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BS_ROOT_MAX_PENDING 1024 /* beyond this, new clients wait in the kernel backlog */

/* One rendezvous served by a detached thread; the thread frees it. */
struct rootState {
  int listenFd;
  union papSockAddr addr;
  char addrStr[PAP_SOCKET_ADDR_STRLEN];
  unsigned char key[PAP_BS_KEY_BYTES]; /* the id's: every message carries it */
  unsigned char commKey[PAP_BS_KEY_BYTES]; /* handed to the ranks with the table */
  uint64_t deadlineNs;
  int64_t timeoutS;
  int strict; /* a grow's root: a participant's bad message ends the rendezvous for all */
  int refused; /* the strict root gave up: refusal holds what each participant is told */
  unsigned char refusal[PAP_BS_HDR + PAP_BOOTSTRAP_ROOT_REFUSE_BYTES];
  int nranks; /* -1 until the first valid hello */
  int joined;
  int* rankFd; /* [nranks]; -1 until that rank's hello */
  union papSockAddr* rankPeer; /* [nranks] */
  struct papBootstrapAddr* table; /* [nranks] */
  struct papBsHelloConn* pending; /* [BS_ROOT_MAX_PENDING] */
  int nPending;
  struct pollfd* pfds; /* [1 + BS_ROOT_MAX_PENDING + nranks] */
  int* pfdRank; /* rank behind each pfds slot past the pending ones */
};

static int activeRoots; /* atomic; root threads alive */

int papBootstrapActiveRoots(void) {
  return __atomic_load_n(&activeRoots, __ATOMIC_ACQUIRE);
}

/* Pending connection i spoke with the id's key (a participant, not a stranger). */
static int rootKeyed(const struct rootState* st, int i) {
  return st->pending[i].got >= PAP_BS_HDR && keyEqual(st->pending[i].buf + BS_HDR_KEY, st->key);
}

static void rootFree(struct rootState* st) {
  char str[PAP_SOCKET_ADDR_STRLEN];
  char why[PAP_BS_WHY_LEN];
  for (int i = 0; i < st->nPending; i++) {
    /* One last read, so that the WARN names what was wrong with it if anything was. */
    int h = papBootstrapHelloProgress(&st->pending[i], st->key, PAP_BOOTSTRAP_MSG_ROOT_HELLO,
                                      PAP_BOOTSTRAP_ROOT_HELLO_BYTES, why, sizeof(why));
    if (st->refused && rootKeyed(st, i)) { /* a participant late to a refused grow: told so */
      (void)!send(st->pending[i].fd, st->refusal, sizeof(st->refusal), MSG_DONTWAIT | MSG_NOSIGNAL);
      close(st->pending[i].fd);
      continue;
    }
    if (h >= 0) {
      snprintf(why, sizeof(why), "%s",
               h > 0 ? "hello arrived after the root had finished"
                     : "no complete hello before the root finished");
    }
    PAP_WARN("bootstrap root %s: dropping connection from %s: %s", st->addrStr,
             papSocketAddrToString(&st->pending[i].peer, str, sizeof(str)), why);
    close(st->pending[i].fd);
  }
  for (int r = 0; st->rankFd != NULL && r < st->nranks; r++) {
    if (st->rankFd[r] >= 0) close(st->rankFd[r]);
  }
  if (st->listenFd >= 0) close(st->listenFd);
  free(st->rankFd);
  free(st->rankPeer);
  free(st->table);
  free(st->pending);
  free(st->pfds);
  free(st->pfdRank);
  free(st);
}

static void rootDrop(struct rootState* st, int i, const char* why) {
  char str[PAP_SOCKET_ADDR_STRLEN];
  PAP_WARN("bootstrap root %s: dropping connection from %s: %s", st->addrStr,
           papSocketAddrToString(&st->pending[i].peer, str, sizeof(str)), why);
  close(st->pending[i].fd);
  st->pending[i] = st->pending[--st->nPending];
}

/* A strict root gives up: every rank that joined, and every connection that spoke with the
 * id's key, gets the reason (best effort: one small non-blocking send each). */
static void rootRefuse(struct rootState* st, papcclResult_t code, const char* why, int warn) {
  unsigned char* msg = st->refusal;
  const size_t len = sizeof(st->refusal);
  st->refused = 1;
  memset(msg, 0, len);
  papBootstrapPackHdr(msg, PAP_BOOTSTRAP_MSG_ROOT_REFUSE, PAP_BOOTSTRAP_ROOT_REFUSE_BYTES, 0, 0,
                      st->key);
  bsPut32(msg + PAP_BS_HDR, (uint32_t)code);
  snprintf((char*)msg + PAP_BS_HDR + 4, PAP_BOOTSTRAP_ROOT_REFUSE_BYTES - 4, "%s", why);
  if (warn) /* a call-off is no news here: the ranks that called it off said why */
    PAP_WARN("bootstrap root %s: rendezvous refused for every rank: %s", st->addrStr, why);
  else
    PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap root %s: %s", st->addrStr, why);
  for (int r = 0; st->rankFd != NULL && r < st->nranks; r++)
    if (st->rankFd[r] >= 0) (void)!send(st->rankFd[r], msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  for (int i = 0; i < st->nPending; i++)
    if (rootKeyed(st, i)) (void)!send(st->pending[i].fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Sizes the per-rank arrays once the first valid hello names nranks. */
static papcclResult_t rootSetNranks(struct rootState* st, int nranks) {
  struct pollfd* pfds = NULL;
  PAP_CHECK(papCalloc(&st->rankFd, (size_t)nranks));
  PAP_CHECK(papCalloc(&st->rankPeer, (size_t)nranks));
  PAP_CHECK(papCalloc(&st->table, (size_t)nranks));
  PAP_CHECK(papCalloc(&st->pfdRank, (size_t)nranks));
  PAP_CHECK(papCalloc(&pfds, 1 + BS_ROOT_MAX_PENDING + (size_t)nranks));
  /* Called while the poll results are still being walked: keep them. */
  memcpy(pfds, st->pfds, (1 + BS_ROOT_MAX_PENDING) * sizeof(*pfds));
  free(st->pfds);
  st->pfds = pfds;
  for (int r = 0; r < nranks; r++)
    st->rankFd[r] = -1;
  st->nranks = nranks;
  return papcclSuccess;
}

int papBootstrapRootHelloCheck(const unsigned char* payload, int knownNranks, int* rankOut,
                               int* nranksOut, struct papBootstrapAddr* addrOut, char* why,
                               size_t whyLen) {
  int rank = (int)bsGet32(payload);
  int nranks = (int)bsGet32(payload + 4);
  union papSockAddr sa;

  memcpy(addrOut->bytes, payload + 8, PAP_BOOTSTRAP_ADDR_BYTES);
  *rankOut = rank;
  *nranksOut = nranks;
  if (nranks < 1 || nranks > PAP_BOOTSTRAP_MAX_RANKS) {
    snprintf(why, whyLen, "nranks %d out of range 1..%d", nranks, PAP_BOOTSTRAP_MAX_RANKS);
  } else if (knownNranks > 0 && nranks != knownNranks) {
    snprintf(why, whyLen, "nranks %d disagrees with %d from the ranks before", nranks, knownNranks);
  } else if (rank < 0 || rank >= nranks) {
    snprintf(why, whyLen, "rank %d out of range for %d ranks", rank, nranks);
  } else if (bsAddrFromBytes(addrOut, &sa) != 0) {
    snprintf(why, whyLen, "rank %d sent an invalid listener address", rank);
  } else {
    return 0;
  }
  return -1;
}

/* Pending connection i sent a complete hello: register its rank or drop it. */
static papcclResult_t rootTakeHello(struct rootState* st, int i) {
  struct papBsHelloConn* c = &st->pending[i];
  int rank;
  int nranks;
  struct papBootstrapAddr addr;
  char why[PAP_BS_WHY_LEN];
  char str[PAP_SOCKET_ADDR_STRLEN];

  int bad = papBootstrapRootHelloCheck(c->buf + PAP_BS_HDR, st->nranks, &rank, &nranks, &addr, why,
                                       sizeof(why));
  if (!bad && st->nranks > 0 && st->rankFd[rank] >= 0) {
    snprintf(why, sizeof(why), "rank %d already joined from %s", rank,
             papSocketAddrToString(&st->rankPeer[rank], str, sizeof(str)));
    bad = 1;
  }
  if (!bad) {
    if (st->nranks < 0) PAP_CHECK(rootSetNranks(st, nranks));
    st->rankFd[rank] = c->fd;
    st->rankPeer[rank] = c->peer;
    st->table[rank] = addr;
    st->joined++;
    PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap root %s: rank %d joined from %s (%d of %d)", st->addrStr,
             rank, papSocketAddrToString(&c->peer, str, sizeof(str)), st->joined, nranks);
    st->pending[i] = st->pending[--st->nPending];
    return papcclSuccess;
  }
  if (st->strict) { /* the id's key: a participant that got its call wrong */
    rootRefuse(st, papcclInvalidArgument, why, 1);
    return papcclInvalidArgument;
  }
  rootDrop(st, i, why);
  return papcclSuccess;
}

/* Pending connection i is a grow's existing ranks calling it off. */
static int rootCancelled(const struct rootState* st, int i) {
  struct bsHdr h;
  papBootstrapUnpackHdr(st->pending[i].buf, &h);
  return h.type == PAP_BOOTSTRAP_MSG_ROOT_CANCEL;
}

static const char rootCancelWhy[] =
    "the grow was called off by its existing ranks (their checks failed: see their logs)";

/* Collects every rank's hello. 0 when all nranks joined; -1 when the rendezvous failed. */
static int rootGather(struct rootState* st) {
  char why[PAP_BS_WHY_LEN];
  char str[PAP_SOCKET_ADDR_STRLEN];
  for (;;) {
    if (st->nranks > 0 && st->joined == st->nranks) return 0;
    uint64_t now = papNowNs();
    if (now >= st->deadlineNs) {
      PAP_WARN("bootstrap root %s: timeout after %llds with %d of %d ranks joined; giving up",
               st->addrStr, (long long)st->timeoutS, st->joined, st->nranks);
      return -1;
    }
    uint64_t wake = st->deadlineNs;
    for (int i = st->nPending - 1; i >= 0; i--) {
      if (now >= st->pending[i].deadlineNs) {
        rootDrop(st, i, "no complete hello within 2 s");
        continue;
      }
      if (st->pending[i].deadlineNs < wake) wake = st->pending[i].deadlineNs;
    }
    int n = 0;
    int listening = st->nPending < BS_ROOT_MAX_PENDING;
    if (listening) st->pfds[n++] = (struct pollfd){.fd = st->listenFd, .events = POLLIN};
    int pendBase = n;
    for (int i = 0; i < st->nPending; i++) {
      st->pfds[n++] = (struct pollfd){.fd = st->pending[i].fd, .events = POLLIN};
    }
    int rankBase = n;
    for (int r = 0; r < st->nranks; r++) {
      if (st->rankFd[r] < 0) continue;
      st->pfdRank[n - rankBase] = r;
      st->pfds[n++] = (struct pollfd){.fd = st->rankFd[r], .events = POLLIN};
    }
    uint64_t ms = (wake - now + 999999) / 1000000;
    int r = poll(st->pfds, (nfds_t)n,
                 ms < PAP_SOCKET_POLL_SLICE_MS ? (int)ms : PAP_SOCKET_POLL_SLICE_MS);
    if (r < 0 && errno != EINTR) {
      PAP_WARN("bootstrap root %s: poll failed: %s; giving up", st->addrStr, strerror(errno));
      return -1;
    }
    if (r <= 0) continue;
    /* A joined rank sends nothing more: an event means it left (its init failed). */
    for (int k = rankBase; k < n; k++) {
      if (st->pfds[k].revents == 0) continue;
      int rank = st->pfdRank[k - rankBase];
      snprintf(why, sizeof(why), "rank %d (%s) closed its connection with %d of %d ranks joined",
               rank, papSocketAddrToString(&st->rankPeer[rank], str, sizeof(str)), st->joined,
               st->nranks);
      close(st->rankFd[rank]);
      st->rankFd[rank] = -1;
      if (st->strict)
        rootRefuse(st, papcclRemoteError, why, 1);
      else
        PAP_WARN("bootstrap root %s: %s; giving up", st->addrStr, why);
      return -1;
    }
    /* Downwards, so that swap-removal only moves entries already handled. */
    for (int i = st->nPending - 1; i >= 0; i--) {
      if (st->pfds[pendBase + i].revents == 0) continue;
      int h = papBootstrapHelloProgress(&st->pending[i], st->key, PAP_BOOTSTRAP_MSG_ROOT_HELLO,
                                        PAP_BOOTSTRAP_ROOT_HELLO_BYTES, why, sizeof(why));
      if (h < 0 && st->strict && rootKeyed(st, i)) {
        int cancel = rootCancelled(st, i);
        close(st->pending[i].fd); /* the message was read: it closes quietly */
        st->pending[i] = st->pending[--st->nPending];
        rootRefuse(st, papcclInvalidUsage, cancel ? rootCancelWhy : why, !cancel);
        return -1;
      }
      if (h < 0)
        rootDrop(st, i, why);
      else if (h > 0 && rootTakeHello(st, i) != papcclSuccess)
        return -1;
    }
    while (listening && st->pfds[0].revents != 0 && st->nPending < BS_ROOT_MAX_PENDING) {
      struct papBsHelloConn* c = &st->pending[st->nPending];
      memset(c, 0, sizeof(*c));
      if (papSocketAccept(st->listenFd, &c->fd, &c->peer) != papcclSuccess) {
        PAP_WARN("bootstrap root %s: cannot accept connections; giving up", st->addrStr);
        return -1;
      }
      if (c->fd < 0) break;
      c->deadlineNs = papNowNs() + PAP_BS_HELLO_TIMEOUT_NS;
      st->nPending++;
    }
  }
}

/* Sends the address table to every rank at once (non-blocking), then closes them. */
static void rootSendTables(struct rootState* st) {
  size_t len = PAP_BS_HDR + PAP_BS_KEY_BYTES + (size_t)st->nranks * sizeof(struct papBootstrapAddr);
  unsigned char* msg = NULL;
  size_t* off = NULL;
  char what[PAP_BS_WHAT_LEN];
  char str[PAP_SOCKET_ADDR_STRLEN];

  if (papCallocBytes((void**)&msg, len, 1, "bootstrap address table") != papcclSuccess ||
      papCalloc(&off, (size_t)st->nranks) != papcclSuccess) {
    PAP_WARN("bootstrap root %s: cannot send the address table; giving up", st->addrStr);
    goto out;
  }
  papBootstrapPackHdr(msg, PAP_BOOTSTRAP_MSG_ADDR_TABLE, len - PAP_BS_HDR, 0, 0, st->key);
  memcpy(msg + PAP_BS_HDR, st->commKey, PAP_BS_KEY_BYTES);
  memcpy(msg + PAP_BS_HDR + PAP_BS_KEY_BYTES, st->table,
         (size_t)st->nranks * sizeof(struct papBootstrapAddr));
  for (;;) {
    int n = 0;
    for (int r = 0; r < st->nranks; r++) {
      if (st->rankFd[r] < 0) continue;
      snprintf(what, sizeof(what), "root %s sending the address table to rank %d (%s)", st->addrStr,
               r, papSocketAddrToString(&st->rankPeer[r], str, sizeof(str)));
      if (papSocketTrySend(st->rankFd[r], msg, len, &off[r], what) != papcclSuccess ||
          off[r] == len) {
        close(st->rankFd[r]);
        st->rankFd[r] = -1;
        continue;
      }
      st->pfdRank[n] = r;
      st->pfds[n++] = (struct pollfd){.fd = st->rankFd[r], .events = POLLOUT};
    }
    if (n == 0) break;
    snprintf(what, sizeof(what), "root %s sending the address table to %d of %d ranks", st->addrStr,
             n, st->nranks);
    if (papSocketPoll(st->pfds, n, st->deadlineNs, NULL, what) != papcclSuccess) break;
  }
  PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap root %s: rendezvous of %d ranks done", st->addrStr,
           st->nranks);
out:
  free(off);
  free(msg);
}

static void* rootMain(void* arg) {
  struct rootState* st = arg;
  pthread_setname_np(pthread_self(), "papccl-root");
  int ok = rootGather(st) == 0;
  /* Close the port first: with PAPCCL_COMM_ID the next communicator may rebind it as soon
   * as its ranks have their tables. */
  close(st->listenFd);
  st->listenFd = -1;
  if (ok) rootSendTables(st);
  rootFree(st);
  __atomic_sub_fetch(&activeRoots, 1, __ATOMIC_RELEASE); /* acquire: papBootstrapActiveRoots */
  return NULL;
}

papcclResult_t papBootstrapRootStart(const union papSockAddr* bindAddr, int reuseAddr, int strict,
                                     const unsigned char* key, const unsigned char* commKey,
                                     int64_t timeoutS, uint64_t bindDeadlineNs,
                                     const volatile int* abortFlag, union papSockAddr* boundOut) {
  papcclResult_t res = papcclSuccess;
  struct rootState* st = NULL;
  pthread_attr_t attr;
  pthread_t thread;
  union papSockAddr bound;

  PAP_CHECK(papCalloc(&st, 1));
  st->listenFd = -1;
  st->nranks = -1;
  st->strict = strict;
  PAP_CHECK_GOTO(papCalloc(&st->pending, BS_ROOT_MAX_PENDING), res, out_free);
  PAP_CHECK_GOTO(papCalloc(&st->pfds, 1 + BS_ROOT_MAX_PENDING), res, out_free);
  PAP_CHECK_GOTO(
      papSocketListen(bindAddr, reuseAddr, bindDeadlineNs, abortFlag, &st->listenFd, &st->addr),
      res, out_free);
  papSocketAddrToString(&st->addr, st->addrStr, sizeof(st->addrStr));
  memcpy(st->key, key, PAP_BS_KEY_BYTES);
  memcpy(st->commKey, commKey, PAP_BS_KEY_BYTES);
  st->timeoutS = timeoutS > 0 ? timeoutS : papParamTimeoutS();
  st->deadlineNs = papSocketDeadline(st->timeoutS);
  bound = st->addr; /* st belongs to the thread once it runs */
  PAP_PTHREAD_CHECK_GOTO(pthread_attr_init(&attr), "pthread_attr_init", res, out_free);
  PAP_PTHREAD_CHECK_GOTO(pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED),
                         "pthread_attr_setdetachstate", res, out_attr);
  __atomic_add_fetch(&activeRoots, 1, __ATOMIC_RELAXED);
  int rc = pthread_create(&thread, &attr, rootMain, st);
  if (rc != 0) {
    __atomic_sub_fetch(&activeRoots, 1, __ATOMIC_RELAXED);
    PAP_WARN("bootstrap: cannot start the root thread: pthread_create failed: %s", strerror(rc));
    res = papcclSystemError;
    goto out_attr;
  }
  pthread_attr_destroy(&attr);
  *boundOut = bound;
  return papcclSuccess;

out_attr:
  pthread_attr_destroy(&attr);
out_free:
  rootFree(st);
  return res;
}
