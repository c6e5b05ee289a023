/* SPDX-License-Identifier: Apache-2.0 */
/* Prints what perf/rankenv.h finds in the environment, for test_papcclrun.sh. */
#include <stdio.h>
#include <stdlib.h>

#include "rankenv.h"

int main(void) {
  int rank = -9;
  int nranks = -9;
  int localRank = -9;
  const char* source = NULL;
  if (papRankEnvGetFrom(&rank, &nranks, &localRank, &source) != 0) {
    printf("none %s\n", source != NULL ? source : "-");
    return 3;
  }
  /* the short form must agree */
  int r2 = -9;
  int n2 = -9;
  int l2 = -9;
  if (papRankEnvGet(&r2, &n2, &l2) != 0 || r2 != rank || n2 != nranks || l2 != localRank) {
    printf("mismatch\n");
    return 4;
  }
  const char* commId = getenv("PAPCCL_COMM_ID");
  printf("%s %d %d %d %s\n", source, rank, nranks, localRank, commId != NULL ? commId : "-");
  return 0;
}
