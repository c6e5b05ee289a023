/* SPDX-License-Identifier: Apache-2.0 */
/* papccl in the comparison loop: one rank per process (papcclrun), papcclAllReduce in place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../arrival.h"

#include "../rankenv.h"
#include "bench_loop.h"
#include "papccl.h"

static int ar32(void* ctx, float* buf, size_t count) {
  return papcclAllReduce(buf, buf, count, papcclFloat32, papcclSum, (papcclComm_t)ctx, NULL) !=
         papcclSuccess;
}

static int ar64(void* ctx, double* buf, size_t count, int op) {
  papcclRedOp_t o = op == 0 ? papcclMax : op == 1 ? papcclMin : papcclSum;
  return papcclAllReduce(buf, buf, count, papcclFloat64, o, (papcclComm_t)ctx, NULL) !=
         papcclSuccess;
}

static int barrier(void* ctx) {
  float x = 0;
  return ar32(ctx, &x, 1);
}

/* --timeline FILE: after the benchmark, 12 allreduces of 16 MiB with the last rank 20 ms late
 * (the selector adapts), then one more whose per-rank stamps go to FILE: rank, arrival, start
 * of its own work (the commit), completion, in us from the first arrival. */
static int timeline(papcclComm_t comm, int rank, int n, const char* path) {
  size_t count = 4 << 20;
  float* buf = (float*)malloc(count * sizeof(float));
  double mine[3], *all = (double*)calloc((size_t)3 * n, sizeof(double));
  if (!buf || !all) return 1;
  papcclPapStats st;
  for (int it = 0; it <= 12; it++) {
    for (size_t i = 0; i < count; i++)
      buf[i] = 1.0f;
    if (barrier(comm)) return 1;
    papPerfComputeUs(rank == n - 1 ? 20000 : 0);
    double t0 = papPerfNow();
    if (ar32(comm, buf, count)) return 1;
    double t1 = papPerfNow();
    if (papcclCommGetPapStats(comm, &st) != papcclSuccess) return 1;
    mine[0] = t0;
    mine[1] = t0 + st.lastPlanWaitUs * 1e-6;
    mine[2] = t1;
  }
  if (papcclAllGather(mine, all, 3, papcclFloat64, comm, NULL) != papcclSuccess) return 1;
  if (rank == 0) {
    FILE* f = fopen(path, "w");
    if (!f) {
      fprintf(stderr, "papccl_cmp: cannot write %s\n", path);
      return 1;
    }
    double a0 = all[0];
    for (int r = 0; r < n; r++)
      a0 = all[3 * r] < a0 ? all[3 * r] : a0;
    fprintf(f, "# papccl allreduce, 16 MiB, %d ranks, rank %d 20 ms late; plan %s\n", n, n - 1,
            st.lastAlgoName);
    fprintf(f, "# rank arrival_us start_us done_us\n");
    for (int r = 0; r < n; r++)
      fprintf(f, "%d %.1f %.1f %.1f\n", r, (all[3 * r] - a0) * 1e6, (all[3 * r + 1] - a0) * 1e6,
              (all[3 * r + 2] - a0) * 1e6);
    fclose(f);
  }
  free(buf);
  free(all);
  return 0;
}

int main(int argc, char** argv) {
  const char* timelinePath = NULL;
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--timeline") == 0) {
      timelinePath = argv[i + 1];
      for (int j = i; j + 2 <= argc; j++)
        argv[j] = argv[j + 2];
      argc -= 2;
      break;
    }
  }
  int rank = 0, n = 1, local = 0;
  if (papRankEnvGet(&rank, &n, &local) != 0) {
    fprintf(stderr, "papccl_cmp: start it with papcclrun (no rank variables found)\n");
    return 2;
  }
  papcclUniqueId id;
  papcclComm_t comm;
  if (papcclGetUniqueId(&id) != papcclSuccess ||
      papcclCommInitRank(&comm, n, id, rank) != papcclSuccess) {
    fprintf(stderr, "papccl_cmp: init failed: %s\n", papcclGetLastError(NULL));
    return 1;
  }
  struct cmpLib lib = {"papccl", rank, n, comm, ar32, ar64, barrier, NULL};
  int rc = cmpRun(&lib, argc, argv);
  if (rc == 0 && timelinePath) rc = timeline(comm, rank, n, timelinePath);
  papcclCommDestroy(comm);
  return rc;
}
