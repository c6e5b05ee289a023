/* SPDX-License-Identifier: Apache-2.0 */
/* Per-op statistics: the predicted wait, completion (stamps, order, skew, tail, the
 * selector's feedback), the periodic PAP report and papcclCommGetPapStats's figures. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrival_int.h"
#include "futex.h"
#include "log.h"
#include "param.h"

static int papAlgoStatsId(int coll, int algo) {
  if (coll != PAP_COLL_ALLREDUCE)
    return algo == PAP_ALGO_ARRIVAL ? papcclPapAlgoPap : papcclPapAlgoOther;
  switch (algo) {
  case PAP_ALGO_RING:
    return papcclPapAlgoRing;
  case PAP_ALGO_RHD:
    return papcclPapAlgoRhd;
  case PAP_ALGO_AC2S:
    return papcclPapAlgoAc2s;
  case PAP_ALGO_AC2S_DET:
    return papcclPapAlgoAc2sDet;
  case PAP_ALGO_CHAIN:
    return papcclPapAlgoChain;
  case PAP_ALGO_SMALL:
    return papcclPapAlgoSmall;
  case PAP_ALGO_FLAT:
    return papcclPapAlgoFlat;
  default:
    return papcclPapAlgoNone;
  }
}

/* The prediction context of an op with signature sig after the recent collectives. */
static int contextOf(const struct papArrivalState* ps, uint64_t sig) {
  uint64_t h = sig * 0x9e3779b97f4a7c15ull;
  h ^= (ps->recentSig[0] + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull;
  h ^= (ps->recentSig[1] + 0x8cb92ba72f3d8dd7ull) * 0x94d049bb133111ebull;
  h ^= h >> 31;
  return (int)(h % PAP_PREDICT_CONTEXTS);
}

void papArrivalPredict(struct papComm* comm, struct papOpDesc* op, uint64_t sig) {
  struct papArrivalState* ps = comm->arrival;
  struct papArrival* a = &op->arr;
  a->ctx = contextOf(ps, sig);
  double w = ps->waitEma[a->ctx];
  a->due = w >= 1000.0 ? a->tArr + (uint64_t)w : 0; /* 1 us: a wait worth predicting */
  a->spread = (uint64_t)ps->waitDev[a->ctx];
  ps->recentSig[1] = ps->recentSig[0];
  ps->recentSig[0] = sig;
}

/* Reads every arrival of the op (order, stamps); 0 when the slot is incomplete or reused.
 * The slot is read whole (one round trip on a remote board), again while an entry is still
 * being written, then the word once more: a rank reusing the slot changes the word before
 * it writes a stamp. */
static int readArrivals(struct papComm* comm, const struct papArrival* a) {
  struct papArrivalState* ps = comm->arrival;
  int n = comm->nranks;
  uint64_t* buf = ps->slotBuf;
  int filled = 0;
  if (ps->msg) { /* the home sent the slot after the last arrival; else ask for it */
    pthread_mutex_lock(&ps->mailLock);
    struct papMail* m = papHomeMail(ps, a->slot, a->gen);
    int have = m != NULL && m->hasFull;
    if (have) memcpy(buf, m->full, SLOT_WORDS(n) * sizeof(uint64_t));
    pthread_mutex_unlock(&ps->mailLock);
    if (!have) {
      struct hmReq q = {HM_READ, (uint32_t)a->slot, a->gen, comm->rank, 0, 0};
      size_t len = 0;
      if (papHomeCall(comm, &q, &len) != papcclSuccess || len != SLOT_WORDS(n) * sizeof(uint64_t))
        return 0;
      memcpy(buf, ps->reply, len);
    }
    if (PAP_W_GEN(buf[0]) != a->gen || PAP_W_COUNT(buf[0]) != (uint32_t)n) return 0;
    for (int p = 0; p < n; p++) {
      int r = entryRank(buf[SLOT_HDR + p], a->gen, n);
      if (r < 0) return 0;
      ps->order[p] = r;
    }
    for (int r = 0; r < n; r++)
      ps->stamps[r] = buf[SLOT_HDR + n + r];
    return 1;
  }
  for (int tries = 0; tries < 1000 && !filled; tries++) {
    if (tries) sched_yield();
    if (bRead(comm, IDX_WORD(n, a->slot), SLOT_WORDS(n), buf) != papcclSuccess) return 0;
    if (PAP_W_GEN(buf[0]) != a->gen || PAP_W_COUNT(buf[0]) != (uint32_t)n) return 0;
    filled = 1;
    for (int p = 0; p < n && filled; p++)
      filled = (uint32_t)(buf[SLOT_HDR + p] >> 32) == a->gen;
  }
  if (!filled) return 0;
  for (int p = 0; p < n; p++) {
    int r = (int)(uint32_t)buf[SLOT_HDR + p] - 1;
    if (r < 0 || r >= n) return 0;
    ps->order[p] = r;
  }
  for (int r = 0; r < n; r++)
    ps->stamps[r] = buf[SLOT_HDR + n + r];
  uint64_t w = 0;
  if (bLoad(comm, IDX_WORD(n, a->slot), &w) != papcclSuccess || PAP_W_GEN(w) != a->gen) return 0;
  return 1;
}

static int cmpU64(const void* x, const void* y) {
  uint64_t a = *(const uint64_t*)x, b = *(const uint64_t*)y;
  return a < b ? -1 : a > b;
}

static void report(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  int64_t every = papParamPapReport();
  if (every <= 0 || ++ps->reportOps < (uint64_t)every) return;
  int worst = -1;
  uint64_t worstN = 0;
  for (int r = 0; r < ps->nranks && r < PAPCCL_PAP_STATS_MAX_RANKS; r++) {
    if (ps->reportLate[r] > worstN) {
      worstN = ps->reportLate[r];
      worst = r;
    }
  }
  double nc = ps->reportComplete ? (double)ps->reportComplete : 1.0;
  char habit[96] = "no habitual late rank";
  if (worst >= 0 && ps->reportComplete >= 8 && worstN * 2 > ps->reportComplete)
    snprintf(habit, sizeof(habit), "rank %d was last in %llu of %llu", worst,
             (unsigned long long)worstN, (unsigned long long)ps->reportComplete);
  if (comm->rank == 0) {
    char paths[160];
    papPathSummary(ps, paths, sizeof(paths));
    PAP_INFO(PAP_LOG_PAP,
             "PAP: last %llu collectives (%llu with a PAP-aware plan): mean skew %.1f us, mean "
             "tail %.1f us, %s; last ran %s; ops by path since init: %s",
             (unsigned long long)ps->reportOps, (unsigned long long)ps->reportPap,
             ps->reportSkew / nc / 1e3, ps->reportTail / nc / 1e3, habit, ps->st.lastAlgoName,
             paths);
  }
  ps->reportOps = 0;
  ps->reportPap = 0;
  ps->reportComplete = 0;
  ps->reportSkew = ps->reportTail = 0;
  memset(ps->reportLate, 0, sizeof(ps->reportLate));
}

/* The op's entry in the statistics: its number, algorithm and early ranks. */
static void countOp(struct papArrivalState* ps, const struct papOpDesc* op, int n) {
  const struct papArrival* a = &op->arr;
  papcclPapStats* st = &ps->st;
  st->ops++;
  st->lastSeq = op->call.seq;
  st->lastExpectedWaitUs = a->due > a->tArr ? (double)(a->due - a->tArr) / 1e3 : 0;
  st->lastAlgo = papAlgoStatsId(op->call.coll, op->call.commit.algo);
  const char* name = op->call.coll == PAP_COLL_ALLREDUCE || op->call.commit.algo == PAP_ALGO_ARRIVAL
                         ? papAlgoName((enum papAlgo)op->call.commit.algo)
                         : "classic";
  if (name != ps->lastName) { /* the names are constants: copy only a change */
    strncpy(st->lastAlgoName, name, sizeof(st->lastAlgoName) - 1);
    st->lastAlgoName[sizeof(st->lastAlgoName) - 1] = '\0';
    ps->lastName = name;
  }
  st->lastEarly = op->call.coll == PAP_COLL_ALLREDUCE || op->call.commit.algo == PAP_ALGO_ARRIVAL
                      ? op->call.commit.nE
                      : n;
  if (op->call.commit.algo >= PAP_ALGO_AC2S && a->decided) {
    st->papOps++;
    ps->reportPap++;
  }
}

/* The arrivals' order and stamps (ps->order, ps->stamps; st->lastComplete: all there), and
 * a board op's mismatch verdict; the slot is released. An op whose plan every rank chose
 * alone released its slot at arrival (a group may hold more collectives than there are
 * slots); over a network its slot may be reused or gone (rank 0 destroyed) by now, so only
 * ops with a commit read it back there. */
static papcclResult_t readOrder(struct papComm* comm, struct papOpDesc* op) {
  struct papArrivalState* ps = comm->arrival;
  struct papArrival* a = &op->arr;
  int n = comm->nranks;
  if (a->flat) {
    /* Every stamp came with its line (flat.c); the order is by stamp, ties by rank. */
    for (int r = 0; r < n; r++) { /* insertion in rank order keeps ties by rank */
      int j = r;
      for (; j > 0 && ps->stamps[ps->order[j - 1]] > ps->stamps[r]; j--)
        ps->order[j] = ps->order[j - 1];
      ps->order[j] = r;
    }
    ps->st.lastComplete = 1;
    return papcclSuccess;
  }
  int readable = a->decided || !comm->tops->caps.remoteBoard;
  ps->st.lastComplete = readable && readArrivals(comm, a);
  papcclResult_t res = papMismatchVerify(comm, op, readable, ps->st.lastComplete);
  (void)papBoardRelease(comm, a);
  return res;
}

/* An op whose arrivals are not all known: its times only (entries past N stay as
 * papArrivalInit set them). */
static void noOrder(papcclPapStats* st, const struct papArrival* a, uint64_t tDone, int n) {
  int nst = n < PAPCCL_PAP_STATS_MAX_RANKS ? n : PAPCCL_PAP_STATS_MAX_RANKS;
  for (int i = 0; i < nst; i++) {
    st->lastOrder[i] = -1;
    st->lastLatenessUs[i] = 0;
  }
  st->lastLateRank = -1;
  st->lastSkewUs = st->lastTailUs = 0;
  st->lastTimeInCollUs = (double)(tDone - a->tArr) / 1e3;
  st->lastPlanWaitUs = a->tPlan > a->tArr ? (double)(a->tPlan - a->tArr) / 1e3 : 0;
}

/* What this rank waited for the last arrival, for the next prediction in its context: the
 * prediction and its mean deviation, as TCP estimates a round trip and its variation: the
 * first sample of a context is the best guess, half of it the deviation (the first call
 * after init often waits longer than the steady state); then EMAs of 1/4. */
static void learnWait(struct papArrivalState* ps, const struct papArrival* a, double waited) {
  if (ps->waitSamples[a->ctx]++ == 0) {
    ps->waitEma[a->ctx] = waited;
    ps->waitDev[a->ctx] = waited / 2;
  } else {
    double err = waited - ps->waitEma[a->ctx];
    ps->waitDev[a->ctx] += (fabs(err) - ps->waitDev[a->ctx]) / 4;
    ps->waitEma[a->ctx] += err / 4;
  }
}

/* In-burst gap: mean of the gaps between consecutive arrivals, the largest left out. */
static double burstGap(struct papArrivalState* ps, int n) {
  if (n < 3) return 0;
  uint64_t* s = ps->sorted;
  memcpy(s, ps->stamps, sizeof(uint64_t) * (size_t)n);
  qsort(s, (size_t)n, sizeof(uint64_t), cmpU64);
  double sum = 0, mx = 0;
  for (int i = 0; i + 1 < n; i++) {
    double g = (double)(s[i + 1] - s[i]);
    sum += g;
    if (g > mx) mx = g;
  }
  return (sum - mx) / (double)(n - 2);
}

papcclResult_t papArrivalComplete(struct papComm* comm, struct papOpDesc* op) {
  struct papArrival* a = &op->arr;
  struct papArrivalState* ps = comm->arrival;
  if (ps == NULL) return papcclSuccess;
  /* A message board's home found this collective, or one before it, mismatched. */
  PAP_CHECK(papArrivalPoll(comm, PAP_POLL_NOTICE, NULL, NULL));
  if (!a->used && !a->flat) return papcclSuccess;
  int n = comm->nranks;
  uint64_t tDone = papNowNs();
  papcclPapStats* st = &ps->st;
  countOp(ps, op, n);
  papcclResult_t res = readOrder(comm, op);
  if (res != papcclSuccess) return res;
  if (!st->lastComplete) {
    noOrder(st, a, tDone, n);
    report(comm);
    return papcclSuccess;
  }
  uint64_t aMin = UINT64_MAX, aMax = 0;
  for (int r = 0; r < n; r++) {
    if (ps->stamps[r] < aMin) aMin = ps->stamps[r];
    if (ps->stamps[r] > aMax) aMax = ps->stamps[r];
  }
  double skew = (double)(aMax - aMin);
  learnWait(ps, a, aMax > a->tArr ? (double)(aMax - a->tArr) : 0.0);
  double tail = tDone > aMax ? (double)(tDone - aMax) : 0.0;
  double inColl = (double)(tDone - a->tArr);
  int lateRank = ps->order[n - 1];
  for (int p = 0; p < n && p < PAPCCL_PAP_STATS_MAX_RANKS; p++)
    st->lastOrder[p] = ps->order[p];
  for (int r = 0; r < n; r++) {
    double l = (double)(ps->stamps[r] - aMin);
    if (r < PAPCCL_PAP_STATS_MAX_RANKS) st->lastLatenessUs[r] = l / 1e3;
    ps->sumLate[r] += l;
  }
  ps->late[lateRank]++;
  if (lateRank < PAPCCL_PAP_STATS_MAX_RANKS) ps->reportLate[lateRank]++;
  st->lastLateRank = lateRank;
  st->lastSkewUs = skew / 1e3;
  st->lastTailUs = tail / 1e3;
  st->lastTimeInCollUs = inColl / 1e3;
  st->lastPlanWaitUs = a->tPlan > a->tArr ? (double)(a->tPlan - a->tArr) / 1e3 : 0;
  st->completeOps++;
  ps->sumSkew += skew;
  ps->sumTail += tail;
  ps->sumInColl += inColl;
  if (st->lastSkewUs > st->maxSkewUs) st->maxSkewUs = st->lastSkewUs;
  ps->reportComplete++;
  ps->reportSkew += skew;
  ps->reportTail += tail;
  double gap = burstGap(ps, n);
  if (!a->flat) { /* flat ops do not consult it */
    int alg = op->call.commit.algo;
    int pap =
        a->decided && alg >= PAP_ALGO_AC2S && alg != PAP_ALGO_AC2S_DET && alg != PAP_ALGO_FLAT;
    papSelectObserve(comm, op, skew, gap, tail, pap);
  }
  report(comm);
  return papcclSuccess;
}

papcclResult_t papArrivalStats(struct papComm* comm, papcclPapStats* stats) {
  pthread_mutex_lock(&comm->progressLock);
  struct papArrivalState* ps = comm->arrival;
  if (ps == NULL) {
    pthread_mutex_unlock(&comm->progressLock);
    PAP_WARN("papcclCommGetPapStats: communicator (rank %d) is not initialized yet", comm->rank);
    return papcclInvalidUsage;
  }
  *stats = ps->st;
  double nc = ps->st.completeOps ? (double)ps->st.completeOps : 1.0;
  stats->avgSkewUs = ps->sumSkew / nc / 1e3;
  stats->avgTailUs = ps->sumTail / nc / 1e3;
  stats->avgTimeInCollUs = ps->sumInColl / nc / 1e3;
  stats->habitualLateRank = -1;
  papPathStats(ps, stats);
  for (int r = 0; r < ps->nranks; r++) {
    if (r < PAPCCL_PAP_STATS_MAX_RANKS) {
      stats->lateCount[r] = ps->late[r];
      stats->avgLatenessUs[r] = ps->sumLate[r] / nc / 1e3;
    }
    if (ps->st.completeOps >= 8 && ps->late[r] * 2 > ps->st.completeOps)
      stats->habitualLateRank = r;
  }
  pthread_mutex_unlock(&comm->progressLock);
  return papcclSuccess;
}

void papArrivalInherit(struct papComm* child, const struct papComm* parent) {
  struct papArrivalState* to = child->arrival;
  const struct papArrivalState* from = parent->arrival;
  if (to == NULL || from == NULL) return;
  /* The selector's measurements and modes are this rank's own. A message board's call
   * counts and agreed plan kind must be the same on every rank of the new comm, and its new
   * ranks start at zero: so do these. */
  memcpy(to->buckets, from->buckets, sizeof(to->buckets));
  for (int c = 0; c < PAP_SEL_COLLS; c++) {
    for (int b = 0; b < PAP_SEL_BUCKETS; b++) {
      to->buckets[c][b].calls = 0;
      to->buckets[c][b].agreedPap = 0;
      to->buckets[c][b].nextProbe = 0;
      to->buckets[c][b].probeGap = 0;
    }
  }
  memcpy(to->waitEma, from->waitEma, sizeof(to->waitEma));
  memcpy(to->waitDev, from->waitDev, sizeof(to->waitDev));
  memcpy(to->waitSamples, from->waitSamples, sizeof(to->waitSamples));
  memcpy(to->recentSig, from->recentSig, sizeof(to->recentSig));
}
