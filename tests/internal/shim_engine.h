/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the plan engine (src/engine/engine.h) on a made-up backend: one send whose
 * completion the backend fails because the peer is gone. */
#ifndef PAPCCL_TESTS_SHIM_ENGINE_H_
#define PAPCCL_TESTS_SHIM_ENGINE_H_

#ifdef __cplusplus
extern "C" {
#endif

/* A two-rank engine plans one send to rank 1 (holdDeadSends = hold) on a backend that posts
 * it, then fails its test with papcclRemoteError and says rank 1 is gone from then on.
 * Returns the result of the engine's progress passes (the first failure, else success);
 * *heldOut: the send step waits unposted afterwards; *postsOut: how many times it was
 * posted. */
int papTestEngineSendFailsInFlight(int hold, int* heldOut, int* postsOut);

#ifdef __cplusplus
}
#endif

#endif  // PAPCCL_TESTS_SHIM_ENGINE_H_
