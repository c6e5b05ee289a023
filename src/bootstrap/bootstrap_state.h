/* SPDX-License-Identifier: Apache-2.0 */
/* What the bootstrap's files share (private to src/bootstrap): the unique id's and the
 * messages' layouts, a rank's bootstrap state, and helpers of id.c, bootstrap.c and ring.c. */
#ifndef PAPCCL_BOOTSTRAP_STATE_H_
#define PAPCCL_BOOTSTRAP_STATE_H_

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bootstrap.h"
#include "socket.h"
#include "wire.h"

#define BS_ID_VERSION 1
#define BS_ID_FLAG_RANK0_SERVES 0x1u /* PAPCCL_COMM_ID: rank 0's init runs the root */
#define BS_ID_FLAG_GROW 0x2u /* papcclCommGetUniqueId: a strict root for one grow */
#define BS_RING_MAX_PENDING 64
#define BS_PARKED_MAX 16
#define BS_PROBE_NS 500000000ull /* a waiting rank looks at its prev this often */
#define BS_HDR_KEY 24 /* the key's offset in a message header */
#define BS_BIND_RETRY_NS (5ull * 1000000000ull) /* rank 0 binding the PAPCCL_COMM_ID port */

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

/* Constant-time comparison of two communicator keys: how much of a guess matched must not
 * show in the time the check takes. */
static inline int keyEqual(const unsigned char* a, const unsigned char* b) {
  volatile unsigned char diff = 0;
  for (int i = 0; i < PAP_BS_KEY_BYTES; i++)
    diff |= (unsigned char)(a[i] ^ b[i]);
  return diff == 0;
}

static inline void addrToBs(const union papSockAddr* a, struct papBootstrapAddr* out) {
  memset(out, 0, sizeof(*out));
  memcpy(out->bytes, a, papSocketAddrLen(a));
}

static inline int addrEqual(const struct papBootstrapAddr* a, const struct papBootstrapAddr* b) {
  return memcmp(a->bytes, b->bytes, PAP_BOOTSTRAP_ADDR_BYTES) == 0;
}

static inline const char* bsAddrStr(const struct papBootstrapAddr* a, char* buf, size_t len) {
  union papSockAddr sa;
  memset(&sa, 0, sizeof(sa));
  memcpy(&sa, a->bytes, sizeof(sa));
  return papSocketAddrToString(&sa, buf, len);
}

/* ---- id.c ------------------------------------------------------------------------------ */
void papBootstrapUnpackHdr(const unsigned char* raw, struct bsHdr* h);
/* The unique id's body and its root's address; fails with a WARN on a bad id. */
papcclResult_t papBootstrapDecodeId(const papcclUniqueId* id, struct bsId* out,
                                    union papSockAddr* root);
papcclResult_t papBootstrapRandomKey(unsigned char key[PAP_BS_KEY_BYTES]);

/* ---- ring.c ---------------------------------------------------------------------------- */
/* Connects to the next rank at addrs[next], then takes the previous rank's connection on
 * listenFd. addrs and listenFd are bs's own, except in a shrink: the parent's listeners
 * (owner, which parks hellos of other shrinks; NULL otherwise). */
papcclResult_t papBootstrapRingConnect(struct papBootstrap* bs,
                                       const struct papBootstrapAddr* addrs, int listenFd,
                                       const union papSockAddr* listenAddr,
                                       struct papBootstrap* owner, uint64_t deadlineNs);

#endif /* PAPCCL_BOOTSTRAP_STATE_H_ */
