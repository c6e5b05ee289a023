/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap: the ring of sockets (each rank connects to the next and accepts the previous,
 * through its own listener or, in a shrink, the parent's) and its collectives. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap_state.h"
#include "check.h"
#include "futex.h"
#include "log.h"

/* A probe's header (papSocketProbeGone from a rank that waits for this one), whatever key. */
static int isProbe(const unsigned char* raw) {
  struct bsHdr h;
  papBootstrapUnpackHdr(raw, &h);
  return h.magic == PAP_BS_MSG_MAGIC && h.version == PAP_BS_PROTO_VERSION &&
         h.type == PAP_BOOTSTRAP_MSG_PROBE && h.len == 0;
}

/* 1: c sent the hello of rank prev; 0: more to read; 3: a probe (drop it quietly); 2: a whole hello with another key,
 * parked in owner (a shrink's parent, else NULL: then -1); -1: anything else (why says). */
static int ringHelloProgress(struct papBootstrap* bs, struct papBsHelloConn* c, int prev,
                             struct papBootstrap* owner, char* why, size_t whyLen) {
  int h = papBootstrapHelloProgress(c, owner ? NULL : bs->key, PAP_BOOTSTRAP_MSG_RING_HELLO,
                                    PAP_BOOTSTRAP_RING_HELLO_BYTES, why, whyLen);
  if (h < 0 && c->got >= PAP_BS_HDR && isProbe(c->buf)) return 3; /* a peer's look: no hello */
  if (h <= 0) return h;
  if (owner != NULL && !keyEqual(c->buf + BS_HDR_KEY, bs->key)) {
    if (owner->nParked == BS_PARKED_MAX) { /* the oldest goes */
      close(owner->parked[0].fd);
      memmove(owner->parked, owner->parked + 1, sizeof(owner->parked[0]) * (BS_PARKED_MAX - 1));
      owner->nParked--;
    }
    owner->parked[owner->nParked++] = *c;
    PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap rank %d: a hello for another shrink waits for it",
             bs->rank);
    return 2;
  }
  int from = (int)bsGet32(c->buf + PAP_BS_HDR);
  int fromN = (int)bsGet32(c->buf + PAP_BS_HDR + 4);
  if (from == prev && fromN == bs->nranks) return 1;
  snprintf(why, whyLen, "hello from rank %d of %d, expected rank %d of %d", from, fromN, prev,
           bs->nranks);
  return -1;
}

/* A hello that came early for this ring (it waits in owner, the shrink's parent) takes the
 * place of prev's connection: 1 when there was one. */
static int takeParkedPrev(struct papBootstrap* bs, struct papBootstrap* owner, int prev) {
  for (int i = 0; i < owner->nParked; i++) {
    const unsigned char* b = owner->parked[i].buf;
    if (!keyEqual(b + BS_HDR_KEY, bs->key) || (int)bsGet32(b + PAP_BS_HDR) != prev ||
        (int)bsGet32(b + PAP_BS_HDR + 4) != bs->nranks)
      continue;
    bs->prevFd = owner->parked[i].fd;
    owner->parked[i] = owner->parked[--owner->nParked];
    return 1;
  }
  return 0;
}

/* ringAcceptPrev's state: the connections whose hello is still being read, and the probe of
 * prev's listener. */
struct ringAccept {
  struct papBootstrap* bs;
  struct papBootstrap* owner; /* a shrink's parent (parks hellos for other shrinks), or NULL */
  int listenFd;
  int prev;
  struct papBsHelloConn pending[BS_RING_MAX_PENDING];
  int nPending;
  /* A prev that never connects may be dead: its listener, which existed before its address
   * reached us, then refuses. Looked at every BS_PROBE_NS of waiting. */
  int canProbe;
  union papSockAddr prevAddr;
  unsigned char probe[PAP_BS_HDR];
  uint64_t nextProbe;
  char lstr[PAP_SOCKET_ADDR_STRLEN];
  char why[PAP_BS_WHY_LEN];
};

/* Logs why pending connection i is dropped and closes it. */
static void warnDrop(struct ringAccept* a, int i, const char* why) {
  char pstr[PAP_SOCKET_ADDR_STRLEN];
  PAP_WARN("bootstrap rank %d: dropping connection from %s on %s: %s", a->bs->rank,
           papSocketAddrToString(&a->pending[i].peer, pstr, sizeof(pstr)), a->lstr, why);
  close(a->pending[i].fd);
}

static void removePending(struct ringAccept* a, int i) {
  a->pending[i] = a->pending[--a->nPending];
}

/* 1 when this rank stops waiting for prev (aborted, prev gone, deadline), having said why;
 * *now is the time after the probe, if one ran. */
static int giveUpOnPrev(struct ringAccept* a, uint64_t* now, uint64_t deadlineNs) {
  struct papBootstrap* bs = a->bs;
  if (papAborted(bs->abortFlag)) {
    PAP_WARN("bootstrap rank %d: aborted while waiting for rank %d (prev) to connect to %s",
             bs->rank, a->prev, a->lstr);
    return 1;
  }
  if (a->canProbe && *now >= a->nextProbe) {
    if (papSocketProbeGone(&a->prevAddr, 50, a->probe, sizeof(a->probe))) {
      PAP_WARN(
          "bootstrap rank %d: rank %d (prev) is gone (its listener refuses connections) "
          "while this rank waits for it to connect",
          bs->rank, a->prev);
      return 1;
    }
    *now = papNowNs();
    a->nextProbe = *now + BS_PROBE_NS;
  }
  if (*now >= deadlineNs) {
    PAP_WARN("bootstrap rank %d: timeout while waiting for rank %d (prev) to connect to %s",
             bs->rank, a->prev, a->lstr);
    return 1;
  }
  return 0;
}

/* Drops the connections that sent no whole hello within PAP_BS_HELLO_TIMEOUT_NS; returns
 * the earliest deadline of the others, or wake. */
static uint64_t expireHellos(struct ringAccept* a, uint64_t now, uint64_t wake) {
  for (int i = a->nPending - 1; i >= 0; i--) {
    if (now >= a->pending[i].deadlineNs) {
      warnDrop(a, i, "no complete hello within 2 s");
      removePending(a, i);
    } else if (a->pending[i].deadlineNs < wake) {
      wake = a->pending[i].deadlineNs;
    }
  }
  return wake;
}

/* Reads what the polled connections sent (pfds[i] is pending[i]): 1 when prev's hello is
 * whole (prev's connection is bs->prevFd), 0 otherwise; strangers are dropped. */
static int readHellos(struct ringAccept* a, const struct pollfd* pfds) {
  for (int i = a->nPending - 1; i >= 0; i--) {
    if (pfds[i].revents == 0) continue;
    int h = ringHelloProgress(a->bs, &a->pending[i], a->prev, a->owner, a->why, sizeof(a->why));
    if (h == 0) continue;
    if (h == 2 || h == 3) { /* parked (no longer ours), or a probe */
      if (h == 3) close(a->pending[i].fd);
      removePending(a, i);
      continue;
    }
    if (h > 0) {
      a->bs->prevFd = a->pending[i].fd;
      removePending(a, i);
      return 1;
    }
    warnDrop(a, i, a->why);
    removePending(a, i);
  }
  return 0;
}

/* Takes the connections waiting on the listener, as many as there is room for: 0, or -1
 * when accept failed. */
static int acceptHellos(struct ringAccept* a) {
  while (a->nPending < BS_RING_MAX_PENDING) {
    struct papBsHelloConn* c = &a->pending[a->nPending];
    memset(c, 0, sizeof(*c));
    if (papSocketAccept(a->listenFd, &c->fd, &c->peer) != papcclSuccess) return -1;
    if (c->fd < 0) break;
    c->deadlineNs = papNowNs() + PAP_BS_HELLO_TIMEOUT_NS;
    a->nPending++;
  }
  return 0;
}

/* The connections still pending when the wait ends are dropped, each with one last read so
 * that the WARN names what was wrong with it if anything was (parked ones stay parked). */
static void dropHellos(struct ringAccept* a, papcclResult_t res) {
  for (int i = 0; i < a->nPending; i++) {
    int h = ringHelloProgress(a->bs, &a->pending[i], a->prev, a->owner, a->why, sizeof(a->why));
    if (h == 2) continue; /* parked */
    if (h == 3) {
      close(a->pending[i].fd);
      continue;
    }
    if (h > 0) snprintf(a->why, sizeof(a->why), "a second hello from rank %d (prev)", a->prev);
    if (h == 0) {
      snprintf(a->why, sizeof(a->why), "no complete hello before %s",
               res == papcclSuccess ? "the ring was connected" : "this rank gave up");
    }
    warnDrop(a, i, a->why);
  }
}

/* Waits for (rank-1)%nranks to connect to listenFd (this rank's listener, or the parent's
 * in a shrink); strangers are dropped. */
static papcclResult_t ringAcceptPrev(struct papBootstrap* bs, int listenFd,
                                     const union papSockAddr* listenAddr,
                                     const struct papBootstrapAddr* addrs,
                                     struct papBootstrap* owner, uint64_t deadlineNs) {
  papcclResult_t res = papcclRemoteError;
  int prev = (bs->rank - 1 + bs->nranks) % bs->nranks;
  if (owner != NULL && takeParkedPrev(bs, owner, prev)) return papcclSuccess; /* it came early */
  struct ringAccept a = {.bs = bs, .owner = owner, .listenFd = listenFd, .prev = prev};
  struct pollfd pfds[1 + BS_RING_MAX_PENDING];
  papSocketAddrToString(listenAddr, a.lstr, sizeof(a.lstr));
  a.canProbe = bsAddrFromBytes(&addrs[prev], &a.prevAddr) == 0;
  papBootstrapPackHdr(a.probe, PAP_BOOTSTRAP_MSG_PROBE, 0, 0, 0, bs->key);
  a.nextProbe = papNowNs() + BS_PROBE_NS;
  for (;;) {
    uint64_t now = papNowNs();
    if (giveUpOnPrev(&a, &now, deadlineNs)) break;
    uint64_t wake = expireHellos(&a, now, deadlineNs);
    int n = 0;
    int listening = a.nPending < BS_RING_MAX_PENDING;
    if (listening) pfds[n++] = (struct pollfd){.fd = listenFd, .events = POLLIN};
    int pendBase = n;
    for (int i = 0; i < a.nPending; i++) {
      pfds[n++] = (struct pollfd){.fd = a.pending[i].fd, .events = POLLIN};
    }
    if (a.canProbe && a.nextProbe < wake) wake = a.nextProbe;
    uint64_t ms = (wake - now + 999999) / 1000000;
    int r =
        poll(pfds, (nfds_t)n, ms < PAP_SOCKET_POLL_SLICE_MS ? (int)ms : PAP_SOCKET_POLL_SLICE_MS);
    if (r < 0 && errno != EINTR) {
      PAP_WARN("bootstrap rank %d: poll failed: %s", bs->rank, strerror(errno));
      res = papcclSystemError;
      break;
    }
    if (r <= 0) continue;
    if (readHellos(&a, pfds + pendBase)) {
      res = papcclSuccess;
      break;
    }
    if (listening && pfds[0].revents != 0 && acceptHellos(&a) != 0) {
      res = papcclSystemError;
      break;
    }
  }
  dropHellos(&a, res);
  return res;
}

papcclResult_t papBootstrapRingConnect(struct papBootstrap* bs,
                                       const struct papBootstrapAddr* addrs, int listenFd,
                                       const union papSockAddr* listenAddr,
                                       struct papBootstrap* owner, uint64_t deadlineNs) {
  unsigned char msg[PAP_BS_HDR + PAP_BOOTSTRAP_RING_HELLO_BYTES];
  union papSockAddr nextAddr;
  char str[PAP_SOCKET_ADDR_STRLEN];
  char what[PAP_BS_WHAT_LEN];
  int next = (bs->rank + 1) % bs->nranks;

  if (bs->nranks > 1) {
    if (bsAddrFromBytes(&addrs[next], &nextAddr) != 0) {
      PAP_WARN("bootstrap rank %d: invalid listener address %s for rank %d (next)", bs->rank,
               bsAddrStr(&addrs[next], str, sizeof(str)), next);
      return papcclInvalidArgument;
    }
    snprintf(what, sizeof(what), "rank %d connecting to rank %d (next) at %s", bs->rank, next,
             papSocketAddrToString(&nextAddr, str, sizeof(str)));
    PAP_CHECK(papSocketConnectListening(&nextAddr, deadlineNs, bs->abortFlag, what, &bs->nextFd));
    papBootstrapPackHdr(msg, PAP_BOOTSTRAP_MSG_RING_HELLO, PAP_BOOTSTRAP_RING_HELLO_BYTES, 0, 0,
                        bs->key);
    bsPut32(msg + PAP_BS_HDR, (uint32_t)bs->rank);
    bsPut32(msg + PAP_BS_HDR + 4, (uint32_t)bs->nranks);
    PAP_CHECK(papSocketSendAll(bs->nextFd, msg, sizeof(msg), deadlineNs, bs->abortFlag, what));
    PAP_CHECK(ringAcceptPrev(bs, listenFd, listenAddr, addrs, owner, deadlineNs));
  }
  bs->connected = 1;
  PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap rank %d of %d: ring connected", bs->rank, bs->nranks);
  return papcclSuccess;
}

/* ---- Ring collectives ---------------------------------------------------------------- */

/* One ring step: sends size bytes to next while receiving size bytes from prev, interleaved
 * with poll so that neither side's socket buffers need to hold a whole message. */
static papcclResult_t ringStep(struct papBootstrap* bs, int type, uint32_t step,
                               const void* sendBuf, void* recvBuf, size_t size,
                               uint64_t deadlineNs) {
  unsigned char shdr[PAP_BS_HDR];
  unsigned char rhdr[PAP_BS_HDR];
  const char* name = type == PAP_BOOTSTRAP_MSG_BARRIER ? "barrier" : "allgather";
  int next = (bs->rank + 1) % bs->nranks;
  int prev = (bs->rank - 1 + bs->nranks) % bs->nranks;
  size_t sHdr = 0, sBody = 0, rHdr = 0, rBody = 0;
  char sWhat[PAP_BS_WHAT_LEN];
  char rWhat[PAP_BS_WHAT_LEN];
  char why[PAP_BS_WHY_LEN];

  papBootstrapPackHdr(shdr, type, size, bs->seq, step, bs->key);
  snprintf(sWhat, sizeof(sWhat), "rank %d sending %s %u step %u of %d to rank %d (next)", bs->rank,
           name, bs->seq, step + 1, bs->nranks - 1, next);
  snprintf(rWhat, sizeof(rWhat), "rank %d waiting for %s %u step %u of %d from rank %d (prev)",
           bs->rank, name, bs->seq, step + 1, bs->nranks - 1, prev);
  for (;;) {
    if (sHdr < PAP_BS_HDR) PAP_CHECK(papSocketTrySend(bs->nextFd, shdr, PAP_BS_HDR, &sHdr, sWhat));
    if (sHdr == PAP_BS_HDR && sBody < size)
      PAP_CHECK(papSocketTrySend(bs->nextFd, sendBuf, size, &sBody, sWhat));
    if (rHdr < PAP_BS_HDR) {
      PAP_CHECK(papSocketTryRecv(bs->prevFd, rhdr, PAP_BS_HDR, &rHdr, rWhat));
      if (rHdr == PAP_BS_HDR &&
          papBootstrapCheckHdr(rhdr, bs->key, type, size, bs->seq, step, why, sizeof(why)) != 0) {
        PAP_WARN("bootstrap rank %d: bad message from rank %d (prev) in %s %u step %u: %s",
                 bs->rank, prev, name, bs->seq, step + 1, why);
        return papcclRemoteError;
      }
    }
    if (rHdr == PAP_BS_HDR && rBody < size)
      PAP_CHECK(papSocketTryRecv(bs->prevFd, recvBuf, size, &rBody, rWhat));
    int sendDone = sHdr == PAP_BS_HDR && sBody == size;
    int recvDone = rHdr == PAP_BS_HDR && rBody == size;
    if (sendDone && recvDone) return papcclSuccess;
    struct pollfd pfds[2];
    int n = 0;
    if (!recvDone) pfds[n++] = (struct pollfd){.fd = bs->prevFd, .events = POLLIN};
    if (!sendDone) pfds[n++] = (struct pollfd){.fd = bs->nextFd, .events = POLLOUT};
    PAP_CHECK(papSocketPoll(pfds, n, deadlineNs, bs->abortFlag, recvDone ? sWhat : rWhat));
  }
}

static papcclResult_t ringAllGather(struct papBootstrap* bs, int type, void* data, size_t size) {
  if (bs == NULL || (data == NULL && size != 0)) {
    PAP_WARN("bootstrap: AllGather: bs %p, data %p, size %zu", (void*)bs, data, size);
    return papcclInvalidArgument;
  }
  if (!bs->connected) {
    PAP_WARN("bootstrap rank %d: collective before the ring was connected", bs->rank);
    return papcclInvalidUsage;
  }
  if (bs->nranks == 1) return papcclSuccess;
  uint64_t deadlineNs = papSocketDeadline(bs->timeoutS);
  int n = bs->nranks;
  char* base = data;
  bs->seq++;
  /* Step s forwards the slot received in step s-1 (our own first). */
  for (int s = 0; s < n - 1; s++) {
    size_t sendSlot = (size_t)((bs->rank - s + n) % n);
    size_t recvSlot = (size_t)((bs->rank - s - 1 + 2 * n) % n);
    PAP_CHECK(ringStep(bs, type, (uint32_t)s, base ? base + sendSlot * size : NULL,
                       base ? base + recvSlot * size : NULL, size, deadlineNs));
  }
  return papcclSuccess;
}

papcclResult_t papBootstrapAllGather(struct papBootstrap* bs, void* data, size_t size) {
  return ringAllGather(bs, PAP_BOOTSTRAP_MSG_ALLGATHER, data, size);
}

papcclResult_t papBootstrapBarrier(struct papBootstrap* bs) {
  /* Headers only: a rank finishes the last step only after every other rank entered. */
  return ringAllGather(bs, PAP_BOOTSTRAP_MSG_BARRIER, NULL, 0);
}
