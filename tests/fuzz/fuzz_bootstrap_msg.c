/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap messages as the root and the ranks read them off their sockets. The first byte
 * picks the reader:
 *   0  the root: a stream of hellos (header + rank, nranks, listener address, 88 bytes each),
 *      checked and registered as rootGather does (duplicates, nranks agreement);
 *   1  a rank: the root's reply (header, communicator key, address table); byte 1 gives
 *      nranks (1..8), byte 2 the rank; every address is turned into a socket address;
 *   2  a ring message: byte 1 the expected type, bytes 2..5 the expected length, seq and step
 *      fixed; then the header; a ring hello's payload is read as ringHelloProgress does.
 * Headers carry the key FUZZ_KEY (the seeds do). */
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "wire.h"

static const unsigned char fuzzKey[PAP_BS_KEY_BYTES] = {'p', 'a', 'p', 'c', 'c', 'l', '-', 'f',
                                                        'u', 'z', 'z', '-', 'k', 'e', 'y', '!'};

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzQuietLog();
  return 0;
}

static void addrString(const struct papBootstrapAddr* a) {
  union papSockAddr sa;
  char str[PAP_SOCKET_ADDR_STRLEN];
  int ok = bsAddrFromBytes(a, &sa) == 0;
  papSocketAddrToString(&sa, str, sizeof(str));
  FUZZ_ASSERT(strlen(str) < sizeof(str));
  if (ok) FUZZ_ASSERT(papSocketAddrLen(&sa) != 0);
}

static void rootHellos(const uint8_t* p, size_t n) {
  const size_t msgLen = PAP_BS_HDR + PAP_BOOTSTRAP_ROOT_HELLO_BYTES;
  char why[PAP_BS_WHY_LEN];
  int knownNranks = -1;
  int joined = 0;
  unsigned char* seen = NULL; /* [knownNranks], as rootSetNranks sizes rankFd */
  for (; n >= msgLen; p += msgLen, n -= msgLen) {
    unsigned char msg[PAP_BS_HDR + PAP_BOOTSTRAP_ROOT_HELLO_BYTES];
    memcpy(msg, p, msgLen);
    if (papBootstrapCheckHdr(msg, fuzzKey, PAP_BOOTSTRAP_MSG_ROOT_HELLO,
                             PAP_BOOTSTRAP_ROOT_HELLO_BYTES, 0, 0, why, sizeof(why)) != 0) {
      FUZZ_ASSERT(why[0] != '\0');
      continue;
    }
    int rank;
    int nranks;
    struct papBootstrapAddr addr;
    why[0] = '\0';
    if (papBootstrapRootHelloCheck(msg + PAP_BS_HDR, knownNranks, &rank, &nranks, &addr, why,
                                   sizeof(why)) != 0) {
      FUZZ_ASSERT(why[0] != '\0');
      continue;
    }
    FUZZ_ASSERT(nranks >= 1 && nranks <= PAP_BOOTSTRAP_MAX_RANKS && rank >= 0 && rank < nranks);
    FUZZ_ASSERT(knownNranks < 0 || nranks == knownNranks);
    if (knownNranks < 0) {
      seen = calloc((size_t)nranks, 1);
      if (seen == NULL) return;
      knownNranks = nranks;
    }
    addrString(&addr);
    if (seen[rank]) continue; /* "already joined": dropped */
    seen[rank] = 1;
    if (++joined == knownNranks) break; /* the root stops reading */
  }
  free(seen);
}

static void rootReply(const uint8_t* p, size_t n) {
  if (n < 2) return;
  int nranks = 1 + p[0] % 8;
  int rank = p[1] % nranks;
  p += 2;
  n -= 2;
  size_t tableLen = (size_t)nranks * sizeof(struct papBootstrapAddr);
  char why[PAP_BS_WHY_LEN];
  unsigned char hdr[PAP_BS_HDR];
  if (n < PAP_BS_HDR) return;
  memcpy(hdr, p, PAP_BS_HDR);
  if (papBootstrapCheckHdr(hdr, fuzzKey, PAP_BOOTSTRAP_MSG_ADDR_TABLE, PAP_BS_KEY_BYTES + tableLen,
                           0, 0, why, sizeof(why)) != 0)
    return;
  p += PAP_BS_HDR;
  n -= PAP_BS_HDR;
  /* rootExchange reads exactly the announced bytes (a short stream is a recv timeout). */
  if (n < PAP_BS_KEY_BYTES + tableLen) return;
  struct papBootstrapAddr* addrs = malloc(tableLen);
  if (addrs == NULL) return;
  memcpy(addrs, p + PAP_BS_KEY_BYTES, tableLen);
  for (int r = 0; r < nranks; r++) {
    if (r != rank) addrString(&addrs[r]); /* ringConnect: the next rank's address */
  }
  free(addrs);
}

static void ringMessage(const uint8_t* p, size_t n) {
  if (n < 5 + PAP_BS_HDR) return;
  int type = p[0] % 8;
  uint32_t len = bsGet32(p + 1);
  unsigned char hdr[PAP_BS_HDR];
  char why[PAP_BS_WHY_LEN];
  memcpy(hdr, p + 5, PAP_BS_HDR);
  p += 5 + PAP_BS_HDR;
  n -= 5 + PAP_BS_HDR;
  if (papBootstrapCheckHdr(hdr, fuzzKey, type, len, 0, 0, why, sizeof(why)) != 0) return;
  if (type == PAP_BOOTSTRAP_MSG_RING_HELLO && len == PAP_BOOTSTRAP_RING_HELLO_BYTES &&
      n >= PAP_BOOTSTRAP_RING_HELLO_BYTES) {
    int from = (int)bsGet32(p);
    int fromN = (int)bsGet32(p + 4);
    snprintf(why, sizeof(why), "hello from rank %d of %d", from, fromN);
  }
  /* A header packed from the fields just accepted must read back the same. */
  unsigned char again[PAP_BS_HDR];
  papBootstrapPackHdr(again, type, len, 0, 0, fuzzKey);
  FUZZ_ASSERT(papBootstrapCheckHdr(again, fuzzKey, type, len, 0, 0, why, sizeof(why)) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 3) {
  case 0:
    rootHellos(data + 1, size - 1);
    break;
  case 1:
    rootReply(data + 1, size - 1);
    break;
  default:
    ringMessage(data + 1, size - 1);
    break;
  }
  return 0;
}
