/* SPDX-License-Identifier: Apache-2.0 */
/* The one wait. Every loop in papccl that waits for another thread, process or device (an
 * operation's progress, the arrival board, a device stream, a transport's blocking call,
 * the progress thread's queue) keeps the same rules through these parts:
 *   - it gives up at its deadline (PAPCCL_TIMEOUT_S from its start) and when the abort flag
 *     is set, with one WARN that names what it waited for;
 *   - it checks its peers' health every 100 ms (papWaitHealthDue: the check is the
 *     caller's, as only it knows which peers it waits on);
 *   - after progress it may poll for its spin budget, yielding the core between polls when
 *     the ranks outnumber the CPUs (papWait.yield), then it sleeps: on the transport's
 *     doorbell where there is one (papWaitSlice bounds that sleep), else in steps that grow
 *     to maxSleepNs (papWaitSleep).
 * The abort flag is read one way, papAborted, wherever it is read. */
#ifndef PAPCCL_CORE_WAIT_H_
#define PAPCCL_CORE_WAIT_H_

#include <stddef.h>
#include <stdint.h>

#include "papccl.h"

/* Nonzero once *flag is set (NULL: never). papcclCommAbort stores it from any thread while
 * waiters read it: an atomic load. */
static inline int papAborted(const volatile int* flag) {
  return flag != NULL && __atomic_load_n((const int*)flag, __ATOMIC_ACQUIRE) != 0;
}

struct papWait {
  const char* what; /* "collective #7 waiting for the arrival commit": named in the WARNs */
  /* A name made only when it is needed (papWaitDescribe): most waits end in microseconds,
   * and formatting a name costs as much as a small operation's whole wait. */
  void (*describe)(const struct papWait* w, char* buf, size_t len);
  const void* ctx; /* describe's arguments */
  const void* ctx2;
  const char* phase;
  char* whatBuf; /* where the name goes */
  size_t whatLen;
  const char* hint; /* appended to the timeout's WARN, or "" */
  const volatile int* abortFlag; /* or NULL */
  uint64_t deadline; /* CLOCK_MONOTONIC ns; 0: no deadline (what it waits for has its own) */
  uint64_t spinNs; /* polling budget after each progress (0: sleep at once) */
  int yield; /* polls give the core away (ranks outnumber CPUs); else they pause (default 1),
              * yielding once every PAP_WAIT_YIELD_EVERY_NS in case a peer shares our CPU */
  uint64_t lastYield;
  uint64_t spinUntil;
  uint64_t pollFrom, pollUntil; /* a predicted event (papWaitExpect): poll in between too */
  uint64_t nextHealth;
  long sleepNs; /* papWaitSleep's next sleep */
  long maxSleepNs;
  papcclResult_t abortRes; /* returned when aborted (papcclInvalidUsage by default) */
  papcclResult_t timeoutRes; /* returned at the deadline (papcclRemoteError by default) */
};

/* Starts a wait now with the deadline PAPCCL_TIMEOUT_S away (timed = 0: none), polling
 * spinNs after each progress and sleeping up to maxSleepNs at a time in papWaitSleep. */
void papWaitInit(struct papWait* w, const char* what, const volatile int* abortFlag, int timed,
                 uint64_t spinNs, long maxSleepNs);

/* Names the wait lazily: describe(w, buf, len) writes the name into buf the first time a
 * WARN or the hang diagnosis asks for it (papWaitWhat). */
void papWaitDescribe(struct papWait* w, void (*describe)(const struct papWait*, char*, size_t),
                     char* buf, size_t len);
/* The wait's name, made now if it is described lazily. */
const char* papWaitWhat(struct papWait* w);

/* papcclSuccess while the wait may go on; abortRes or timeoutRes (logged) when it is over. */
papcclResult_t papWaitCheck(struct papWait* w, uint64_t now);

/* 1 once every 100 ms: time for the caller's check of the peers it waits on. */
int papWaitHealthDue(struct papWait* w, uint64_t now);

/* Something moved: the spin budget starts again and the sleeps start short. */
void papWaitProgressed(struct papWait* w, uint64_t now);

/* An event is expected at `at` (a peer's arrival, predicted from past ops), `at - from` ns
 * after the wait began, give or take spreadNs (the prediction's mean deviation): the wait
 * polls in a margin around it (the larger of 1/8 of the prediction and twice the spread,
 * 0.2 to 2 ms on each side) and its sleeps end where the margin starts, because a wake-up
 * from a sleep can cost more than the whole operation. An event expected soon thus extends
 * the spin budget to the margin's end. No effect when at <= from. */
void papWaitExpect(struct papWait* w, uint64_t from, uint64_t at, uint64_t spreadNs);

/* Within the spin budget (or the margin of an expected event): one poll's pause
 * (papWaitPoll) and 1 (poll again). Else 0: sleep now. */
int papWaitSpin(struct papWait* w, uint64_t now);
/* A CPU's spin-wait hint: the cheapest pause between two polls. */
static inline void papCpuRelax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Asks for the cache line at p in a writable state ahead of a store (prefetchw; a hint: no
 * effect on what any thread sees). */
static inline void papCpuPrefetchWrite(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ __volatile__("prefetchw (%0)" ::"r"(p));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

/* One poll's pause: yields the core (yield = 1) or papCpuRelax. */
void papWaitPoll(const struct papWait* w);
/* papWaitSpin without the pause, for a poll that drives a device itself (a UCX worker). */
static inline int papWaitInBudget(const struct papWait* w, uint64_t now) {
  return now < w->spinUntil;
}

/* Sleeps without a doorbell: 2 us at first, doubling up to maxSleepNs. */
void papWaitSleep(struct papWait* w);

/* A doorbell sleep of `want` ns, cut at the deadline and where an expected event's margin
 * starts. */
int64_t papWaitSlice(const struct papWait* w, uint64_t now, int64_t want);

#endif /* PAPCCL_CORE_WAIT_H_ */
