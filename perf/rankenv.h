/* SPDX-License-Identifier: Apache-2.0 */
/* Finds a program's rank, rank count and local rank in the environment its launcher set. */
#ifndef PAPCCL_PERF_RANKENV_H_
#define PAPCCL_PERF_RANKENV_H_

/*
 * Launchers and the variables read, first match wins:
 *
 *   papcclrun         PAPCCL_RANK, PAPCCL_NRANKS, PAPCCL_LOCAL_RANK
 *   Open MPI mpirun   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
 *   MPICH / Hydra     PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
 *   PMIx              PMIX_RANK, size from PMIX_SIZE or SLURM_NTASKS, local rank from
 *                     SLURM_LOCALID
 *   Slurm srun        SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
 *
 * Knowing its rank is not enough for a papccl program: every rank must also build the same
 * unique id. papcclrun exports PAPCCL_COMM_ID=127.0.0.1:PORT for that. Under mpirun or srun
 * export it yourself, with the host of rank 0 and a free port, so that papcclGetUniqueId
 * returns the same id on every rank and rank 0 serves the rendezvous there:
 *
 *   mpirun -np 4 -x PAPCCL_COMM_ID=node0:29500 ./prog
 *   PAPCCL_COMM_ID=node0:29500 srun -n 4 ./prog       (srun passes the environment on)
 *
 * Header-only; needs libc only.
 */

#include <errno.h>
#include <stdlib.h>

/* Parses environment variable `name` as an int >= 0. Returns 1 and sets *valueOut when it
 * is set and valid, 0 when it is unset or empty, -1 when it is set to something else. */
static inline int papRankEnvInt(const char* name, int* valueOut) {
  const char* s = getenv(name);
  if (s == NULL || *s == '\0') return 0;
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < 0 || v > 0x7fffffff) return -1;
  *valueOut = (int)v;
  return 1;
}

/* Fills *rank, *nranks and *localRank (any may be NULL) from the first launcher found in
 * the list above, and *sourceOut (may be NULL) with the name of the rank variable it used,
 * e.g. "OMPI_COMM_WORLD_RANK". The local rank falls back to the rank when the launcher does
 * not give one (right on one host). Under PMIx without a size variable *nranks is -1.
 * Returns 0 when found. Returns -1 when no launcher variable is set (*sourceOut = NULL) or
 * when one is malformed or the rank is not below the count (*sourceOut names it); the
 * outputs are then left alone. */
static inline int papRankEnvGetFrom(int* rank, int* nranks, int* localRank,
                                    const char** sourceOut) {
  static const struct {
    const char* rank;
    const char* size[2]; /* first set one wins; NULL ends */
    const char* local[2]; /* idem */
  } sources[] = {
      {"PAPCCL_RANK", {"PAPCCL_NRANKS", NULL}, {"PAPCCL_LOCAL_RANK", NULL}},
      {"OMPI_COMM_WORLD_RANK",
       {"OMPI_COMM_WORLD_SIZE", NULL},
       {"OMPI_COMM_WORLD_LOCAL_RANK", NULL}},
      {"PMI_RANK", {"PMI_SIZE", NULL}, {"MPI_LOCALRANKID", NULL}},
      {"PMIX_RANK", {"PMIX_SIZE", "SLURM_NTASKS"}, {"SLURM_LOCALID", NULL}},
      {"SLURM_PROCID", {"SLURM_NTASKS", NULL}, {"SLURM_LOCALID", NULL}},
  };
  if (sourceOut != NULL) *sourceOut = NULL;
  for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
    int r = -1;
    int n = -1;
    int lr = -1;
    int found = papRankEnvInt(sources[i].rank, &r);
    if (found == 0) continue;
    if (sourceOut != NULL) *sourceOut = sources[i].rank;
    if (found < 0) return -1;
    for (int k = 0; k < 2 && sources[i].size[k] != NULL && n < 0; k++) {
      int got = papRankEnvInt(sources[i].size[k], &n);
      if (got < 0 || (got > 0 && n < 1)) {
        if (sourceOut != NULL) *sourceOut = sources[i].size[k];
        return -1;
      }
    }
    /* every launcher but PMIx always sets its size variable */
    if (n < 0 && sources[i].size[1] == NULL) {
      if (sourceOut != NULL) *sourceOut = sources[i].size[0];
      return -1;
    }
    if (n >= 0 && r >= n) return -1;
    for (int k = 0; k < 2 && sources[i].local[k] != NULL && lr < 0; k++) {
      if (papRankEnvInt(sources[i].local[k], &lr) < 0) {
        if (sourceOut != NULL) *sourceOut = sources[i].local[k];
        return -1;
      }
    }
    if (rank != NULL) *rank = r;
    if (nranks != NULL) *nranks = n;
    if (localRank != NULL) *localRank = lr >= 0 ? lr : r;
    return 0;
  }
  return -1;
}

/* papRankEnvGetFrom without the source. Returns 0 when found, -1 when not (see above). */
static inline int papRankEnvGet(int* rank, int* nranks, int* localRank) {
  return papRankEnvGetFrom(rank, nranks, localRank, NULL);
}

#endif /* PAPCCL_PERF_RANKENV_H_ */
