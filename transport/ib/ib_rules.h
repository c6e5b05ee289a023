/* SPDX-License-Identifier: Apache-2.0 */
/* The ib backend's protocol rules, without a device: the queue-pair state machine, the
 * immediate-data format of wire messages and the credit rule. */
#ifndef PAPCCL_TRANSPORT_IB_IB_RULES_H_
#define PAPCCL_TRANSPORT_IB_IB_RULES_H_

#include <stddef.h>
#include <stdint.h>

#include "papccl.h"

/* ---- Queue-pair state machine ---------------------------------------------------------- */

enum papIbQpState {
  PAP_IB_QP_RESET = 0,
  PAP_IB_QP_INIT,
  PAP_IB_QP_RTR,
  PAP_IB_QP_RTS,
  PAP_IB_QP_ERROR,
  PAP_IB_QP_NSTATES
};
enum papIbQpEvent {
  PAP_IB_EV_TO_INIT = 0, /* ibv_modify_qp to INIT */
  PAP_IB_EV_TO_RTR, /* to RTR: the peer's QP number and address are known */
  PAP_IB_EV_TO_RTS, /* to RTS */
  PAP_IB_EV_FAIL, /* error completion or a fatal async event */
  PAP_IB_EV_TO_RESET, /* back to RESET (teardown or recovery) */
  PAP_IB_EV_NEVENTS
};
/* The state after event, or -1 when the transition is not allowed (a connection only moves
 * forward RESET -> INIT -> RTR -> RTS; any state may fail or go back to RESET). */
int papIbNextState(int state, int event);
const char* papIbStateName(int state);

/* ---- Wire messages ---------------------------------------------------------------------- */

/* Kinds carried in the immediate data. Data kinds take one of the receiver's credited
 * buffers and may wait there for a matching receive; control kinds are consumed as soon as
 * they are polled (their buffers are the receiver's spare ones, never credited). */
enum papIbMsg {
  PAP_IB_MSG_EAGER_FIRST = 1, /* papIbEagerHdr + the first bytes of a message */
  PAP_IB_MSG_EAGER_MORE = 2, /* the next bytes of the message being received */
  PAP_IB_MSG_RTS = 3, /* papIbEagerHdr: a large message waits for a clear-to-send */
  PAP_IB_MSG_WRITE_DONE = 4, /* RDMA write with immediate: the large message has landed */
  PAP_IB_MSG_CTS = 5, /* papIbCts: where to write (or eager chunks) */
  PAP_IB_MSG_CREDIT = 6, /* returns credits only */
  PAP_IB_MSG_NOTIFY = 7, /* rings the receiver's doorbell */
  PAP_IB_MSG_DEPART = 8 /* the sender leaves the comm in good order (once per connection) */
};
struct papIbEagerHdr {
  uint64_t tag;
  uint64_t bytes; /* of the whole message */
};
struct papIbCts {
  uint64_t addr; /* 0: send eager chunks (the receiver hands pieces to a sink) */
  uint32_t rkey;
  uint32_t pad;
};
#define PAP_IB_MAX_CREDITS 0xffff

/* Immediate data (host order; the wire carries it big-endian): kind in the top 4 bits, the
 * credits returned to the peer in the low 16. */
static inline uint32_t papIbImmPack(int kind, unsigned credits) {
  return ((uint32_t)kind << 28) | (credits & PAP_IB_MAX_CREDITS);
}
static inline int papIbImmKind(uint32_t imm) {
  return (int)(imm >> 28);
}
static inline unsigned papIbImmCredits(uint32_t imm) {
  return imm & PAP_IB_MAX_CREDITS;
}
static inline int papIbMsgIsData(int kind) {
  return kind >= PAP_IB_MSG_EAGER_FIRST && kind <= PAP_IB_MSG_WRITE_DONE;
}
/* Whether the receiver should send a credit message now: freed buffers not yet returned
 * (pending), and data messages that arrived but were not returned yet (unreturned, freed or
 * held). Returns in batches of half the window, but at once when the sender must be out of
 * credits (everything it may send has arrived), so a sender never waits on a batch. */
int papIbShouldReturnCredits(unsigned pending, unsigned unreturned, unsigned nbufs);

#endif /* PAPCCL_TRANSPORT_IB_IB_RULES_H_ */
