/* SPDX-License-Identifier: Apache-2.0 */
/* A TCP port for PAPCCL_COMM_ID in tests, chosen as papcclrun chooses it. */
#ifndef PAPCCL_TESTS_SHIM_FREE_PORT_H_
#define PAPCCL_TESTS_SHIM_FREE_PORT_H_

#ifdef __cplusplus
extern "C" {
#endif

/* A port that nobody holds now on any interface, below the kernel's ephemeral range (inside
 * it, any connection's source port or any bind to port 0 could take it before the test binds
 * it). Returns -1 when there is no room below the range or no free port was found. */
int papTestFreeFixedPort(void);

#ifdef __cplusplus
}
#endif

#endif /* PAPCCL_TESTS_SHIM_FREE_PORT_H_ */
