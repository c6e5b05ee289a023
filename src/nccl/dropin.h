/* SPDX-License-Identifier: Apache-2.0 */
/* What the drop-in NCCL library's files share (private to src/nccl/): the export macros,
 * the casts between the two APIs and the two refusal helpers. */
#ifndef PAPCCL_NCCL_DROPIN_H_
#define PAPCCL_NCCL_DROPIN_H_

#include "nccl.h"
#include "papccl.h"

#define NCCL_EXPORT __attribute__((visibility("default")))
/* ncclX: a weak second name for pncclX (same code, same address), as NVIDIA's library has,
 * so that a profiling layer can define ncclX and forward to pncclX. */
#define NCCL_ALIAS(name) \
  extern __typeof__(p##name) name __attribute__((weak, alias("p" #name), visibility("default")))

#define COMM(c) ((papcclComm_t)(c))
#define STREAM(s) ((papcclStream_t)(s))
#define DT(d) ((papcclDataType_t)(d))
#define OP(o) ((papcclRedOp_t)(o))
#define RES(r) ((ncclResult_t)(r))

/* NCCL's environment variables that the drop-in honours, each with its papccl name: copied
 * to it at load (nccl.c), and keys of the parameter API (param_api.c). */
#define PAP_NCCL_ENV_NAMES 4
extern const char* const papNcclEnvNames[PAP_NCCL_ENV_NAMES][2];

/* Logs why fn is refused (into comm's last error when comm is usable) and returns
 * ncclInvalidUsage. */
ncclResult_t papNcclNotImplemented(ncclComm_t comm, const char* fn, const char* what);
/* Logs "fn: what" and returns ncclInvalidArgument. */
ncclResult_t papNcclBadArg(const char* fn, const char* what);

#endif /* PAPCCL_NCCL_DROPIN_H_ */
