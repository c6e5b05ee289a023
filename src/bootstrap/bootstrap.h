/* SPDX-License-Identifier: Apache-2.0 */
/* Out-of-band bootstrap over TCP: unique id, rendezvous through a root, then a ring of
 * sockets for bootstrap collectives (allgather, barrier) used by init, split and destroy. */
#ifndef PAPCCL_BOOTSTRAP_BOOTSTRAP_H_
#define PAPCCL_BOOTSTRAP_BOOTSTRAP_H_

#include <stddef.h>
#include <stdint.h>

#include "papccl.h"

#define PAP_BOOTSTRAP_ADDR_BYTES 32 /* holds a sockaddr_in or sockaddr_in6 */

/* A listener address, plain bytes so it can travel inside allgathers. */
struct papBootstrapAddr {
  unsigned char bytes[PAP_BOOTSTRAP_ADDR_BYTES];
};

struct papBootstrap; /* opaque; one per communicator rank */

/* Fills *id: root address + 128-bit random key. Starts the root service thread in this
 * process unless PAPCCL_COMM_ID is set (then rank 0's papBootstrapInit serves it and the
 * key is derived from the address string, so every rank computes the same id). */
papcclResult_t papBootstrapGetUniqueId(papcclUniqueId* id);

/* The id of a grow (papcclCommGetUniqueId): always a fresh root service in this process,
 * whatever PAPCCL_COMM_ID says (that address is the parent's), and a strict one: a rank that
 * joins with the id's key but a wrong call (a rank taken twice, another nranks) or a joined
 * rank that leaves ends the rendezvous for every rank at once, each told why. */
papcclResult_t papBootstrapGetGrowId(papcclUniqueId* id);
/* 1 when id was made by papBootstrapGetGrowId. */
int papBootstrapIdIsGrow(const papcclUniqueId* id);
/* Calls off the rendezvous of a grow id whose root runs in this process (the grow's
 * existing ranks failed their checks): the ranks waiting there fail at once. Nothing when
 * the root has finished. */
void papBootstrapCancelGrow(const papcclUniqueId* id);

/* Checks that id looks like one papBootstrapGetUniqueId made (magic, version, root
 * address): papcclInvalidArgument with a WARN otherwise. */
papcclResult_t papBootstrapCheckId(const papcclUniqueId* id);

/* Joins the rendezvous of id as rank/nranks: opens this rank's listener, exchanges addresses
 * through the root, connects the ring. Blocks until done, *abortFlag becomes nonzero
 * (papcclRemoteError with a WARN) or timeoutS passes (papcclRemoteError). abortFlag
 * may be NULL; it must outlive bs, whose collectives watch it too. timeoutS <= 0 means
 * PAPCCL_TIMEOUT_S; each later collective gets timeoutS again. Thread-safe: ranks may be
 * threads of one process, each with its own bs. */
papcclResult_t papBootstrapInit(const papcclUniqueId* id, int rank, int nranks,
                                const volatile int* abortFlag, int64_t timeoutS,
                                struct papBootstrap** bsOut);

/* Split path (no root): step 1 opens a listener for a new rank; the caller swaps every
 * rank's address (and the key) through the parent's allgather; step 2 connects the ring.
 * key is 16 bytes, the same on every member. */
papcclResult_t papBootstrapCreate(int rank, int nranks, const unsigned char key[16],
                                  const volatile int* abortFlag, int64_t timeoutS,
                                  struct papBootstrap** bsOut);
void papBootstrapGetAddr(const struct papBootstrap* bs, struct papBootstrapAddr* addrOut);
papcclResult_t papBootstrapConnect(struct papBootstrap* bs, const struct papBootstrapAddr* addrs);

/* Shrink path (no root): a new bootstrap for the ranks members[0..newN) of parent (ascending
 * parent ranks; this rank is members[newRank]), whose ring is connected through the parent's
 * listeners, which stay open for this while the parent lives: ranks left out (dead, or
 * excluded) are never contacted. Every member calls it with the same members and key. The
 * parent must not run a collective meanwhile (it may be aborted). */
papcclResult_t papBootstrapShrink(struct papBootstrap* parent, const int* members, int newN,
                                  int newRank, const unsigned char key[16],
                                  const volatile int* abortFlag, int64_t timeoutS,
                                  struct papBootstrap** bsOut);

/* The communicator key (16 bytes), the same on every rank; shm segment names derive from it.
 * After papBootstrapInit it is fresh for each rendezvous, even when the id is reused
 * (PAPCCL_COMM_ID); after papBootstrapCreate it is the key passed in. */
const unsigned char* papBootstrapKey(const struct papBootstrap* bs);

/* Every rank passes data[nranks * size] with its own slot data[rank*size] filled; on return
 * every slot is filled. Collective over the ring: every rank calls the same sequence of
 * allgathers (same size) and barriers; a mismatch fails with papcclRemoteError. A bs is used
 * by one thread at a time. data may be NULL when size is 0. */
papcclResult_t papBootstrapAllGather(struct papBootstrap* bs, void* data, size_t size);
papcclResult_t papBootstrapBarrier(struct papBootstrap* bs);

/* Closes sockets and frees bs (NULL is fine). Never blocks on peers. */
void papBootstrapDestroy(struct papBootstrap* bs);

/* ---- Introspection and wire format (tests, tools that talk to a root) ----------------- */

/* Root service threads of this process still running (each serves one rendezvous, then
 * exits; tests wait for 0 to show that nothing leaked). Thread-safe. */
int papBootstrapActiveRoots(void);

/* The root address and key of an id (after the same checks as papBootstrapCheckId). */
papcclResult_t papBootstrapIdInfo(const papcclUniqueId* id, struct papBootstrapAddr* rootOut,
                                  unsigned char keyOut[16]);

#define PAP_BOOTSTRAP_MAX_RANKS 65536
/* Every message: magic u32, version u16, type u16, seq u32, step u32, payload length u64,
 * key[16]; integers in network byte order; the payload follows. */
#define PAP_BOOTSTRAP_HDR_BYTES 40
/* Root hello payload: rank u32, nranks u32, the rank's listener address. */
#define PAP_BOOTSTRAP_ROOT_HELLO_BYTES (8 + PAP_BOOTSTRAP_ADDR_BYTES)
/* Ring hello payload: rank u32, nranks u32. */
#define PAP_BOOTSTRAP_RING_HELLO_BYTES 8

enum papBootstrapMsgType {
  PAP_BOOTSTRAP_MSG_ROOT_HELLO = 1, /* rank -> root */
  PAP_BOOTSTRAP_MSG_ADDR_TABLE = 2, /* root -> rank: communicator key, nranks addresses */
  PAP_BOOTSTRAP_MSG_RING_HELLO = 3, /* rank -> next rank's listener */
  PAP_BOOTSTRAP_MSG_ALLGATHER = 4, /* one ring step of papBootstrapAllGather */
  PAP_BOOTSTRAP_MSG_BARRIER = 5, /* one ring step of papBootstrapBarrier */
  PAP_BOOTSTRAP_MSG_PROBE = 6, /* "are you there": a waiting rank's look at its prev's listener */
  PAP_BOOTSTRAP_MSG_ROOT_REFUSE = 7, /* grow root -> ranks: the rendezvous is off, and why */
  PAP_BOOTSTRAP_MSG_ROOT_CANCEL = 8 /* grow's existing ranks -> their root: call it off */
};
/* Root refusal payload: result code u32, then the reason (NUL-terminated text). */
#define PAP_BOOTSTRAP_ROOT_REFUSE_BYTES (4 + 160)

void papBootstrapPackHdr(unsigned char hdr[PAP_BOOTSTRAP_HDR_BYTES], int type, uint64_t payloadLen,
                         uint32_t seq, uint32_t step, const unsigned char key[16]);
void papBootstrapPackRootHello(unsigned char payload[PAP_BOOTSTRAP_ROOT_HELLO_BYTES], int rank,
                               int nranks, const struct papBootstrapAddr* addr);

#endif /* PAPCCL_BOOTSTRAP_BOOTSTRAP_H_ */
