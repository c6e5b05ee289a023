/* SPDX-License-Identifier: Apache-2.0 */
/* What a local peer hands the shm backend before any FIFO is used. The first byte picks:
 *   0  its listen handle (PAP_TRANSPORT_HANDLE_BYTES swapped through the bootstrap; here the
 *      rest of the input, at most that long, in a buffer of exactly its size), read as
 *      shmConnect does to find the segment to open;
 *   1  its segment header as mapped: byte 1 nranks (1..64), byte 2 the peer, then the
 *      header (zero-padded to PAP_SHM_HEADER_BYTES). */
#include <string.h>

#include "fuzz_common.h"
#include "shm/shm.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzQuietLog();
  return 0;
}

static void handle(const uint8_t* p, size_t n) {
  if (n > PAP_TRANSPORT_HANDLE_BYTES) n = PAP_TRANSPORT_HANDLE_BYTES;
  char* h = malloc(n ? n : 1);
  if (h == NULL) return;
  memcpy(h, p, n);
  char name[96];
  if (papShmHandleName(h, n, name, sizeof(name)) == 0) {
    size_t len = strlen(name);
    FUZZ_ASSERT(len < sizeof(name) && len < n && memcmp(name, h, len + 1) == 0);
    FUZZ_ASSERT(name[0] == '/' && strchr(name + 1, '/') == NULL);
  }
  free(h);
}

static void header(const uint8_t* p, size_t n) {
  if (n < 2) return;
  int nranks = 1 + p[0] % 64;
  int peer = (int)(int8_t)p[1];
  p += 2;
  n -= 2;
  uint64_t hdr[PAP_SHM_HEADER_BYTES / 8]; /* aligned as a mapping is */
  memset(hdr, 0, sizeof(hdr));
  memcpy(hdr, p, n < sizeof(hdr) ? n : sizeof(hdr));
  if (papShmCheckHeader(hdr, nranks, peer) == 0) {
    uint32_t v32;
    int32_t owner;
    memcpy(&v32, (const char*)hdr + 12, 4);
    memcpy(&owner, (const char*)hdr + 40, 4);
    FUZZ_ASSERT(v32 == (uint32_t)nranks && owner == peer);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] % 2 == 0)
    handle(data + 1, size - 1);
  else
    header(data + 1, size - 1);
  return 0;
}
