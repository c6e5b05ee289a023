/* SPDX-License-Identifier: Apache-2.0 */
/* The ucx listen handle a peer sends through the bootstrap, checked as ucxConnect does
 * before handing the worker address and the board key to UCX. The input is the handle, in
 * a buffer of exactly its size (at most PAP_TRANSPORT_UCX_HANDLE_BYTES); what the check
 * accepts is read in full, as UCX would read it. */
#include <string.h>

#include "fuzz_common.h"
#include "transport.h"
#include "ucx/ucx.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzQuietLog();
  return 0;
}

static volatile unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > PAP_TRANSPORT_UCX_HANDLE_BYTES) size = PAP_TRANSPORT_UCX_HANDLE_BYTES;
  unsigned char* buf = malloc(size ? size : 1);
  if (buf == NULL) return 0;
  memcpy(buf, data, size);
  struct papUcxHandleInfo info;
  if (papUcxHandleCheck(buf, size, &info) == 0) {
    const unsigned char* a = (const unsigned char*)info.addr;
    const unsigned char* k = (const unsigned char*)info.rkey;
    FUZZ_ASSERT(a >= buf && a + info.addrLen <= buf + size);
    FUZZ_ASSERT(k >= a + info.addrLen && k + info.rkeyLen <= buf + size);
    unsigned sum = 0;
    for (size_t i = 0; i < info.addrLen; i++)
      sum += a[i];
    for (size_t i = 0; i < info.rkeyLen; i++)
      sum += k[i];
    sink = sum;
  }
  free(buf);
  return 0;
}
