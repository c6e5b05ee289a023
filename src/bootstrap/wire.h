/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap internals shared by the rank side (bootstrap.c) and the root service (root.c):
 * limits, message checks and the non-blocking hello reader. */
#ifndef PAPCCL_BOOTSTRAP_WIRE_H_
#define PAPCCL_BOOTSTRAP_WIRE_H_

#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>

#include "bootstrap.h"
#include "socket.h"

#define PAP_BS_MSG_MAGIC 0x50415042u /* "PAPB" */
#define PAP_BS_PROTO_VERSION 1
#define PAP_BS_KEY_BYTES 16
#define PAP_BS_HDR PAP_BOOTSTRAP_HDR_BYTES
#define PAP_BS_MAX_CTRL_PAYLOAD (64u * 1024u) /* hellos are tiny: anything bigger is garbage */
#define PAP_BS_HELLO_TIMEOUT_NS (2ull * 1000000000ull)
#define PAP_BS_WHAT_LEN 192 /* "rank 3 waiting for ... from rank 2 (prev)" */
#define PAP_BS_WHY_LEN 160 /* why a message was rejected */

_Static_assert(sizeof(union papSockAddr) <= PAP_BOOTSTRAP_ADDR_BYTES, "address too big");

/* A connection that has yet to send a complete hello (root clients, ring listener). */
struct papBsHelloConn {
  int fd;
  union papSockAddr peer;
  uint64_t deadlineNs; /* dropped when no complete hello by then */
  size_t got;
  unsigned char buf[PAP_BS_HDR + PAP_BOOTSTRAP_ROOT_HELLO_BYTES];
};

static inline void bsPut32(unsigned char* p, uint32_t v) {
  v = htonl(v);
  memcpy(p, &v, 4);
}

static inline uint32_t bsGet32(const unsigned char* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return ntohl(v);
}

/* 0 when in holds an IPv4/IPv6 address with a port (copied to *a); -1 otherwise. */
static inline int bsAddrFromBytes(const struct papBootstrapAddr* in, union papSockAddr* a) {
  memset(a, 0, sizeof(*a));
  memcpy(a, in->bytes, sizeof(*a));
  if (a->sa.sa_family == AF_INET) return a->sin.sin_port != 0 ? 0 : -1;
  if (a->sa.sa_family == AF_INET6) return a->sin6.sin6_port != 0 ? 0 : -1;
  return -1;
}

/* 0 when raw is the header expected; otherwise -1 with the reason in why. */
int papBootstrapCheckHdr(const unsigned char* raw, const unsigned char* key, int type, uint64_t len,
                         uint32_t seq, uint32_t step, char* why, size_t whyLen);

/* Checks the payload of a root hello (PAP_BOOTSTRAP_ROOT_HELLO_BYTES) against knownNranks
 * (<= 0: none yet): 0 with its rank, nranks and listener address, or -1 with the reason in
 * why (rank, nranks and address are filled either way). */
int papBootstrapRootHelloCheck(const unsigned char* payload, int knownNranks, int* rankOut,
                               int* nranksOut, struct papBootstrapAddr* addrOut, char* why,
                               size_t whyLen);

/* Reads what c's socket has, never blocking. 1: c->buf holds a complete hello of `type`
 * with a valid header; 0: more to read; -1: bad or closed (the reason in why). */
int papBootstrapHelloProgress(struct papBsHelloConn* c, const unsigned char* key, int type,
                              size_t payloadLen, char* why, size_t whyLen);

/* Binds a listener on bindAddr (retrying while the port is in use until bindDeadlineNs or
 * *abortFlag; 0: one attempt) and starts a detached thread that serves one rendezvous for
 * key, hands commKey to the ranks with the address table, then exits (after timeoutS at
 * most; <= 0: PAPCCL_TIMEOUT_S). strict (a grow's root): a message with the id's key that
 * is wrong (a rank taken twice, another nranks, a PAP_BOOTSTRAP_MSG_ROOT_CANCEL) or a joined
 * rank that leaves ends the rendezvous for every rank with a PAP_BOOTSTRAP_MSG_ROOT_REFUSE. */
papcclResult_t papBootstrapRootStart(const union papSockAddr* bindAddr, int reuseAddr, int strict,
                                     const unsigned char* key, const unsigned char* commKey,
                                     int64_t timeoutS, uint64_t bindDeadlineNs,
                                     const volatile int* abortFlag, union papSockAddr* boundOut);

#endif /* PAPCCL_BOOTSTRAP_WIRE_H_ */
