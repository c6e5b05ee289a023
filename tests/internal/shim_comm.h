/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the communicator tests: the few internals (WARN hook, parameter cache,
 * bootstrap root count) that GoogleTest code reaches through plain C functions. */
#ifndef PAPCCL_TESTS_SHIM_COMM_H_
#define PAPCCL_TESTS_SHIM_COMM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every WARN the library logs is also passed to fn (NULL removes the hook). The hook runs
 * under the library's log lock: it must not call back into the library. */
void papTestCommSetWarnHook(void (*fn)(const char* msg, void* arg), void* arg);

/* Forget the cached PAPCCL_* parameters, so the next read sees the current environment. */
void papTestCommParamReset(void);

/* The integer parameters: how many, the i-th one's name, default and range (0 when i is
 * out of bounds), and its value as the library reads it (cached until the reset above). */
int papTestParamIntCount(void);
int papTestParamIntAt(int i, const char** env, int64_t* def, int64_t* min, int64_t* max);
int64_t papTestParamIntGet(int i);

/* Current values of the parameters the tests size their expectations with. */
int64_t papTestCommParamTimeoutS(void);
int64_t papTestCommParamChunkSize(void);
int64_t papTestCommParamRhdMaxBytes(void);
int64_t papTestCommParamRdMaxBytes(void);

/* Bootstrap root service threads of this process still running. */
int papTestCommActiveRoots(void);
/* What a comm's rank has learnt of its arrivals (a papcclComm_t as void*): the selector's
 * samples over every bucket, and the predicted waits' samples over every context. */
void papTestCommPapState(void* comm, uint64_t* selSamplesOut, uint64_t* predictSamplesOut);

/* Whether comm saw more ranks on this machine than CPUs they may run on (then waits yield). */
int papTestCommOversubscribed(void* comm);

/* Allreduces comm ran through its host hierarchy; -1 when comm has no hierarchy. */
int64_t papTestCommHierOps(void* comm);
/* Of those, the allreduces in which every local rank carried a slice between hosts. */
int64_t papTestCommHierRailOps(void* comm);

/* What comm holds, read from its raw fields and the file system (an oracle for
 * papcclCommMemStats, independent of its accounting): the engine's plan step array and scratch
 * buffers (bytes), and the size of this rank's shared-memory segment (its file in /dev/shm;
 * -1 when it has none). */
uint64_t papTestCommEngineBytes(void* comm);
int64_t papTestCommShmSegBytes(void* comm);

/* Bytes per element of a datatype as the library sees it (0 for an invalid type). */
size_t papTestCommTypeSize(int datatype);

/* PAPCCL_FAULT: 1 when the library has the hook; the number of specs in a value (-1 and a
 * WARN when it is malformed). */
int papTestFaultHookBuilt(void);
int papTestFaultParse(const char* spec);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PAPCCL_TESTS_SHIM_COMM_H_ */
