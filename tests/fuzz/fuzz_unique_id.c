/* SPDX-License-Identifier: Apache-2.0 */
/* papcclUniqueId bytes as a rank gets them from its launcher (broadcast by the program,
 * read from a file or an environment variable): the input, zero-padded or cut to the id's
 * size, goes through papBootstrapCheckId and papBootstrapIdInfo, as papcclCommInitRank
 * decodes it before connecting to the root. */
#include <string.h>

#include "fuzz_common.h"
#include "wire.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzQuietLog();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  papcclUniqueId* id = malloc(sizeof(*id)); /* exact size: a read past it is caught */
  if (id == NULL) return 0;
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, data, size < sizeof(*id) ? size : sizeof(*id));
  papcclResult_t check = papBootstrapCheckId(id);
  struct papBootstrapAddr root;
  unsigned char key[16];
  papcclResult_t info = papBootstrapIdInfo(id, &root, key);
  FUZZ_ASSERT(check == info);
  FUZZ_ASSERT(check == papcclSuccess || check == papcclInvalidArgument);
  if (info == papcclSuccess) {
    union papSockAddr sa;
    char str[PAP_SOCKET_ADDR_STRLEN];
    FUZZ_ASSERT(bsAddrFromBytes(&root, &sa) == 0); /* what papBootstrapInit connects to */
    FUZZ_ASSERT(papSocketAddrLen(&sa) != 0);
    papSocketAddrToString(&sa, str, sizeof(str));
  }
  free(id);
  return 0;
}
