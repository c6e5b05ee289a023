/* SPDX-License-Identifier: Apache-2.0 */
/* Transport registry and selection. */
#include "transport.h"

#include <string.h>

#include "log.h"
#include "param.h"

static const struct papTransportOps* const registry[] = {&papTransportShm};

const struct papTransportOps* papTransportSelect(const struct papTransportCtx* ctx, int peer) {
  const char* force = papParamTransport();
  for (size_t i = 0; i < sizeof(registry) / sizeof(registry[0]); i++) {
    const struct papTransportOps* ops = registry[i];
    if (force && strcmp(force, ops->name) != 0) continue;
    if (ops->canConnect(ctx, peer)) return ops;
  }
  if (force)
    PAP_WARN("transport '%s' (PAPCCL_TRANSPORT) cannot reach peer %d", force, peer);
  else
    PAP_WARN("no transport can reach peer %d (different host and no network backend built)", peer);
  return NULL;
}
