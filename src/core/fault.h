/* SPDX-License-Identifier: Apache-2.0 */
/* Fault injection for tests: PAPCCL_FAULT makes a rank die, stall or run late at a chosen
 * point, so that tests can check what the other ranks see.
 *
 *   PAPCCL_FAULT=SPEC[,SPEC...]     SPEC = ACTION@POINT[:rank=R][:nth=K][:ms=M]
 *
 *   ACTION  kill   the process ends at once (SIGKILL; ranks run as processes)
 *           stall  the rank stops making progress: it sleeps until its communicator is
 *                  aborted, or for M ms when ms is given (no CPU used)
 *           delay  the rank sleeps M ms (default 100) and goes on
 *   POINT   bootstrap  in init, once this rank has met the root, before the ring is closed
 *           chunk      in a collective's plan, when a send or receive step completes
 *           commit     the PAP decider, just before it publishes the arrival commit
 *           hello      in init, once this rank's hello is with the root, before its table
 *   rank=R  only communicator rank R (default: any rank)
 *   nth=K   the K-th time this process reaches the point with a matching rank (default 1);
 *           a spec fires once, so a communicator made after it works normally
 *
 * The hook is compiled into builds with tests (meson option fault_hook, on when tests are);
 * elsewhere PAPCCL_FAULT gives one WARN and nothing happens. A malformed spec is refused
 * with a WARN naming the part that is wrong, and injects nothing. */
#ifndef PAPCCL_CORE_FAULT_H_
#define PAPCCL_CORE_FAULT_H_

#include <stdatomic.h>

enum papFaultPoint {
  PAP_FAULT_BOOTSTRAP = 0,
  PAP_FAULT_CHUNK,
  PAP_FAULT_COMMIT,
  PAP_FAULT_HELLO,
  PAP_FAULT_NPOINTS
};

#ifdef PAPCCL_FAULT_HOOK
/* Reached at point by communicator rank `rank`; abortFlag (may be NULL) ends a stall. Cheap
 * when PAPCCL_FAULT is unset: one load. Does not return for kill. */
void papFaultHit(enum papFaultPoint point, int rank, const volatile int* abortFlag);
#define PAP_FAULT(point, rank, abortFlag) papFaultHit((point), (rank), (abortFlag))
#else
#define PAP_FAULT(point, rank, abortFlag) ((void)(rank), (void)(abortFlag))
#endif

/* Parses spec (for tests): the number of specs, or -1 with a WARN when it is malformed. */
int papFaultParseCount(const char* spec);
/* Forget the parsed PAPCCL_FAULT (after papParamReset). */
void papFaultReset(void);
/* 1 when this build has the hook. */
int papFaultHookBuilt(void);
/* At comm init: in a build without the hook, one WARN if PAPCCL_FAULT is set. */
void papFaultCheckBuild(void);

#endif /* PAPCCL_CORE_FAULT_H_ */
