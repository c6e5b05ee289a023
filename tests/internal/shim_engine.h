/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the plan engine (src/engine/engine.h) on a made-up backend: one send whose
 * completion the backend fails because the peer is gone, and the order of the backend calls
 * in a plan's first pass. */
#ifndef PAPCCL_TESTS_SHIM_ENGINE_H_
#define PAPCCL_TESTS_SHIM_ENGINE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A two-rank engine plans one send to rank 1 (holdDeadSends = hold) on a backend that posts
 * it, then fails its test with papcclRemoteError and says rank 1 is gone from then on.
 * Returns the result of the engine's progress passes (the first failure, else success);
 * *heldOut: the send step waits unposted afterwards; *postsOut: how many times it was
 * posted. */
int papTestEngineSendFailsInFlight(int hold, int* heldOut, int* postsOut);

/* A two-rank engine plans a send to rank 1 and a receive from it on a made-up backend that
 * logs each call, and makes the plan's first pass. logOut gets the calls in order: 's'
 * isend, 'r' irecv, 'p' progress (a worker pass), 't' test. Returns the pass's result. */
int papTestEngineCallOrder(char* logOut, size_t len);

#ifdef __cplusplus
}
#endif

#endif  // PAPCCL_TESTS_SHIM_ENGINE_H_
