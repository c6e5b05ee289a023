/* SPDX-License-Identifier: Apache-2.0 */
/* Hang diagnosis: what a rank waits for, in words. The waiting thread (the progress-lock
 * holder) composes it at its health checks, every 100 ms of waiting, from the ops it runs
 * (comm->curOps), the arrival board and the engine's unfinished steps; the text goes into
 * the wait's timeout WARN and, under diagLock, into comm->diagText for
 * papcclCommDumpState and the PAPCCL_DUMP_SIGNAL dump. Nothing here runs on a fast path. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrival_int.h"
#include "futex.h"
#include "log.h"

struct diagBuf {
  char* p;
  size_t cap, len;
};

static void put(struct diagBuf* b, const char* fmt, ...) {
  if (b->len + 1 >= b->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  b->len += (size_t)k;
  if (b->len >= b->cap) b->len = b->cap - 1;
}

/* ", " separated ranks r with mark[r] == want (at most 16, then "and N more"). */
static void putRanks(struct diagBuf* b, const unsigned char* mark, int n, int want) {
  int shown = 0, total = 0;
  for (int r = 0; r < n; r++) {
    if (mark[r] != want) continue;
    total++;
    if (shown < 16) put(b, "%s%d", shown++ ? ", " : "", r);
  }
  if (total > shown) put(b, " and %d more", total - shown);
}

static int countMarked(const unsigned char* mark, int n, int want) {
  int c = 0;
  for (int r = 0; r < n; r++)
    c += mark[r] == want;
  return c;
}

void papDiagUpdate(struct papComm* comm, struct papWait* w, const int* seen) {
  int n = comm->nranks;
  unsigned char* mark = (unsigned char*)calloc((size_t)n, 1);
  struct diagBuf b = {comm->diagHint, sizeof(comm->diagHint), 0};
  uint64_t now = papNowNs();
  put(&b, "; rank %d of %d", comm->rank, n);
  for (int i = 0; i < comm->curNops; i++) {
    const struct papOpDesc* op = &comm->curOps[i];
    const struct papCall* c = &op->call;
    int p2p = c->coll == PAP_COLL_SEND || c->coll == PAP_COLL_RECV;
    if (op->comm != comm) continue;
    char call[128];
    papArrivalCallString(papArrivalSignature(c), c->root, call, sizeof(call));
    if (p2p) {
      put(&b, "%s %s %s rank %d", i ? ";" : ":", call, c->coll == PAP_COLL_SEND ? "to" : "from",
          c->root);
      continue;
    }
    put(&b, "%s collective #%llu %s for %.1f s, path %s (%s)", i ? ";" : ":",
        (unsigned long long)c->cseq, call,
        now > op->arr.tArr ? (double)(now - op->arr.tArr) / 1e9 : 0.0, papPathName(op->path.path),
        papPathWhyString(op->path.why));
    int known = mark != NULL;
    if (known && seen != NULL) {
      for (int r = 0; r < n; r++)
        mark[r] = seen[r] != 0;
    } else if (known) {
      known = papArrivalArrived(comm, op, mark) == 0;
    }
    if (!known) continue;
    mark[comm->rank] = 1;
    if (countMarked(mark, n, 0) == 0) {
      put(&b, ", every rank arrived");
    } else {
      put(&b, ", not arrived: ranks ");
      putRanks(&b, mark, n, 0);
    }
  }
  /* The peers the engine's unfinished steps name (the plan's current window). */
  if (mark != NULL && comm->engine.steps != NULL && !papEngineDone(&comm->engine)) {
    const struct papEngine* e = &comm->engine;
    memset(mark, 0, (size_t)n);
    int end = papEngineScanEnd(e);
    for (int i = e->first; i < end; i++)
      if (e->steps[i].state != PAP_STEP_DONE && e->steps[i].peer >= 0 && e->steps[i].peer < n)
        mark[e->steps[i].peer] = 1;
    if (countMarked(mark, n, 1) > 0) {
      put(&b, "; waiting on ranks ");
      putRanks(&b, mark, n, 1);
    }
  }
  free(mark);
  w->hint = comm->diagHint;
  pthread_mutex_lock(&comm->diagLock);
  snprintf(comm->diagText, sizeof(comm->diagText), "%s%s", papWaitWhat(w), comm->diagHint);
  comm->diagActive = 1;
  pthread_mutex_unlock(&comm->diagLock);
}

void papDiagFinish(struct papComm* comm, papcclResult_t res) {
  pthread_mutex_lock(&comm->diagLock);
  comm->diagActive = res == papcclSuccess ? 0 : 2;
  comm->diagResult = res;
  pthread_mutex_unlock(&comm->diagLock);
}
