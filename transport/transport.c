/* SPDX-License-Identifier: Apache-2.0 */
/* Transport registry and selection. */
#include "transport.h"

#include <stdarg.h>
#include <stdio.h>
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

void papTransportBaseInit(struct papTransportBase* base, const struct papTransportCtx* ctx) {
  base->ctx = *ctx;
  memcpy(base->key, ctx->key, sizeof(base->key));
  base->ctx.key = base->key;
  base->ctx.hostIds = NULL;
  base->ctx.pids = NULL;
}

static int bad(char* why, size_t cap, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (why && cap) vsnprintf(why, cap, fmt, ap);
  va_end(ap);
  return -1;
}

/* Whether every member of a table is there (each table's members, one by one). */
static int wakeFull(const struct papWakeOps* t) {
  return t->waitToken && t->wait && t->wake && t->notify;
}
static int liveFull(const struct papLiveOps* t) {
  return t->peerAlive && t->deadPeer && t->depart;
}
static int boardFull(const struct papBoardOps* t) {
  return t->atomic != NULL;
}
static int homeFull(const struct papHomeOps* t) {
  return t->attach && t->call && t->send && t->push && t->flush;
}
static int localFull(const struct papLocalOps* t) {
  return t->staging && t->flat && t->notifyAll;
}

/* Each required member of the required tables (msg's optional probe and abandon aside). */
static int checkRequired(const struct papTransportOps* ops, char* why, size_t cap) {
  const char* n = ops->name;
  if (!ops->canConnect || !ops->init || !ops->listen || !ops->connect || !ops->ready ||
      !ops->close || !ops->finalize)
    return bad(why, cap, "%s: a lifecycle function is missing", n);
  if (!ops->msg || !ops->wake || !ops->live)
    return bad(why, cap, "%s: a required table (msg, wake, live) is missing", n);
  if (!ops->msg->isend || !ops->msg->irecv || !ops->msg->test || !ops->msg->progress)
    return bad(why, cap, "%s: msg lacks one of isend, irecv, test, progress", n);
  if (!wakeFull(ops->wake)) return bad(why, cap, "%s: the wake table lacks a member", n);
  if (!liveFull(ops->live)) return bad(why, cap, "%s: the live table lacks a member", n);
  return 0;
}

int papTransportOpsCheck(const struct papTransportOps* ops, char* why, size_t cap) {
  if (ops == NULL || ops->name == NULL) return bad(why, cap, "a backend without a name");
  const char* n = ops->name;
  if (checkRequired(ops, why, cap) != 0) return -1;
  if ((ops->msg->probe != NULL) != (ops->caps.anySource != 0))
    return bad(why, cap, "%s: caps.anySource is %d but msg->probe is %s", n, ops->caps.anySource,
               ops->msg->probe ? "there" : "NULL");
  /* An optional table is NULL or complete. */
  if (ops->board && !boardFull(ops->board))
    return bad(why, cap, "%s: the board table lacks a member", n);
  if (ops->home && !homeFull(ops->home))
    return bad(why, cap, "%s: the home table lacks a member", n);
  if (ops->local && !localFull(ops->local))
    return bad(why, cap, "%s: the local table lacks a member", n);
  if (ops->board && ops->home) return bad(why, cap, "%s: both a board and a home table", n);
  /* The home rank serves the message board in its progress, and it is gone with rank 0. */
  if (ops->home && (!ops->caps.idleProgress || !ops->caps.remoteBoard))
    return bad(why, cap, "%s: a home table needs caps.idleProgress and caps.remoteBoard", n);
  return 0;
}

const struct papTransportOps* papTransportSelect(const struct papTransportCtx* ctx) {
  const char* force = papParamTransport();
  int known = 0, unreachable = -1;
  for (size_t i = 0; i < sizeof(registry) / sizeof(registry[0]); i++) {
    const struct papTransportOps* ops = registry[i];
    if (force && strcmp(force, ops->name) != 0) continue;
    known = 1;
    char why[160];
    if (papTransportOpsCheck(ops, why, sizeof(why)) != 0) {
      PAP_WARN("transport %s left out: its ops table is inconsistent (%s)", ops->name, why);
      continue;
    }
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
