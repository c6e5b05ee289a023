/* SPDX-License-Identifier: Apache-2.0 */
/* One-sided communication (docs/ONE-SIDED.md): a comm's one-sided channel (a second instance
 * of its backend, with its own connections and its own thread that lands puts in windows),
 * the windows, puts with signals and the signal waits. The API layer checks the arguments
 * and does the collective exchanges (it has the bootstrap); this layer moves the bytes. */
#ifndef PAPCCL_ENQUEUE_ONESIDED_H_
#define PAPCCL_ENQUEUE_ONESIDED_H_

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "papccl.h"

#define PAP_WIN_MAGIC 0x70617077696e646full /* "papwindo" */

/* One window (papcclWindow_t): this rank's part and every rank's part's size. Owned by the
 * comm's one-sided state (freed at deregistration or with the comm). */
struct papcclWindow {
  uint64_t magic;
  struct papComm* comm;
  uint64_t id; /* the same on every rank: registrations are collective and in order */
  char* base;
  size_t size;
  uint64_t* sizes; /* owned: [nranks] each rank's part's bytes */
  struct papcclWindow* next;
};

struct papOneSided;

/* The channel's first half (API layer, collective): creates the comm's one-sided state and
 * its listen handle for the peers (*handleOut: owned by the caller, *handleBytesOut bytes,
 * the same on every rank). */
papcclResult_t papOneSidedOpen(struct papComm* comm, void** handleOut, size_t* handleBytesOut);
/* The second half: connects to every peer (handles: [nranks] of handleBytes each). */
papcclResult_t papOneSidedConnect(struct papComm* comm, const void* handles, size_t handleBytes);
/* The third, after a barrier: the backend's ready, then the thread that lands puts starts. */
papcclResult_t papOneSidedStart(struct papComm* comm);
/* Whether the comm's channel is up. */
int papOneSidedReady(const struct papComm* comm);
/* Frees the comm's one-sided state, its windows included (the comm's teardown). */
void papOneSidedFree(struct papComm* comm);

/* Adds a window (base and size set) and gives it the comm's next window id. */
void papOneSidedAddWindow(struct papComm* comm, struct papcclWindow* win);
/* Removes and frees a window at once (a registration that failed). */
void papOneSidedDropWindow(struct papComm* comm, struct papcclWindow* win);
/* Whether win is a live window of comm. */
int papOneSidedHasWindow(struct papComm* comm, const struct papcclWindow* win);
/* Collective: waits until every put that any rank issued before its own call has landed
 * here (a fence message on every connection), then removes and frees win. */
papcclResult_t papOneSidedRemoveWindow(struct papComm* comm, struct papcclWindow* win);

/* Sends bytes from src to peer's part of win at offset (win NULL, bytes 0: a signal alone),
 * then peer's signal sigIdx from this rank; returns once src may be reused. Arguments are
 * checked by the caller. */
papcclResult_t papOneSidedPut(struct papComm* comm, const void* src, size_t bytes, int peer,
                              const struct papcclWindow* win, size_t offset, int sigIdx);
/* Waits until each descriptor's count arrived, then takes the counts (checked arguments). */
papcclResult_t papOneSidedWait(struct papComm* comm, int nDesc, const papcclWaitSignalDesc_t* d);

#endif /* PAPCCL_ENQUEUE_ONESIDED_H_ */
