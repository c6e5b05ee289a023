/* SPDX-License-Identifier: Apache-2.0 */
/* Compile test of the public header as strict C99 (built alone with -std=c99 -pedantic-errors)
 * and a probe that the API test calls to check the C view of the types. */
#include "papccl.h"

/* Static assertions the C99 way: a negative array size fails the build. */
typedef char papTestC99IdSize[sizeof(papcclUniqueId) == PAPCCL_UNIQUE_ID_BYTES ? 1 : -1];
typedef char papTestC99ResultCount[papcclNumResults == 8 ? 1 : -1];
typedef char papTestC99TypeCount[papcclNumTypes == 12 ? 1 : -1];
typedef char papTestC99OpCount[papcclNumOps == 5 ? 1 : -1];

int papTestHeaderC99Probe(void);

/* Returns 0 when the C view of the header agrees with what the C++ test expects. */
int papTestHeaderC99Probe(void) {
  papcclConfig_t config = PAPCCL_CONFIG_INITIALIZER;
  papcclComm_t comm = PAPCCL_COMM_NULL;
  papcclStream_t stream = NULL;
  papcclResult_t (*fn)(const void*, void*, size_t, papcclDataType_t, papcclRedOp_t, papcclComm_t,
                       papcclStream_t) = papcclAllReduce;
  int bad = 0;
  if (config.size != sizeof(papcclConfig_t)) bad |= 1;
  if (config.magic != PAPCCL_CONFIG_MAGIC) bad |= 2;
  if (config.version != (unsigned)PAPCCL_VERSION_CODE) bad |= 4;
  if (config.blocking != PAPCCL_CONFIG_UNDEF_INT || config.netName != PAPCCL_CONFIG_UNDEF_PTR ||
      config.commName != PAPCCL_CONFIG_UNDEF_PTR ||
      config.nvlinkCentricSched != PAPCCL_CONFIG_UNDEF_INT)
    bad |= 8;
  if (comm != NULL || stream != NULL || fn == NULL) bad |= 16;
  if (PAPCCL_VERSION(2, 28, 3) != 22803) bad |= 32;
  if (PAPCCL_SPLIT_NOCOLOR != -1) bad |= 64;
  return bad;
}
