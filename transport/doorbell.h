/* SPDX-License-Identifier: Apache-2.0 */
/* The doorbell of the network backends (ucx, ib): a word a waker bumps and an eventfd that a
 * sleeper polls next to the backend's own descriptors (UCX's worker event fd, the verbs
 * completion channel). wait.token reads the word; a sleeper sleeps only while it still
 * holds that value, so no ring between the read and the sleep is lost.
 *
 * shm keeps its own doorbell (shm_state.h): a futex word in the rank's shared segment that
 * peers of other processes ring directly, with nothing else to poll beside it. */
#ifndef PAPCCL_TRANSPORT_DOORBELL_H_
#define PAPCCL_TRANSPORT_DOORBELL_H_

#include <stdatomic.h>
#include <stdint.h>

struct papDoorbell {
  _Atomic uint32_t bell; /* bumped by every ring */
  _Atomic int sleepers; /* threads between papDoorbellSleepEnter and ...Leave */
  int fd; /* eventfd: readable from a ring with sleepers until the last one leaves */
};

/* Opens the eventfd (non-blocking); 0, or -1 with errno set. fd is -1 until then. */
int papDoorbellInit(struct papDoorbell* d);
void papDoorbellFree(struct papDoorbell* d);

static inline uint32_t papDoorbellToken(struct papDoorbell* d) {
  return atomic_load_explicit(&d->bell, memory_order_acquire);
}
/* Whether the bell still holds token (sequentially consistent with the rings). */
static inline int papDoorbellUnchanged(struct papDoorbell* d, uint32_t token) {
  return atomic_load_explicit(&d->bell, memory_order_seq_cst) == token;
}
static inline int papDoorbellSleepers(struct papDoorbell* d) {
  return atomic_load_explicit(&d->sleepers, memory_order_seq_cst);
}

/* Bump the bell only: no sleeper wakes for it, but none sleeps on the old value either. */
static inline void papDoorbellBump(struct papDoorbell* d) {
  atomic_fetch_add_explicit(&d->bell, 1, memory_order_seq_cst);
}
/* Something changed for this rank's threads: bump the bell; wake the sleepers if any. */
void papDoorbellRing(struct papDoorbell* d);
/* Bump the bell and make the eventfd readable whether or not anyone sleeps yet (wake). */
void papDoorbellWake(struct papDoorbell* d);
/* Make the eventfd readable without a ring (a sleeper must look again at what it polls). */
void papDoorbellKick(struct papDoorbell* d);
/* A sleeper counts itself before it checks the bell and polls d->fd, and leaves after: the
 * eventfd stays readable until the last sleeper leaves, so every sleeper sees a ring; the
 * last one resets it. */
void papDoorbellSleepEnter(struct papDoorbell* d);
void papDoorbellSleepLeave(struct papDoorbell* d);

#endif /* PAPCCL_TRANSPORT_DOORBELL_H_ */
