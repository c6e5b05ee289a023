/* SPDX-License-Identifier: Apache-2.0 */
/* An MPI in the comparison loop: MPI_Allreduce in place (float32 sum), unmodified. Built
 * with each MPI's own compiler wrapper (run.sh); PAPCMP_NAME names it in the cell lines. */
#include <mpi.h>
#include <stdlib.h>

#include "bench_loop.h"

static int ar32(void* ctx, float* buf, size_t count) {
  (void)ctx;
  return MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
         MPI_SUCCESS;
}

static int ar64(void* ctx, double* buf, size_t count, int op) {
  (void)ctx;
  MPI_Op o = op == 0 ? MPI_MAX : op == 1 ? MPI_MIN : MPI_SUM;
  return MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_DOUBLE, o, MPI_COMM_WORLD) != MPI_SUCCESS;
}

static int barrier(void* ctx) {
  (void)ctx;
  return MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char* name = getenv("PAPCMP_NAME");
  struct cmpLib lib = {name && *name ? name : "mpi", rank, n, NULL, ar32, ar64, barrier, NULL};
  int rc = cmpRun(&lib, argc, argv);
  MPI_Finalize();
  return rc;
}
