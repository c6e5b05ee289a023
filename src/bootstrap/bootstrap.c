/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap, rank side: a rank's bootstrap (made, destroyed), joining the rendezvous through
 * the root, and the rings of split and shrink. The unique id is in id.c, the ring and its
 * collectives in ring.c, the root service in root.c. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "bootstrap_state.h"
#include "check.h"
#include "fault.h"
#include "futex.h"
#include "log.h"

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

/* A grow's root refused the rendezvous (PAP_BOOTSTRAP_MSG_ROOT_REFUSE). */
static int isRefusal(const unsigned char* hdr, const unsigned char* key) {
  char why[PAP_BS_WHY_LEN];
  return papBootstrapCheckHdr(hdr, key, PAP_BOOTSTRAP_MSG_ROOT_REFUSE,
                              PAP_BOOTSTRAP_ROOT_REFUSE_BYTES, 0, 0, why, sizeof(why)) == 0;
}

/* Reads the refusal's reason and fails with its code. */
static papcclResult_t rootRefused(struct papBootstrap* bs, int fd, const char* rootStr,
                                  uint64_t deadlineNs, const char* what) {
  unsigned char p[PAP_BOOTSTRAP_ROOT_REFUSE_BYTES];
  PAP_CHECK(papSocketRecvAll(fd, p, sizeof(p), deadlineNs, bs->abortFlag, what));
  p[sizeof(p) - 1] = 0;
  papcclResult_t code = (papcclResult_t)bsGet32(p);
  if (code == papcclSuccess || code > papcclRemoteError) code = papcclRemoteError;
  PAP_WARN("bootstrap rank %d of %d: the grow's root %s refused the rendezvous: %s", bs->rank,
           bs->nranks, rootStr, (const char*)p + 4);
  return code;
}

/* Sends this rank's hello to the root and receives every rank's listener address. */
static papcclResult_t rootExchange(struct papBootstrap* bs, const union papSockAddr* root, int grow,
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
  if (grow) {
    /* A grow's root listens before its id exists: a refusal means it has ended (it refused
     * the rendezvous, or its process is gone), not that it is not up yet. */
    snprintf(what, sizeof(what), "rank %d of %d joining the grow at its root %s (it has ended)",
             bs->rank, bs->nranks, rootStr);
    PAP_CHECK(papSocketConnectListening(root, deadlineNs, bs->abortFlag, what, &fd));
  } else {
    snprintf(what, sizeof(what), "rank %d of %d connecting to the bootstrap root %s", bs->rank,
             bs->nranks, rootStr);
    PAP_CHECK(papSocketConnect(root, deadlineNs, bs->abortFlag, what, &fd));
  }
  papBootstrapPackHdr(msg, PAP_BOOTSTRAP_MSG_ROOT_HELLO, PAP_BOOTSTRAP_ROOT_HELLO_BYTES, 0, 0,
                      bs->key);
  papBootstrapPackRootHello(msg + PAP_BS_HDR, bs->rank, bs->nranks, &bs->addrs[bs->rank]);
  snprintf(what, sizeof(what), "rank %d of %d sending its hello to the bootstrap root %s", bs->rank,
           bs->nranks, rootStr);
  PAP_CHECK_GOTO(papSocketSendAll(fd, msg, sizeof(msg), deadlineNs, bs->abortFlag, what), res,
                 out_close);
  PAP_FAULT(PAP_FAULT_HELLO, bs->rank, bs->abortFlag);
  snprintf(what, sizeof(what),
           "rank %d of %d waiting for the address table from the bootstrap root %s", bs->rank,
           bs->nranks, rootStr);
  PAP_CHECK_GOTO(papSocketRecvAll(fd, msg, PAP_BS_HDR, deadlineNs, bs->abortFlag, what), res,
                 out_close);
  if (isRefusal(msg, bs->key)) {
    res = rootRefused(bs, fd, rootStr, deadlineNs, what);
    goto out_close;
  }
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

papcclResult_t papBootstrapInit(const papcclUniqueId* id, int rank, int nranks,
                                const volatile int* abortFlag, int64_t timeoutS,
                                struct papBootstrap** bsOut) {
  papcclResult_t res = papcclSuccess;
  struct papBootstrap* bs = NULL;
  struct bsId body;
  union papSockAddr root;
  char str[PAP_SOCKET_ADDR_STRLEN];
  uint64_t deadlineNs = papSocketDeadline(timeoutS);

  PAP_CHECK(papBootstrapDecodeId(id, &body, &root));
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
    PAP_CHECK_GOTO(papBootstrapRandomKey(commKey), res, out_destroy);
    PAP_CHECK_GOTO(papBootstrapRootStart(&any, 1, 0, body.key, commKey, timeoutS, bindDeadlineNs,
                                         abortFlag, &any),
                   res, out_destroy);
    PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap rank 0: serving the root on %s",
             papSocketAddrToString(&any, str, sizeof(str)));
  }
  PAP_CHECK_GOTO(rootExchange(bs, &root, (ntohl(body.flags) & BS_ID_FLAG_GROW) != 0, deadlineNs),
                 res, out_destroy);
  PAP_FAULT(PAP_FAULT_BOOTSTRAP, rank, abortFlag);
  PAP_CHECK_GOTO(
      papBootstrapRingConnect(bs, bs->addrs, bs->listenFd, &bs->listenAddr, NULL, deadlineNs), res,
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
  return papBootstrapRingConnect(bs, bs->addrs, bs->listenFd, &bs->listenAddr, NULL,
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
  PAP_CHECK_GOTO(
      papBootstrapRingConnect(bs, via, parent->listenFd, &parent->listenAddr, parent, deadlineNs),
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
