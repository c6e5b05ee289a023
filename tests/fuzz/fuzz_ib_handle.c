/* SPDX-License-Identifier: Apache-2.0 */
/* The ib listen handle a peer sends through the bootstrap, decoded as ibConnect does. The
 * first byte: bit 0 recomputes the checksum over the input (so the fields behind it get
 * fuzzed too), bit 1 takes the expected rank and nranks from the handle itself (else from
 * bytes 1 and 2 of the input, which are skipped either way). The rest is the handle, in a
 * buffer of exactly its size (at most PAP_IB_HANDLE_BYTES). A handle that decodes has all
 * its queue-pair numbers read, and must survive an encode/decode round trip unchanged. */
#include <string.h>

#include "fuzz_common.h"
#include "ib/ib_handle.h"

#define OFF_RANK 12
#define OFF_NRANKS 16
#define OFF_BYTES 52
#define OFF_SUM 56

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzQuietLog();
  return 0;
}

static uint32_t le32(const unsigned char* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The handle's checksum (FNV-1a over its announced length, the checksum field as zero). */
static void fixSum(unsigned char* p, size_t n) {
  size_t bytes = le32(p + OFF_BYTES);
  if (bytes > n) bytes = n;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < bytes; i++) {
    unsigned char b = (i >= OFF_SUM && i < OFF_SUM + 4) ? 0 : p[i];
    h = (h ^ b) * 16777619u;
  }
  for (int i = 0; i < 4; i++)
    p[OFF_SUM + i] = (unsigned char)(h >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  int mode = data[0];
  int expectRank = (int8_t)data[1];
  int expectNranks = data[2];
  data += 3;
  size -= 3;
  if (size > PAP_IB_HANDLE_BYTES) size = PAP_IB_HANDLE_BYTES;
  unsigned char* buf = malloc(size ? size : 1);
  if (buf == NULL) return 0;
  memcpy(buf, data, size);
  if (size >= PAP_IB_HANDLE_HDR_BYTES) {
    if (mode & 1) fixSum(buf, size);
    if (mode & 2) {
      expectRank = (int)le32(buf + OFF_RANK);
      expectNranks = (int)le32(buf + OFF_NRANKS);
    }
  }
  struct papIbHandle h;
  const char* why = NULL;
  papcclResult_t res = papIbHandleDecode(buf, size, expectRank, expectNranks, &h, &why);
  if (res != papcclSuccess) {
    FUZZ_ASSERT(why != NULL);
    goto out;
  }
  FUZZ_ASSERT(h.rank == expectRank && h.nranks == expectNranks);
  FUZZ_ASSERT(h.nranks >= 1 && h.nranks <= PAP_IB_MAX_RANKS && h.rank < h.nranks);
  FUZZ_ASSERT(papIbHandleSize(h.nranks) <= size);
  uint32_t* qpns = malloc(sizeof(*qpns) * (size_t)h.nranks);
  unsigned char* again = malloc(PAP_IB_HANDLE_BYTES);
  if (qpns != NULL && again != NULL) {
    for (int i = 0; i < h.nranks; i++) {
      qpns[i] = papIbHandleQpn(buf, i); /* what connUp uses: every entry must be readable */
      FUZZ_ASSERT(qpns[i] <= 0xffffff);
    }
    FUZZ_ASSERT(papIbHandleEncode(&h, qpns, again, PAP_IB_HANDLE_BYTES, &why) == papcclSuccess);
    struct papIbHandle h2;
    FUZZ_ASSERT(papIbHandleDecode(again, PAP_IB_HANDLE_BYTES, h.rank, h.nranks, &h2, &why) ==
                papcclSuccess);
    FUZZ_ASSERT(memcmp(&h, &h2, sizeof(h)) == 0);
    for (int i = 0; i < h.nranks; i++)
      FUZZ_ASSERT(papIbHandleQpn(again, i) == qpns[i]);
  }
  free(again);
  free(qpns);
out:
  free(buf);
  return 0;
}
