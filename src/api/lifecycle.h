/* SPDX-License-Identifier: Apache-2.0 */
/* What the files of the comm's lifecycle share (private to src/api): comm_setup.c,
 * comm_init.c, comm_split.c, comm_destroy.c, comm_query.c. */
#ifndef PAPCCL_API_LIFECYCLE_H_
#define PAPCCL_API_LIFECYCLE_H_

#include <stdint.h>

#include "api.h"

/* splitmix64's finalizer: host ids and child keys. */
static inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ---- comm_setup.c ---------------------------------------------------------------------- */
/* Frees everything but the shell. Safe on a partly set up comm. */
void papCommTeardown(struct papComm* comm);
/* A child comm whose bootstrap is connected: the rest of its setup (split and shrink). */
papcclResult_t papCommChildSetup(struct papComm* parent, struct papComm* child);

/* ---- comm_init.c ----------------------------------------------------------------------- */
/* The arguments of an init (fn names the call in the WARN): output pointer, nranks, rank,
 * config, id. */
papcclResult_t papCommCheckInitArgs(const char* fn, papcclComm_t* comm, int nranks, int rank,
                                    const papcclUniqueId* id, const papcclConfig_t* config);
/* A blocking init of the shell comm through id: *commOut = comm, or comm freed on failure
 * (the log context is reset either way). */
papcclResult_t papCommInitShell(struct papComm* comm, const papcclUniqueId* id,
                                struct papComm** commOut);

/* ---- comm_destroy.c -------------------------------------------------------------------- */
/* No operation of comm runs or waits to run, but the caller's own call. */
int papCommQuiescent(struct papComm* comm);
/* Revokes comm (papcclCommRevoke, and shrink's ABORT): new operations are refused, the ones
 * in flight stop. */
void papCommRevokeOps(struct papComm* comm);
/* Drains other threads' calls (the caller's own call is counted too). No deadline: each of
 * those calls ends within its own (the abort flag is set, or the comm is dead). */
void papCommWaitCallsDrained(struct papComm* comm);

#endif /* PAPCCL_API_LIFECYCLE_H_ */
