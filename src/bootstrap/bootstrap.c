/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap, rank side: unique ids, joining the rendezvous, the socket ring and its
 * collectives. The root service is in root.c. */
#include "bootstrap.h"

#include "alloc.h"
#include "check.h"
#include "fault.h"
#include "futex.h"
#include "log.h"
#include "param.h"
#include "socket.h"
#include "wire.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define BS_ID_VERSION 1
#define BS_ID_FLAG_RANK0_SERVES 0x1u /* PAPCCL_COMM_ID: rank 0's init runs the root */
#define BS_RING_MAX_PENDING 64
#define BS_PARKED_MAX 16
#define BS_PROBE_NS 500000000ull /* a waiting rank looks at its prev this often */
#define BS_HDR_KEY 24 /* the key's offset in a message header */
#define BS_BIND_RETRY_NS (5ull * 1000000000ull) /* rank 0 binding the PAPCCL_COMM_ID port */

static const unsigned char idMagic[8] = {'p', 'a', 'p', 'c', 'c', 'l', 'I', 'D'};

/* The leading bytes of a papcclUniqueId; integers in network byte order. */
struct bsId {
  unsigned char magic[8];
  uint32_t version;
  uint32_t flags;
  unsigned char key[PAP_BS_KEY_BYTES];
  struct papBootstrapAddr root;
};
_Static_assert(sizeof(struct bsId) <= sizeof(papcclUniqueId), "unique id layout too big");

struct bsHdr {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t seq;
  uint32_t step;
  uint64_t len;
  unsigned char key[PAP_BS_KEY_BYTES];
};

struct papBootstrap {
  int rank;
  int nranks;
  unsigned char key[PAP_BS_KEY_BYTES];
  const volatile int* abortFlag; /* not owned; may be NULL */
  int64_t timeoutS;
  int listenFd; /* stays open while bs lives: a shrink builds its ring through it */
  union papSockAddr listenAddr;
  int nextFd; /* to (rank+1)%nranks; -1 when nranks == 1 */
  int prevFd; /* from (rank-1)%nranks */
  int connected;
  uint32_t seq; /* collectives issued; tags every ring message */
  struct papBootstrapAddr* addrs; /* owned: every rank's listener address */
  /* Shrinks build their rings through this listener: a hello for another shrink than the
   * one accepting (a member that gave up on a failed shrink and started the next one
   * first) waits here for the shrink it belongs to. Closed at destroy. */
  struct papBsHelloConn parked[BS_PARKED_MAX];
  int nParked;
};

/* ---- Encoding ------------------------------------------------------------------------ */

void papBootstrapPackHdr(unsigned char hdr[PAP_BOOTSTRAP_HDR_BYTES], int type, uint64_t payloadLen,
                         uint32_t seq, uint32_t step, const unsigned char key[16]) {
  uint16_t v16;
  uint64_t v64 = htobe64(payloadLen);
  bsPut32(hdr, PAP_BS_MSG_MAGIC);
  v16 = htobe16(PAP_BS_PROTO_VERSION);
  memcpy(hdr + 4, &v16, 2);
  v16 = htobe16((uint16_t)type);
  memcpy(hdr + 6, &v16, 2);
  bsPut32(hdr + 8, seq);
  bsPut32(hdr + 12, step);
  memcpy(hdr + 16, &v64, 8);
  memcpy(hdr + BS_HDR_KEY, key, PAP_BS_KEY_BYTES);
}

static void unpackHdr(const unsigned char* raw, struct bsHdr* h) {
  uint16_t v16;
  uint64_t v64;
  h->magic = bsGet32(raw);
  memcpy(&v16, raw + 4, 2);
  h->version = be16toh(v16);
  memcpy(&v16, raw + 6, 2);
  h->type = be16toh(v16);
  h->seq = bsGet32(raw + 8);
  h->step = bsGet32(raw + 12);
  memcpy(&v64, raw + 16, 8);
  h->len = be64toh(v64);
  memcpy(h->key, raw + BS_HDR_KEY, PAP_BS_KEY_BYTES);
}

void papBootstrapPackRootHello(unsigned char payload[PAP_BOOTSTRAP_ROOT_HELLO_BYTES], int rank,
                               int nranks, const struct papBootstrapAddr* addr) {
  bsPut32(payload, (uint32_t)rank);
  bsPut32(payload + 4, (uint32_t)nranks);
  memcpy(payload + 8, addr->bytes, PAP_BOOTSTRAP_ADDR_BYTES);
}

/* Constant-time comparison of two communicator keys: how much of a guess matched must not
 * show in the time the check takes. */
static int keyEqual(const unsigned char* a, const unsigned char* b) {
  volatile unsigned char diff = 0;
  for (int i = 0; i < PAP_BS_KEY_BYTES; i++)
    diff |= (unsigned char)(a[i] ^ b[i]);
  return diff == 0;
}

int papBootstrapCheckHdr(const unsigned char* raw, const unsigned char* key, int type, uint64_t len,
                         uint32_t seq, uint32_t step, char* why, size_t whyLen) {
  struct bsHdr h;
  unpackHdr(raw, &h);
  if (h.magic != PAP_BS_MSG_MAGIC) {
    snprintf(why, whyLen, "bad magic 0x%08x", h.magic);
  } else if (h.version != PAP_BS_PROTO_VERSION) {
    snprintf(why, whyLen, "protocol version %u, expected %u", h.version, PAP_BS_PROTO_VERSION);
  } else if (key != NULL && !keyEqual(h.key, key)) {
    snprintf(why, whyLen, "wrong communicator key 0x%02x%02x%02x%02x...", h.key[0], h.key[1],
             h.key[2], h.key[3]);
  } else if (h.type != type) {
    snprintf(why, whyLen, "message type %u, expected %d", h.type, type);
  } else if (h.len != len) {
    snprintf(why, whyLen, "payload length %llu%s, expected %llu", (unsigned long long)h.len,
             h.len > PAP_BS_MAX_CTRL_PAYLOAD && len <= PAP_BS_MAX_CTRL_PAYLOAD ? " (absurd)" : "",
             (unsigned long long)len);
  } else if (h.seq != seq || h.step != step) {
    snprintf(why, whyLen, "collective %u step %u, expected collective %u step %u", h.seq, h.step,
             seq, step);
  } else {
    return 0;
  }
  return -1;
}

static void addrToBs(const union papSockAddr* a, struct papBootstrapAddr* out) {
  memset(out, 0, sizeof(*out));
  memcpy(out->bytes, a, papSocketAddrLen(a));
}

static int addrEqual(const struct papBootstrapAddr* a, const struct papBootstrapAddr* b) {
  return memcmp(a->bytes, b->bytes, PAP_BOOTSTRAP_ADDR_BYTES) == 0;
}

static const char* bsAddrStr(const struct papBootstrapAddr* a, char* buf, size_t len) {
  union papSockAddr sa;
  memset(&sa, 0, sizeof(sa));
  memcpy(&sa, a->bytes, sizeof(sa));
  return papSocketAddrToString(&sa, buf, len);
}

/* ---- Unique id ----------------------------------------------------------------------- */

static papcclResult_t decodeId(const papcclUniqueId* id, struct bsId* out,
                               union papSockAddr* root) {
  char str[PAP_SOCKET_ADDR_STRLEN];
  if (id == NULL) {
    PAP_WARN("bootstrap: unique id is NULL");
    return papcclInvalidArgument;
  }
  memcpy(out, id->internal, sizeof(*out));
  if (memcmp(out->magic, idMagic, sizeof(idMagic)) != 0) {
    PAP_WARN("bootstrap: not a papccl unique id (bad magic 0x%02x%02x%02x%02x...)",
             (unsigned char)id->internal[0], (unsigned char)id->internal[1],
             (unsigned char)id->internal[2], (unsigned char)id->internal[3]);
    return papcclInvalidArgument;
  }
  if (ntohl(out->version) != BS_ID_VERSION) {
    PAP_WARN("bootstrap: unique id version %u, this library speaks %u", ntohl(out->version),
             BS_ID_VERSION);
    return papcclInvalidArgument;
  }
  if (bsAddrFromBytes(&out->root, root) != 0) {
    PAP_WARN("bootstrap: unique id holds an invalid root address %s",
             bsAddrStr(&out->root, str, sizeof(str)));
    return papcclInvalidArgument;
  }
  return papcclSuccess;
}

papcclResult_t papBootstrapCheckId(const papcclUniqueId* id) {
  struct bsId body;
  union papSockAddr root;
  return decodeId(id, &body, &root);
}

papcclResult_t papBootstrapIdInfo(const papcclUniqueId* id, struct papBootstrapAddr* rootOut,
                                  unsigned char keyOut[16]) {
  struct bsId body;
  union papSockAddr root;
  PAP_CHECK(decodeId(id, &body, &root));
  *rootOut = body.root;
  memcpy(keyOut, body.key, PAP_BS_KEY_BYTES);
  return papcclSuccess;
}

/* Every rank derives the same key from the same PAPCCL_COMM_ID string (FNV-1a, then a
 * splitmix64 finalizer per half). It tells communicators apart; it is not a secret. */
static void deriveKey(const char* str, unsigned char key[PAP_BS_KEY_BYTES]) {
  for (int half = 0; half < 2; half++) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)(half + 1) * 0x9e3779b97f4a7c15ull;
    const char* salt = "papccl-bootstrap-v1:";
    for (const char* p = salt; *p; p++)
      h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    for (const char* p = str; *p; p++)
      h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    h = htobe64(h);
    memcpy(key + 8 * half, &h, 8);
  }
}

static papcclResult_t randomKey(unsigned char key[PAP_BS_KEY_BYTES]) {
  size_t got = 0;
  while (got < PAP_BS_KEY_BYTES) {
    ssize_t n = getrandom(key + got, PAP_BS_KEY_BYTES - got, 0);
    if (n > 0) {
      got += (size_t)n;
    } else if (n < 0 && errno != EINTR) {
      PAP_WARN("bootstrap: getrandom failed: %s", strerror(errno));
      return papcclSystemError;
    }
  }
  return papcclSuccess;
}

/* ---- Reading hellos without blocking --------------------------------------------------- */

int papBootstrapHelloProgress(struct papBsHelloConn* c, const unsigned char* key, int type,
                              size_t payloadLen, char* why, size_t whyLen) {
  for (;;) {
    size_t want = c->got < PAP_BS_HDR ? PAP_BS_HDR : PAP_BS_HDR + payloadLen;
    if (c->got == want) return 1;
    ssize_t n = recv(c->fd, c->buf + c->got, want - c->got, MSG_DONTWAIT);
    if (n > 0) {
      c->got += (size_t)n;
      if (c->got == PAP_BS_HDR &&
          papBootstrapCheckHdr(c->buf, key, type, payloadLen, 0, 0, why, whyLen) != 0)
        return -1;
    } else if (n == 0) {
      snprintf(why, whyLen, "closed the connection after %zu of %zu bytes", c->got,
               PAP_BS_HDR + payloadLen);
      return -1;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return 0;
    } else if (errno != EINTR) {
      snprintf(why, whyLen, "recv failed: %s", strerror(errno));
      return -1;
    }
  }
}

papcclResult_t papBootstrapGetUniqueId(papcclUniqueId* id) {
  struct bsId body;
  union papSockAddr addr;
  char str[PAP_SOCKET_ADDR_STRLEN];
  char ifname[64];
  const char* commId;

  if (id == NULL) {
    PAP_WARN("bootstrap: GetUniqueId: id is NULL");
    return papcclInvalidArgument;
  }
  memset(&body, 0, sizeof(body));
  memcpy(body.magic, idMagic, sizeof(idMagic));
  body.version = htonl(BS_ID_VERSION);
  commId = papParamCommId();
  if (commId != NULL) {
    PAP_CHECK(papSocketParseHostPort(commId, &addr));
    deriveKey(commId, body.key);
    body.flags = htonl(BS_ID_FLAG_RANK0_SERVES);
    PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap: unique id for PAPCCL_COMM_ID=%s (%s), rank 0 serves it",
             commId, papSocketAddrToString(&addr, str, sizeof(str)));
  } else {
    PAP_CHECK(randomKey(body.key));
    PAP_CHECK(papSocketFindIfAddr(&addr, ifname, sizeof(ifname)));
    PAP_CHECK(papBootstrapRootStart(&addr, 0, body.key, body.key, 0, 0, NULL, &addr));
    PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap: root listening on %s (%s), key 0x%02x%02x%02x%02x...",
             papSocketAddrToString(&addr, str, sizeof(str)), ifname, body.key[0], body.key[1],
             body.key[2], body.key[3]);
  }
  addrToBs(&addr, &body.root);
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &body, sizeof(body));
  return papcclSuccess;
}

/* ---- Ranks --------------------------------------------------------------------------- */

static papcclResult_t bsCreate(int rank, int nranks, const unsigned char* key,
                               const volatile int* abortFlag, int64_t timeoutS,
                               struct papBootstrap** bsOut) {
  papcclResult_t res = papcclSuccess;
  struct papBootstrap* bs = NULL;
  union papSockAddr ifAddr;

  if (bsOut == NULL || nranks < 1 || nranks > PAP_BOOTSTRAP_MAX_RANKS || rank < 0 ||
      rank >= nranks) {
    PAP_WARN("bootstrap: invalid arguments: rank %d of %d ranks (1..%d), bsOut %p", rank, nranks,
             PAP_BOOTSTRAP_MAX_RANKS, (void*)bsOut);
    return papcclInvalidArgument;
  }
  PAP_CHECK(papCalloc(&bs, 1));
  bs->rank = rank;
  bs->nranks = nranks;
  memcpy(bs->key, key, PAP_BS_KEY_BYTES);
  bs->abortFlag = abortFlag;
  bs->timeoutS = timeoutS;
  bs->listenFd = bs->nextFd = bs->prevFd = -1;
  PAP_CHECK_GOTO(papCalloc(&bs->addrs, (size_t)nranks), res, out_free);
  PAP_CHECK_GOTO(papSocketFindIfAddr(&ifAddr, NULL, 0), res, out_free);
  PAP_CHECK_GOTO(papSocketListen(&ifAddr, 0, 0, NULL, &bs->listenFd, &bs->listenAddr), res,
                 out_free);
  addrToBs(&bs->listenAddr, &bs->addrs[rank]);
  *bsOut = bs;
  return papcclSuccess;

out_free:
  free(bs->addrs);
  free(bs);
  return res;
}

void papBootstrapDestroy(struct papBootstrap* bs) {
  if (bs == NULL) return;
  for (int i = 0; i < bs->nParked; i++)
    close(bs->parked[i].fd);
  if (bs->listenFd >= 0) close(bs->listenFd);
  if (bs->nextFd >= 0) close(bs->nextFd);
  if (bs->prevFd >= 0) close(bs->prevFd);
  free(bs->addrs);
  free(bs);
}

/* Sends this rank's hello to the root and receives every rank's listener address. */
static papcclResult_t rootExchange(struct papBootstrap* bs, const union papSockAddr* root,
                                   uint64_t deadlineNs) {
  papcclResult_t res = papcclSuccess;
  unsigned char msg[PAP_BS_HDR + PAP_BOOTSTRAP_ROOT_HELLO_BYTES];
  char rootStr[PAP_SOCKET_ADDR_STRLEN];
  char what[PAP_BS_WHAT_LEN];
  char why[PAP_BS_WHY_LEN];
  size_t tableLen = (size_t)bs->nranks * sizeof(struct papBootstrapAddr);
  struct papBootstrapAddr mine = bs->addrs[bs->rank];
  unsigned char commKey[PAP_BS_KEY_BYTES];
  int fd = -1;

  papSocketAddrToString(root, rootStr, sizeof(rootStr));
  snprintf(what, sizeof(what), "rank %d of %d connecting to the bootstrap root %s", bs->rank,
           bs->nranks, rootStr);
  PAP_CHECK(papSocketConnect(root, deadlineNs, bs->abortFlag, what, &fd));
  papBootstrapPackHdr(msg, PAP_BOOTSTRAP_MSG_ROOT_HELLO, PAP_BOOTSTRAP_ROOT_HELLO_BYTES, 0, 0,
                      bs->key);
  papBootstrapPackRootHello(msg + PAP_BS_HDR, bs->rank, bs->nranks, &bs->addrs[bs->rank]);
  snprintf(what, sizeof(what), "rank %d of %d sending its hello to the bootstrap root %s", bs->rank,
           bs->nranks, rootStr);
  PAP_CHECK_GOTO(papSocketSendAll(fd, msg, sizeof(msg), deadlineNs, bs->abortFlag, what), res,
                 out_close);
  snprintf(what, sizeof(what),
           "rank %d of %d waiting for the address table from the bootstrap root %s", bs->rank,
           bs->nranks, rootStr);
  PAP_CHECK_GOTO(papSocketRecvAll(fd, msg, PAP_BS_HDR, deadlineNs, bs->abortFlag, what), res,
                 out_close);
  if (papBootstrapCheckHdr(msg, bs->key, PAP_BOOTSTRAP_MSG_ADDR_TABLE, PAP_BS_KEY_BYTES + tableLen,
                           0, 0, why, sizeof(why))) {
    PAP_WARN("bootstrap rank %d: bad reply from the root %s: %s", bs->rank, rootStr, why);
    res = papcclRemoteError;
    goto out_close;
  }
  PAP_CHECK_GOTO(papSocketRecvAll(fd, commKey, sizeof(commKey), deadlineNs, bs->abortFlag, what),
                 res, out_close);
  PAP_CHECK_GOTO(papSocketRecvAll(fd, bs->addrs, tableLen, deadlineNs, bs->abortFlag, what), res,
                 out_close);
  if (!addrEqual(&mine, &bs->addrs[bs->rank])) {
    PAP_WARN("bootstrap rank %d: the root %s sent another rank's address in this rank's slot",
             bs->rank, rootStr);
    res = papcclRemoteError;
    goto out_close;
  }
  memcpy(bs->key, commKey, sizeof(commKey)); /* the ring and later users take this one */
  PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap rank %d: got %d addresses from the root %s", bs->rank,
           bs->nranks, rootStr);

out_close:
  close(fd);
  return res;
}

/* A probe's header (papSocketProbeGone from a rank that waits for this one), whatever key. */
static int isProbe(const unsigned char* raw) {
  struct bsHdr h;
  unpackHdr(raw, &h);
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

/* Waits for (rank-1)%nranks to connect to listenFd (this rank's listener, or the parent's
 * in a shrink); strangers are dropped. */
static papcclResult_t ringAcceptPrev(struct papBootstrap* bs, int listenFd,
                                     const union papSockAddr* listenAddr,
                                     const struct papBootstrapAddr* addrs,
                                     struct papBootstrap* owner, uint64_t deadlineNs) {
  papcclResult_t res = papcclRemoteError;
  struct papBsHelloConn pending[BS_RING_MAX_PENDING];
  struct pollfd pfds[1 + BS_RING_MAX_PENDING];
  int nPending = 0;
  int prev = (bs->rank - 1 + bs->nranks) % bs->nranks;
  char lstr[PAP_SOCKET_ADDR_STRLEN];
  char pstr[PAP_SOCKET_ADDR_STRLEN];
  char why[PAP_BS_WHY_LEN];

  papSocketAddrToString(listenAddr, lstr, sizeof(lstr));
  for (int i = 0; owner != NULL && i < owner->nParked; i++) { /* it came early */
    const unsigned char* b = owner->parked[i].buf;
    if (!keyEqual(b + BS_HDR_KEY, bs->key) || (int)bsGet32(b + PAP_BS_HDR) != prev ||
        (int)bsGet32(b + PAP_BS_HDR + 4) != bs->nranks)
      continue;
    bs->prevFd = owner->parked[i].fd;
    owner->parked[i] = owner->parked[--owner->nParked];
    return papcclSuccess;
  }
  /* A prev that never connects may be dead: its listener, which existed before its
   * address reached us, then refuses. Looked at every BS_PROBE_NS of waiting. */
  union papSockAddr prevAddr;
  int canProbe = bsAddrFromBytes(&addrs[prev], &prevAddr) == 0;
  unsigned char probe[PAP_BS_HDR];
  papBootstrapPackHdr(probe, PAP_BOOTSTRAP_MSG_PROBE, 0, 0, 0, bs->key);
  uint64_t nextProbe = papNowNs() + BS_PROBE_NS;
  for (;;) {
    uint64_t now = papNowNs();
    if (papAborted(bs->abortFlag)) {
      PAP_WARN("bootstrap rank %d: aborted while waiting for rank %d (prev) to connect to %s",
               bs->rank, prev, lstr);
      goto out;
    }
    if (canProbe && now >= nextProbe) {
      if (papSocketProbeGone(&prevAddr, 50, probe, sizeof(probe))) {
        PAP_WARN(
            "bootstrap rank %d: rank %d (prev) is gone (its listener refuses connections) "
            "while this rank waits for it to connect",
            bs->rank, prev);
        goto out;
      }
      now = papNowNs();
      nextProbe = now + BS_PROBE_NS;
    }
    if (now >= deadlineNs) {
      PAP_WARN("bootstrap rank %d: timeout while waiting for rank %d (prev) to connect to %s",
               bs->rank, prev, lstr);
      goto out;
    }
    uint64_t wake = deadlineNs;
    for (int i = nPending - 1; i >= 0; i--) {
      if (now >= pending[i].deadlineNs) {
        PAP_WARN(
            "bootstrap rank %d: dropping connection from %s on %s: no complete hello "
            "within 2 s",
            bs->rank, papSocketAddrToString(&pending[i].peer, pstr, sizeof(pstr)), lstr);
        close(pending[i].fd);
        pending[i] = pending[--nPending];
      } else if (pending[i].deadlineNs < wake) {
        wake = pending[i].deadlineNs;
      }
    }
    int n = 0;
    int listening = nPending < BS_RING_MAX_PENDING;
    if (listening) pfds[n++] = (struct pollfd){.fd = listenFd, .events = POLLIN};
    int pendBase = n;
    for (int i = 0; i < nPending; i++) {
      pfds[n++] = (struct pollfd){.fd = pending[i].fd, .events = POLLIN};
    }
    if (canProbe && nextProbe < wake) wake = nextProbe;
    uint64_t ms = (wake - now + 999999) / 1000000;
    int r =
        poll(pfds, (nfds_t)n, ms < PAP_SOCKET_POLL_SLICE_MS ? (int)ms : PAP_SOCKET_POLL_SLICE_MS);
    if (r < 0 && errno != EINTR) {
      PAP_WARN("bootstrap rank %d: poll failed: %s", bs->rank, strerror(errno));
      res = papcclSystemError;
      goto out;
    }
    if (r <= 0) continue;
    for (int i = nPending - 1; i >= 0; i--) {
      if (pfds[pendBase + i].revents == 0) continue;
      int h = ringHelloProgress(bs, &pending[i], prev, owner, why, sizeof(why));
      if (h == 0) continue;
      if (h == 2 || h == 3) { /* parked (no longer ours), or a probe */
        if (h == 3) close(pending[i].fd);
        pending[i] = pending[--nPending];
        continue;
      }
      if (h > 0) {
        bs->prevFd = pending[i].fd;
        pending[i] = pending[--nPending];
        res = papcclSuccess;
        goto out;
      }
      PAP_WARN("bootstrap rank %d: dropping connection from %s on %s: %s", bs->rank,
               papSocketAddrToString(&pending[i].peer, pstr, sizeof(pstr)), lstr, why);
      close(pending[i].fd);
      pending[i] = pending[--nPending];
    }
    while (listening && pfds[0].revents != 0 && nPending < BS_RING_MAX_PENDING) {
      struct papBsHelloConn* c = &pending[nPending];
      memset(c, 0, sizeof(*c));
      if (papSocketAccept(listenFd, &c->fd, &c->peer) != papcclSuccess) {
        res = papcclSystemError;
        goto out;
      }
      if (c->fd < 0) break;
      c->deadlineNs = papNowNs() + PAP_BS_HELLO_TIMEOUT_NS;
      nPending++;
    }
  }

out:
  for (int i = 0; i < nPending; i++) {
    /* One last read, so that the WARN names what was wrong with it if anything was. */
    int h = ringHelloProgress(bs, &pending[i], prev, owner, why, sizeof(why));
    if (h == 2) continue; /* parked */
    if (h == 3) {
      close(pending[i].fd);
      continue;
    }
    if (h > 0) snprintf(why, sizeof(why), "a second hello from rank %d (prev)", prev);
    if (h == 0) {
      snprintf(why, sizeof(why), "no complete hello before %s",
               res == papcclSuccess ? "the ring was connected" : "this rank gave up");
    }
    PAP_WARN("bootstrap rank %d: dropping connection from %s on %s: %s", bs->rank,
             papSocketAddrToString(&pending[i].peer, pstr, sizeof(pstr)), lstr, why);
    close(pending[i].fd);
  }
  return res;
}

/* Connects to the next rank at addrs[next], then takes the previous rank's connection on
 * listenFd. addrs and listenFd are bs's own, except in a shrink: the parent's listeners. */
static papcclResult_t ringConnect(struct papBootstrap* bs, const struct papBootstrapAddr* addrs,
                                  int listenFd, const union papSockAddr* listenAddr,
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

papcclResult_t papBootstrapInit(const papcclUniqueId* id, int rank, int nranks,
                                const volatile int* abortFlag, int64_t timeoutS,
                                struct papBootstrap** bsOut) {
  papcclResult_t res = papcclSuccess;
  struct papBootstrap* bs = NULL;
  struct bsId body;
  union papSockAddr root;
  char str[PAP_SOCKET_ADDR_STRLEN];
  uint64_t deadlineNs = papSocketDeadline(timeoutS);

  PAP_CHECK(decodeId(id, &body, &root));
  PAP_CHECK(bsCreate(rank, nranks, body.key, abortFlag, timeoutS, &bs));
  PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap rank %d of %d: listening on %s", rank, nranks,
           papSocketAddrToString(&bs->listenAddr, str, sizeof(str)));
  if ((ntohl(body.flags) & BS_ID_FLAG_RANK0_SERVES) && rank == 0) {
    /* PAPCCL_COMM_ID names a port of this host: serve it on every interface. The port may
     * be held for a moment (a previous root closing); one in use for long is an error. The
     * id's key is the same for every communicator of that PAPCCL_COMM_ID: hand the ranks a
     * fresh one, so that concurrent or successive communicators never share shm names. */
    union papSockAddr any;
    unsigned char commKey[PAP_BS_KEY_BYTES];
    uint64_t bindDeadlineNs = papNowNs() + BS_BIND_RETRY_NS;
    if (bindDeadlineNs > deadlineNs) bindDeadlineNs = deadlineNs;
    memset(&any, 0, sizeof(any));
    any.sa.sa_family = root.sa.sa_family;
    if (root.sa.sa_family == AF_INET)
      any.sin.sin_port = root.sin.sin_port;
    else
      any.sin6.sin6_port = root.sin6.sin6_port;
    PAP_CHECK_GOTO(randomKey(commKey), res, out_destroy);
    PAP_CHECK_GOTO(papBootstrapRootStart(&any, 1, body.key, commKey, timeoutS, bindDeadlineNs,
                                         abortFlag, &any),
                   res, out_destroy);
    PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap rank 0: serving the root on %s",
             papSocketAddrToString(&any, str, sizeof(str)));
  }
  PAP_CHECK_GOTO(rootExchange(bs, &root, deadlineNs), res, out_destroy);
  PAP_FAULT(PAP_FAULT_BOOTSTRAP, rank, abortFlag);
  PAP_CHECK_GOTO(ringConnect(bs, bs->addrs, bs->listenFd, &bs->listenAddr, NULL, deadlineNs), res,
                 out_destroy);
  *bsOut = bs;
  return papcclSuccess;

out_destroy:
  papBootstrapDestroy(bs);
  return res;
}

papcclResult_t papBootstrapCreate(int rank, int nranks, const unsigned char key[16],
                                  const volatile int* abortFlag, int64_t timeoutS,
                                  struct papBootstrap** bsOut) {
  if (key == NULL) {
    PAP_WARN("bootstrap: Create: key is NULL");
    return papcclInvalidArgument;
  }
  return bsCreate(rank, nranks, key, abortFlag, timeoutS, bsOut);
}

void papBootstrapGetAddr(const struct papBootstrap* bs, struct papBootstrapAddr* addrOut) {
  addrToBs(&bs->listenAddr, addrOut);
}

papcclResult_t papBootstrapConnect(struct papBootstrap* bs, const struct papBootstrapAddr* addrs) {
  char a[PAP_SOCKET_ADDR_STRLEN];
  char b[PAP_SOCKET_ADDR_STRLEN];
  if (bs == NULL || addrs == NULL) {
    PAP_WARN("bootstrap: Connect: bs %p, addrs %p", (void*)bs, (const void*)addrs);
    return papcclInvalidArgument;
  }
  if (bs->connected) {
    PAP_WARN("bootstrap rank %d: Connect called twice", bs->rank);
    return papcclInvalidUsage;
  }
  if (!addrEqual(&addrs[bs->rank], &bs->addrs[bs->rank])) {
    PAP_WARN("bootstrap rank %d: Connect: addrs[%d] is %s but this rank listens on %s", bs->rank,
             bs->rank, bsAddrStr(&addrs[bs->rank], a, sizeof(a)),
             bsAddrStr(&bs->addrs[bs->rank], b, sizeof(b)));
    return papcclInvalidArgument;
  }
  memcpy(bs->addrs, addrs, (size_t)bs->nranks * sizeof(*addrs));
  return ringConnect(bs, bs->addrs, bs->listenFd, &bs->listenAddr, NULL,
                     papSocketDeadline(bs->timeoutS));
}

papcclResult_t papBootstrapShrink(struct papBootstrap* parent, const int* members, int newN,
                                  int newRank, const unsigned char key[16],
                                  const volatile int* abortFlag, int64_t timeoutS,
                                  struct papBootstrap** bsOut) {
  papcclResult_t res = papcclSuccess;
  struct papBootstrap* bs = NULL;
  struct papBootstrapAddr* via = NULL;
  if (parent == NULL || members == NULL || key == NULL || bsOut == NULL || newN < 1 ||
      newN > parent->nranks || newRank < 0 || newRank >= newN) {
    PAP_WARN("bootstrap: Shrink: invalid arguments (rank %d of %d)", newRank, newN);
    return papcclInvalidArgument;
  }
  if (!parent->connected || parent->listenFd < 0) {
    PAP_WARN("bootstrap rank %d: Shrink of a bootstrap that is not connected", parent->rank);
    return papcclInvalidUsage;
  }
  for (int i = 0; i < newN; i++) {
    if (members[i] < 0 || members[i] >= parent->nranks || (i > 0 && members[i] <= members[i - 1])) {
      PAP_WARN("bootstrap: Shrink: members[%d] = %d is not an ascending rank of %d", i, members[i],
               parent->nranks);
      return papcclInvalidArgument;
    }
  }
  if (members[newRank] != parent->rank) {
    PAP_WARN("bootstrap rank %d: Shrink: members[%d] is %d, not this rank", parent->rank, newRank,
             members[newRank]);
    return papcclInvalidArgument;
  }
  const uint64_t deadlineNs = papSocketDeadline(timeoutS);
  PAP_CHECK(bsCreate(newRank, newN, key, abortFlag, timeoutS, &bs));
  PAP_CHECK_GOTO(papCalloc(&via, (size_t)newN), res, out);
  for (int i = 0; i < newN; i++)
    via[i] = parent->addrs[members[i]];
  /* The parent's listeners carry the new ring (no root, and no word to the ranks left out);
   * then the members swap their own listeners' addresses, which a later shrink of the new
   * communicator uses. */
  PAP_CHECK_GOTO(ringConnect(bs, via, parent->listenFd, &parent->listenAddr, parent, deadlineNs),
                 res, out);
  PAP_CHECK_GOTO(papBootstrapAllGather(bs, bs->addrs, sizeof(*bs->addrs)), res, out);
  *bsOut = bs;
  bs = NULL;
out:
  free(via);
  papBootstrapDestroy(bs);
  return res;
}

const unsigned char* papBootstrapKey(const struct papBootstrap* bs) {
  return bs->key;
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
