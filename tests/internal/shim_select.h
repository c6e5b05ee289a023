/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the selector (src/arrival/select.c): one allreduce size bucket of a
 * communicator fed with made-up observations, and the mode it is in after each. */
#ifndef PAPCCL_TESTS_SHIM_SELECT_H_
#define PAPCCL_TESTS_SHIM_SELECT_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct papTestSel;
/* A selector for nranks ranks (no transport, no peers); NULL when out of memory. */
struct papTestSel* papTestSelNew(int nranks);
/* Observes one complete f32 allreduce of `bytes`: its skew and tail in us, and whether it
 * ran a PAP plan; returns the bucket's mode after it (1: PAP plans, 0: classic). */
int papTestSelObserve(struct papTestSel* s, size_t bytes, double skewUs, double tailUs, int pap);
/* The algorithm the decider would commit for that allreduce (enum papAlgo's value) and whether
 * it would wait for arrivals. */
int papTestSelChoice(struct papTestSel* s, size_t bytes, int* wait);
/* One allreduce of `bytes` on a message board whose plan the selector leaves to the probe:
 * returns 1 when it asks the decider (a probe), which then commits a PAP-aware plan (pap)
 * or a classic one; 0 when it plans classic alone. */
int papTestSelBoardCall(struct papTestSel* s, size_t bytes, int pap);
void papTestSelFree(struct papTestSel* s);

#ifdef __cplusplus
}
#endif

#endif /* PAPCCL_TESTS_SHIM_SELECT_H_ */
