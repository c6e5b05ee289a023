/* SPDX-License-Identifier: Apache-2.0 */
/* Transport registry and selection. */
#include "transport.h"

#include <string.h>

#include "log.h"
#include "param.h"

static const struct papTransportOps* const registry[] = {
    &papTransportShm,
#ifdef PAPCCL_HAVE_UCX
    &papTransportUcx,
#endif
#ifdef PAPCCL_HAVE_IB
    &papTransportIb, /* after ucx: picked alone only without ucx; PAPCCL_TRANSPORT=ib forces */
#endif
};

const struct papTransportOps* papTransportSelect(const struct papTransportCtx* ctx) {
  const char* force = papParamTransport();
  int known = 0, unreachable = -1;
  for (size_t i = 0; i < sizeof(registry) / sizeof(registry[0]); i++) {
    const struct papTransportOps* ops = registry[i];
    if (force && strcmp(force, ops->name) != 0) continue;
    known = 1;
    int all = 1;
    for (int p = 0; p < ctx->nranks && all; p++) {
      if (p != ctx->rank && !ops->canConnect(ctx, p)) {
        all = 0;
        unreachable = p;
      }
    }
    if (all) return ops;
  }
  if (force && !known)
    PAP_WARN("transport '%s' (PAPCCL_TRANSPORT) is not in this build", force);
  else if (force)
    PAP_WARN("transport '%s' (PAPCCL_TRANSPORT) cannot reach peer %d", force, unreachable);
  else
    PAP_WARN("no transport can reach peer %d (another host, and no network backend built)",
             unreachable);
  return NULL;
}

const struct papTransportOps* papTransportFallback(const struct papTransportCtx* ctx,
                                                   const struct papTransportOps* failed) {
  for (size_t i = 0; i < sizeof(registry) / sizeof(registry[0]); i++) {
    const struct papTransportOps* ops = registry[i];
    if (ops == failed) continue;
    int all = 1;
    for (int p = 0; p < ctx->nranks && all; p++)
      all = p == ctx->rank || ops->canConnect(ctx, p);
    if (all) return ops;
  }
  return NULL;
}
