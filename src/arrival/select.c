/* SPDX-License-Identifier: Apache-2.0 */
/* The selector: per size bucket, an EMA of the observed skew fed into the alpha-beta cost
 * model of docs/PAP.md section 3.5, with hysteresis (docs/PAP-ENGINE.md section 3). It is
 * the one place an op's algorithm is chosen. */
#include <math.h>
#include <stdint.h>

#include "algo.h"
#include "arrival_int.h"
#include "comm.h"
#include "log.h"
#include "param.h"

#define PAP_SEL_CHECK 4
/* A bucket's first samples are start-up: page faults on first touch of the buffers and
 * transport state set up on first use inflate skew and tail many times over (docs/PAP-ENGINE.md
 * section 13); they feed no estimate. */
#define PAP_SEL_WARMUP 4

static int bucketOf(size_t bytes) {
  int b = 0;
  while (b + 1 < PAP_SEL_BUCKETS && ((size_t)1 << (b + 1)) <= bytes)
    b++;
  return b;
}

/* Model constants in ns and ns/byte. */
struct model {
  double alpha, beta, gamma, o, alphaC;
};

static struct model modelParams(void) {
  struct model m;
  m.alpha = (double)papParamPapAlphaNs();
  m.beta = (double)papParamPapBetaPs() / 1000.0;
  m.gamma = (double)papParamPapGammaPs() / 1000.0;
  m.o = m.alpha * 0.3;
  m.alphaC = 2 * m.alpha;
  return m;
}

/* Time of the best classic allreduce (ring or RHD) on balanced arrivals, which is also its
 * tail after a late arrival. */
static double tClassicAllReduce(const struct model* m, double bytes, int n) {
  double f = (double)(n - 1) / n;
  double bw = 2 * f * bytes * m->beta + f * bytes * m->gamma;
  double ring = 2 * (n - 1) * m->alpha + bw;
  double rhd = 2 * ceil(log2((double)n)) * m->alpha + bw;
  return ring < rhd ? ring : rhd;
}

/* Classic time, PAP tail after the last arrival, and the early ranks' pre-work, for the
 * collectives other than AllReduce (docs/PAP.md section 4). */
static void modelOther(const struct model* m, int coll, double bytes, int n, double* classic,
                       double* tail, double* pre) {
  double blk = bytes / n, c = (double)papParamChunkSize();
  if (c > bytes) c = bytes;
  switch (coll) {
  case PAP_COLL_REDUCESCATTER:
    *classic = (n - 1) * (m->alpha + blk * (m->beta + m->gamma));
    *tail = 2 * m->alpha + (bytes - blk) * m->beta + blk * (m->beta + m->gamma);
    *pre = (n - 2) * (m->alpha + blk * (m->beta + m->gamma));
    break;
  case PAP_COLL_ALLGATHER:
    *classic = (n - 1) * (m->alpha + blk * m->beta);
    *tail = 2 * m->alpha + blk * m->beta + (bytes - blk) * m->beta;
    *pre = (n - 2) * (m->alpha + blk * m->beta);
    break;
  case PAP_COLL_BROADCAST:
    *classic = bytes * m->beta + (n - 1) * (m->alpha + c * m->beta);
    *tail = m->alpha + bytes * m->beta;
    *pre = bytes * m->beta + (n - 2) * (m->alpha + c * m->beta);
    break;
  default: /* reduce */
    *classic = bytes * (m->beta + m->gamma) + (n - 1) * (m->alpha + c * (m->beta + m->gamma));
    *tail = m->alpha + bytes * (m->beta + m->gamma);
    *pre = bytes * (m->beta + m->gamma) + (n - 2) * (m->alpha + c * (m->beta + m->gamma));
    break;
  }
}

static double tClassic(const struct model* m, int coll, double bytes, int n) {
  if (coll == PAP_COLL_ALLREDUCE) return tClassicAllReduce(m, bytes, n);
  double c, t, p;
  modelOther(m, coll, bytes, n, &c, &t, &p);
  return c;
}

/* Gain of the PAP plan (AC2S, or the small variant at or below PAPCCL_PAP_SMALL_MAX_BYTES;
 * the section 4 plans for the other collectives) over the classic plan given a skew
 * estimate (ns); > 0 favours the PAP plan. */
static double gain(const struct model* m, int coll, double bytes, int n, double skewQ,
                   double* tBest) {
  double best, tail, pre;
  if (coll != PAP_COLL_ALLREDUCE) {
    modelOther(m, coll, bytes, n, &best, &tail, &pre);
  } else if (bytes <= (double)papParamPapSmallMaxBytes()) {
    best = tClassicAllReduce(m, bytes, n);
    tail = m->alpha + (n - 1) * (m->o + bytes * m->beta) + 2 * bytes * m->gamma;
    pre = m->alphaC + m->alpha + (n - 2) * (m->o + bytes * m->beta) + (n - 2) * bytes * m->gamma;
  } else {
    best = tClassicAllReduce(m, bytes, n);
    tail = 2 * m->alpha + (n - 1) * m->o + bytes * m->beta + bytes / (n - 1) * m->gamma;
    pre = m->alphaC + m->alpha + (n - 2) * m->o +
          (double)(n - 2) / (n - 1) * bytes * (m->beta + m->gamma);
  }
  double wait = pre - skewQ;
  if (wait < 0) wait = 0;
  *tBest = best;
  return best - (tail + wait);
}

/* PAPCCL_ALGO, parsed once (again after papParamReset). */
static int forcedAlgo(void) {
  /* One word: the parameter generation it was parsed in (high half), the algorithm + 1 (low
   * half; 0: not parsed yet). Threads that parse at once store the same value. */
  static uint64_t cache;
  uint64_t g = papParamGeneration();
  uint64_t c = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
  if ((uint32_t)c != 0 && c >> 32 == g) return (int)(uint32_t)c - 1;
  const char* f = papParamAlgo();
  int algo = f ? papAlgoFromName(f) : PAP_ALGO_AUTO;
  __atomic_store_n(&cache, g << 32 | (uint32_t)(algo + 1), __ATOMIC_RELEASE);
  return algo;
}

int papSelectForcedAlgo(const struct papOpDesc* op) {
  return op->forcedAlgo != PAP_ALGO_AUTO ? op->forcedAlgo : forcedAlgo();
}

/* The classic allreduce: the call's or PAPCCL_ALGO's ring or rhd, else by size. */
static int classicAllReduce(const struct papOpDesc* op, size_t bytes) {
  int f = papSelectForcedAlgo(op);
  return f == PAP_ALGO_RING || f == PAP_ALGO_RHD ? f : (int)papAlgoClassicAllReduce(bytes);
}

void papSelectLocal(const struct papComm* comm, struct papOpDesc* op) {
  if (op->call.coll != PAP_COLL_ALLREDUCE) {
    op->call.commit.algo = PAP_ALGO_AUTO; /* the classic plan */
    return;
  }
  int n = comm->nranks;
  size_t bytes = op->call.count * papKernTypeSize(op->call.dtype);
  op->call.commit.nE = n;
  op->call.commit.owners = comm->arrival->ident;
  if (papParamDeterministic()) {
    op->call.commit.algo = PAP_ALGO_AC2S_DET;
    return;
  }
  int f = papSelectForcedAlgo(op);
  if ((f == PAP_ALGO_AC2S || f == PAP_ALGO_SMALL) && papParamPap()) {
    op->call.commit.algo = f; /* over all ranks in rank order: no commit needed */
    return;
  }
  /* The chain needs the arrival order: inside a group it runs the classic plan. */
  op->call.commit.algo = classicAllReduce(op, bytes);
}

/* The longest gap between a message board's probes, in PAPCCL_PAP_PROBE: 16 x 4 = 64 calls,
 * about 1.3 ms of 20 us calls before a new straggler is seen at 8 B. */
#define PAP_SEL_PROBE_GAP_MAX 16

static struct papSelBucket* bucketFor(struct papComm* comm, const struct papOpDesc* op) {
  int coll = op->call.coll < PAP_SEL_COLLS ? op->call.coll : 0;
  return &comm->arrival->buckets[coll][bucketOf(papSelectBytes(comm, op))];
}

int papArrivalNeedsCommit(struct papComm* comm, const struct papOpDesc* op) {
  /* The op's path says (papPathDecide); only an automatic choice on a message board asks the
   * probe below. */
  if (op->path.commit != 2) return op->path.commit;
  /* A message board costs a round trip to rank 0 before the plan is known, as much as a
   * small allreduce itself over TCP (docs/PAP-ENGINE.md section 13). While the last commit
   * of this size chose a classic plan and did not ask to keep watching, only probe calls ask
   * the decider (and measure the arrivals for the selector); the others plan classic alone,
   * as the decider would. The gap between probes starts at PAPCCL_PAP_PROBE and doubles
   * with each probe that finds nothing to do (balanced ranks pay for fewer round trips), up
   * to PAP_SEL_PROBE_GAP_MAX times it; a PAP-aware verdict starts it over. Every rank counts
   * the same calls and reads the same commits, so all agree. */
  struct papSelBucket* b = bucketFor(comm, op);
  uint64_t k = b->calls++;
  return b->agreedPap || k >= b->nextProbe;
}

void papSelectAgree(struct papComm* comm, const struct papOpDesc* op, int algo, int watch) {
  if (op->call.coll >= PAP_SEL_COLLS) return;
  struct papSelBucket* b = bucketFor(comm, op);
  int wasPap = b->agreedPap;
  b->agreedPap = watch || algo == PAP_ALGO_AC2S || algo == PAP_ALGO_SMALL ||
                 algo == PAP_ALGO_CHAIN || algo == PAP_ALGO_ARRIVAL;
  uint32_t base = (uint32_t)papParamPapProbe();
  /* 1: every call, no backoff; a PAP-aware verdict, or the first classic one after it, starts
   * the gaps over. */
  if (b->agreedPap || wasPap || base == 1 || b->probeGap < base)
    b->probeGap = base;
  else if (b->probeGap < base * PAP_SEL_PROBE_GAP_MAX)
    b->probeGap *= 2;
  b->nextProbe = b->calls - 1 + b->probeGap; /* this commit's call plus the gap */
}

size_t papSelectBytes(const struct papComm* comm, const struct papOpDesc* op) {
  size_t b = op->call.count * papKernTypeSize(op->call.dtype);
  if (op->call.coll == PAP_COLL_ALLGATHER || op->call.coll == PAP_COLL_REDUCESCATTER)
    b *= (size_t)comm->nranks;
  return b;
}

struct papSelChoice papSelect(struct papComm* comm, const struct papOpDesc* op) {
  struct papSelChoice c;
  size_t bytes = papSelectBytes(comm, op);
  /* Keep every call of this size measured (on a message board, papArrivalNeedsCommit) while
   * the bucket is young: a size that starts with a straggler switches within its first
   * dozen calls instead of a dozen probes. */
  c.watch = bucketFor(comm, op)->samples < PAP_SEL_WARMUP + 2 * PAP_SEL_CHECK;
  int forced = papSelectForcedAlgo(op);
  int pap = forced == PAP_ALGO_AC2S || forced == PAP_ALGO_SMALL || forced == PAP_ALGO_CHAIN ||
            forced == PAP_ALGO_ARRIVAL;
  if (op->call.coll != PAP_COLL_ALLREDUCE) {
    /* Classic plans of these collectives are marked "ring" in the commit word. */
    c.algo = PAP_ALGO_RING;
    c.wait = 0;
    if (pap || (comm->nranks > 2 && bucketFor(comm, op)->arrivalPlans)) {
      c.algo = PAP_ALGO_ARRIVAL;
      c.wait = 1;
    }
    return c;
  }
  c.algo = classicAllReduce(op, bytes);
  c.wait = 0;
  if (papParamDeterministic()) {
    c.algo = PAP_ALGO_AC2S_DET;
    c.wait = 1;
    return c;
  }
  if (forced == PAP_ALGO_AC2S || forced == PAP_ALGO_SMALL) {
    c.algo = forced;
    c.wait = 1; /* commit policy: wait for the early set */
    return c;
  }
  if (forced == PAP_ALGO_CHAIN) {
    c.algo = forced; /* the chain grows with each arrival: commit at once */
    return c;
  }
  if (forced == PAP_ALGO_ARRIVAL) forced = PAP_ALGO_AUTO;
  if (!papParamPap() || comm->nranks <= 2) return c;
  if (forced == PAP_ALGO_AUTO && !bucketFor(comm, op)->arrivalPlans) return c;
  c.algo = bytes <= (size_t)papParamPapSmallMaxBytes() ? PAP_ALGO_SMALL : PAP_ALGO_AC2S;
  c.wait = 1;
  return c;
}

/* Samples of a mode's measured tail before it is compared, the first one after a switch
 * left out (the plan's first use); the wait before the first retry of a PAP mode that
 * measured no better than classic, in samples, doubling after each failed try up to the
 * cap. */
#define PAP_SEL_TAIL_MIN 8
#define PAP_SEL_PROBE_FIRST 32
#define PAP_SEL_PROBE_MAX 4096

static void observeTail(struct papSelBucket* b, int m, double tailNs) {
  uint32_t k = b->tailN[m]++;
  if (k == 0) return; /* the first op of the mode */
  b->tailWin[m][(k - 1) % PAP_SEL_TAIL_WIN] = (float)tailNs;
}

/* The median of a mode's last tails (up to PAP_SEL_TAIL_WIN): one slow call must not make a
 * plan that pays look worse than the classic one (docs/PAP-ENGINE.md section 13). */
static double tailMedian(const struct papSelBucket* b, int m) {
  uint32_t have = b->tailN[m] > 0 ? b->tailN[m] - 1 : 0;
  if (have > PAP_SEL_TAIL_WIN) have = PAP_SEL_TAIL_WIN;
  if (have == 0) return 0;
  float v[PAP_SEL_TAIL_WIN];
  for (uint32_t i = 0; i < have; i++) { /* insertion sort */
    uint32_t j = i;
    for (; j > 0 && v[j - 1] > b->tailWin[m][i]; j--)
      v[j] = v[j - 1];
    v[j] = b->tailWin[m][i];
  }
  return have % 2 ? v[have / 2] : 0.5 * ((double)v[have / 2 - 1] + v[have / 2]);
}

void papSelectObserve(struct papComm* comm, const struct papOpDesc* op, double skewNs, double gapNs,
                      double tailNs, int pap) {
  if (op->call.coll >= PAP_SEL_COLLS) return;
  struct papSelBucket* b = bucketFor(comm, op);
  size_t bytes = papSelectBytes(comm, op);
  const double lambda = 1.0 / 8;
  uint64_t k = ++b->samples;
  if (k <= PAP_SEL_WARMUP) return;
  if (k == PAP_SEL_WARMUP + 1) {
    b->skewEma = skewNs;
    b->skew2Ema = skewNs * skewNs;
    b->gapEma = gapNs;
  } else {
    b->skewEma += lambda * (skewNs - b->skewEma);
    b->skew2Ema += lambda * (skewNs * skewNs - b->skew2Ema);
    b->gapEma += lambda * (gapNs - b->gapEma);
  }
  /* Only the selector's own PAP choices count as the PAP mode's cost. */
  if (pap == b->arrivalPlans) observeTail(b, pap, tailNs);
  int n = comm->nranks;
  /* Decide every PAP_SEL_CHECK samples: the spread estimate needs a few samples, and a
   * single outlier must not flip the mode. */
  if (n <= 2 || k % PAP_SEL_CHECK != 0) return;
  struct model m = modelParams();
  double var = b->skew2Ema - b->skewEma * b->skewEma;
  double sigma = var > 0 ? sqrt(var) : 0;
  double q = b->skewEma - sigma;
  double best = 0;
  double g = gain(&m, op->call.coll, (double)bytes, n, q, &best);
  double thresh = 0.05 * best;
  if (thresh < 2 * m.alphaC) thresh = 2 * m.alphaC;
  int was = b->arrivalPlans, measured = 0;
  if (!b->arrivalPlans) {
    b->up = g > thresh ? b->up + 1 : 0;
    if (b->up >= 2 && k >= b->probeAfter) {
      b->arrivalPlans = 1;
      b->up = 0;
      b->tailN[1] = 0; /* measure this try afresh */
    }
  } else if (b->tailN[1] >= PAP_SEL_TAIL_MIN && b->tailN[0] >= PAP_SEL_TAIL_MIN &&
             tailMedian(b, 1) > tailMedian(b, 0)) {
    /* The model predicted a gain the plan does not deliver on this host: back to classic,
     * and try again later, in case the pattern changes. */
    b->arrivalPlans = 0;
    b->down = 0;
    measured = 1;
    b->probeWait = b->probeWait ? 2 * b->probeWait : PAP_SEL_PROBE_FIRST;
    if (b->probeWait > PAP_SEL_PROBE_MAX) b->probeWait = PAP_SEL_PROBE_MAX;
    b->probeAfter = k + b->probeWait;
  } else {
    if (b->tailN[1] >= PAP_SEL_TAIL_MIN)
      b->probeWait = 0; /* it pays: a later retreat retries soon */
    b->down = g < 0 ? b->down + 1 : 0;
    if (b->down >= 4) {
      b->arrivalPlans = 0;
      b->down = 0;
    }
  }
  static const char* const names[PAP_SEL_COLLS] = {"allreduce", "broadcast", "reduce", "allgather",
                                                   "reducescatter"};
  if (was != b->arrivalPlans && comm->rank == 0) {
    const char* to = !b->arrivalPlans                              ? "classic"
                     : op->call.coll != PAP_COLL_ALLREDUCE         ? "arrival"
                     : bytes <= (size_t)papParamPapSmallMaxBytes() ? "small"
                                                                   : "ac2s";
    if (measured)
      PAP_INFO(PAP_LOG_PAP,
               "PAP selector: %zu-byte %s on %d ranks -> classic (measured tail %.1f us with "
               "arrival plans, %.1f us classic; next try in %u calls)",
               bytes, names[op->call.coll], n, tailMedian(b, 1) / 1e3, tailMedian(b, 0) / 1e3,
               b->probeWait);
    else
      PAP_INFO(PAP_LOG_PAP,
               "PAP selector: %zu-byte %s on %d ranks -> %s (skew EMA %.1f us, sigma %.1f us, "
               "modelled gain %.1f us)",
               bytes, names[op->call.coll], n, to, b->skewEma / 1e3, sigma / 1e3, g / 1e3);
  }
}

uint64_t papSelectGapNs(const struct papComm* comm, const struct papOpDesc* op) {
  const struct papSelBucket* b = bucketFor((struct papComm*)comm, op);
  size_t bytes = papSelectBytes(comm, op);
  double floorNs = (double)papParamPapGapUs() * 1000.0;
  double g = 3 * b->gapEma;
  /* Waiting longer than a whole classic allreduce buys nothing: a mistimed commit costs
   * about that much at most. */
  struct model m = modelParams();
  double cap =
      tClassic(&m, op->call.coll < PAP_SEL_COLLS ? op->call.coll : 0, (double)bytes, comm->nranks);
  if (g > cap) g = cap;
  return (uint64_t)(g > floorNs ? g : floorNs);
}
