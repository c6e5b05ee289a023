/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the bootstrap: plain-C wrappers that GoogleTest code can call. Results are
 * papcclResult_t values as int; bootstrap handles are void*. */
#ifndef PAPCCL_TESTS_SHIM_BOOTSTRAP_H_
#define PAPCCL_TESTS_SHIM_BOOTSTRAP_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PAP_TEST_BS_ID_BYTES 128
#define PAP_TEST_BS_ADDR_BYTES 32
#define PAP_TEST_BS_KEY_BYTES 16

/* Message types of the wire format (checked against the library's in the shim). */
enum {
  PAP_TEST_BS_MSG_ROOT_HELLO = 1,
  PAP_TEST_BS_MSG_ADDR_TABLE = 2,
  PAP_TEST_BS_MSG_RING_HELLO = 3,
  PAP_TEST_BS_MSG_ALLGATHER = 4
};

int papTestBsGetUniqueId(void* id);
int papTestBsCheckId(const void* id);
/* Root address (PAP_TEST_BS_ADDR_BYTES) and key of an id. */
int papTestBsIdInfo(const void* id, void* rootAddrOut, unsigned char* keyOut);

int papTestBsInit(const void* id, int rank, int nranks, const volatile int* abortFlag, int timeoutS,
                  void** bsOut);
int papTestBsCreate(int rank, int nranks, const unsigned char* key, const volatile int* abortFlag,
                    int timeoutS, void** bsOut);
void papTestBsGetAddr(const void* bs, void* addrOut);
int papTestBsConnect(void* bs, const void* addrs);
void papTestBsKey(const void* bs, unsigned char* keyOut);
int papTestBsAllGather(void* bs, void* data, size_t size);
int papTestBsBarrier(void* bs);
void papTestBsDestroy(void* bs);
int papTestBsActiveRoots(void);

/* A bootstrap address as a sockaddr for connect(): writes at most 32 bytes to sockaddrOut and
 * returns its length (0 for an invalid address). */
unsigned papTestBsAddrToSockaddr(const void* addr, void* sockaddrOut);
/* Wire messages for forging clients: a header (returns its size) and a complete root hello
 * (header + payload; returns its size). buf must hold 128 bytes. */
size_t papTestBsPackHdr(void* buf, int type, uint64_t payloadLen, const unsigned char* key);
size_t papTestBsPackRootHello(void* buf, const unsigned char* key, int rank, int nranks,
                              const void* listenAddr);

/* Every WARN the library logs also goes to fn (NULL removes the hook). */
void papTestBsSetWarnHook(void (*fn)(const char* msg, void* arg), void* arg);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PAPCCL_TESTS_SHIM_BOOTSTRAP_H_ */
