/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the bootstrap: forwards to src/bootstrap with plain types. */
#include "tests/internal/shim_bootstrap.h"

#include "bootstrap.h"
#include "log.h"

#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

_Static_assert(PAP_TEST_BS_ID_BYTES == sizeof(papcclUniqueId), "id size");
_Static_assert(PAP_TEST_BS_ADDR_BYTES == sizeof(struct papBootstrapAddr), "addr size");
_Static_assert((int)PAP_TEST_BS_MSG_ROOT_HELLO == (int)PAP_BOOTSTRAP_MSG_ROOT_HELLO, "msg type");
_Static_assert((int)PAP_TEST_BS_MSG_ADDR_TABLE == (int)PAP_BOOTSTRAP_MSG_ADDR_TABLE, "msg type");
_Static_assert((int)PAP_TEST_BS_MSG_RING_HELLO == (int)PAP_BOOTSTRAP_MSG_RING_HELLO, "msg type");
_Static_assert((int)PAP_TEST_BS_MSG_ALLGATHER == (int)PAP_BOOTSTRAP_MSG_ALLGATHER, "msg type");
_Static_assert(PAP_BOOTSTRAP_HDR_BYTES + PAP_BOOTSTRAP_ROOT_HELLO_BYTES <= 128, "hello size");

int papTestBsGetUniqueId(void* id) {
  return (int)papBootstrapGetUniqueId((papcclUniqueId*)id);
}

int papTestBsCheckId(const void* id) {
  return (int)papBootstrapCheckId((const papcclUniqueId*)id);
}

int papTestBsIdInfo(const void* id, void* rootAddrOut, unsigned char* keyOut) {
  return (int)papBootstrapIdInfo((const papcclUniqueId*)id, (struct papBootstrapAddr*)rootAddrOut,
                                 keyOut);
}

int papTestBsInit(const void* id, int rank, int nranks, const volatile int* abortFlag, int timeoutS,
                  void** bsOut) {
  struct papBootstrap* bs = NULL;
  papcclResult_t res =
      papBootstrapInit((const papcclUniqueId*)id, rank, nranks, abortFlag, timeoutS, &bs);
  *bsOut = bs;
  return (int)res;
}

int papTestBsCreate(int rank, int nranks, const unsigned char* key, const volatile int* abortFlag,
                    int timeoutS, void** bsOut) {
  struct papBootstrap* bs = NULL;
  papcclResult_t res = papBootstrapCreate(rank, nranks, key, abortFlag, timeoutS, &bs);
  *bsOut = bs;
  return (int)res;
}

void papTestBsGetAddr(const void* bs, void* addrOut) {
  papBootstrapGetAddr((const struct papBootstrap*)bs, (struct papBootstrapAddr*)addrOut);
}

int papTestBsConnect(void* bs, const void* addrs) {
  return (int)papBootstrapConnect((struct papBootstrap*)bs, (const struct papBootstrapAddr*)addrs);
}

void papTestBsKey(const void* bs, unsigned char* keyOut) {
  memcpy(keyOut, papBootstrapKey((const struct papBootstrap*)bs), PAP_TEST_BS_KEY_BYTES);
}

int papTestBsAllGather(void* bs, void* data, size_t size) {
  return (int)papBootstrapAllGather((struct papBootstrap*)bs, data, size);
}

int papTestBsBarrier(void* bs) {
  return (int)papBootstrapBarrier((struct papBootstrap*)bs);
}

void papTestBsDestroy(void* bs) {
  papBootstrapDestroy((struct papBootstrap*)bs);
}

int papTestBsActiveRoots(void) {
  return papBootstrapActiveRoots();
}

unsigned papTestBsAddrToSockaddr(const void* addr, void* sockaddrOut) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof(ss));
  memcpy(&ss, addr, PAP_TEST_BS_ADDR_BYTES);
  unsigned len = ss.ss_family == AF_INET    ? (unsigned)sizeof(struct sockaddr_in)
                 : ss.ss_family == AF_INET6 ? (unsigned)sizeof(struct sockaddr_in6)
                                            : 0;
  memcpy(sockaddrOut, &ss, PAP_TEST_BS_ADDR_BYTES);
  return len;
}

size_t papTestBsPackHdr(void* buf, int type, uint64_t payloadLen, const unsigned char* key) {
  papBootstrapPackHdr((unsigned char*)buf, type, payloadLen, 0, 0, key);
  return PAP_BOOTSTRAP_HDR_BYTES;
}

size_t papTestBsPackRootHello(void* buf, const unsigned char* key, int rank, int nranks,
                              const void* listenAddr) {
  unsigned char* p = (unsigned char*)buf;
  papBootstrapPackHdr(p, PAP_BOOTSTRAP_MSG_ROOT_HELLO, PAP_BOOTSTRAP_ROOT_HELLO_BYTES, 0, 0, key);
  papBootstrapPackRootHello(p + PAP_BOOTSTRAP_HDR_BYTES, rank, nranks,
                            (const struct papBootstrapAddr*)listenAddr);
  return PAP_BOOTSTRAP_HDR_BYTES + PAP_BOOTSTRAP_ROOT_HELLO_BYTES;
}

void papTestBsSetWarnHook(void (*fn)(const char* msg, void* arg), void* arg) {
  papLogSetWarnHook(fn, arg);
}
