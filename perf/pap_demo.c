/* SPDX-License-Identifier: Apache-2.0 */
/* pap_demo: an allreduce with one late rank; shows how little work is left when it arrives. */
#include "common.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEMO_BALANCED_CALLS 3
#define DEMO_MAX_ROWS 24

struct demo {
  size_t bytes;
  int iters, nThreads, proc, nprocs, nranks;
  struct papPerfArrival arrival;
  papcclUniqueId id;
  char (*algo)[16]; /* [iters] the plan each call ran (rank 0's statistics) */
};

struct demoRank {
  struct demo* d;
  int rank;
  papcclComm_t comm;
  pthread_t tid;
  int rc;
};

static void demoFail(papcclComm_t comm, int line, papcclResult_t res) {
  printf("pap_demo: papccl call at line %d failed: %s / %s\n", line, papcclGetErrorString(res),
         papcclGetLastError(comm));
  printf("result check: FAILED\n");
  fflush(stdout);
  _exit(1); /* the other ranks cannot go on without this one */
}
#define DCHECK(comm, call) \
  do { \
    papcclResult_t res_ = (call); \
    if (res_ != papcclSuccess) demoFail(comm, __LINE__, res_); \
  } while (0)

static void barrier(papcclComm_t comm) {
  int64_t one = 1;
  DCHECK(comm, papcclAllReduce(&one, &one, 1, papcclInt64, papcclSum, comm, NULL));
}

static double ms(double sec) {
  return sec * 1e3;
}

/* Rank 0's report from every rank's (entry, exit) stamps: st[r * 2 * iters + 2 * it]. */
static void report(const struct demo* d, const double* st, double balancedSec, int64_t wrong) {
  int n = d->nranks, iters = d->iters;
  double sumEarly = 0, sumLate = 0, sumTail = 0, tailBy[2] = {0, 0};
  int nBy[2] = {0, 0};
  int counted = 0;
  char desc[128];
  papPerfArrivalDescribe(&d->arrival, n, desc, sizeof(desc));
  printf("# papccl PAP demo: allreduce of %zu bytes (%zu float32, sum) on %d ranks, %d calls\n",
         d->bytes, d->bytes / 4, n, iters);
  printf("# arrival pattern: %s before each call\n", desc);
  printf("# balanced reference: the same allreduce with no delay: %.2f ms per call\n",
         ms(balancedSec));
  printf("# per call, in ms, from CLOCK_MONOTONIC stamps at each rank's call entry and exit:\n");
  printf("#   skew = last arrival - first arrival; early = mean time in the call of the other\n");
  printf(
      "#   ranks; last = the last arriver's time in the call; tail = last exit - last arrival\n");
  printf("#   plan = the algorithm papccl chose (papcclCommGetPapStats)\n");
  printf("#  call    skew     early          last      tail  plan\n");
  for (int it = 0; it < iters; it++) {
    double aMin = 1e300, aMax = -1e300, fMax = -1e300, early = 0;
    int last = 0;
    for (int r = 0; r < n; r++) {
      double a = st[(size_t)r * 2 * iters + 2 * it], f = st[(size_t)r * 2 * iters + 2 * it + 1];
      if (a < aMin) aMin = a;
      if (a > aMax) aMax = a, last = r;
      if (f > fMax) fMax = f;
      early += f - a;
    }
    const double* sl = &st[(size_t)last * 2 * iters + 2 * it];
    double lateIn = sl[1] - sl[0], tail = fMax - aMax;
    early = n > 1 ? (early - lateIn) / (n - 1) : lateIn;
    if (it < DEMO_MAX_ROWS) {
      printf("%7d %7.2f %9.2f %9.2f (r%d) %9.2f  %s\n", it, ms(aMax - aMin), ms(early), ms(lateIn),
             last, ms(tail), d->algo[it]);
    }
    if (it > 0 || iters == 1) { /* the first call also pays one-time setup */
      sumEarly += early, sumLate += lateIn, sumTail += tail;
      counted++;
      int pap = strcmp(d->algo[it], "ring") != 0 && strcmp(d->algo[it], "rhd") != 0;
      tailBy[pap] += tail;
      nBy[pap]++;
    }
  }
  if (iters > DEMO_MAX_ROWS) printf("# (%d more calls not shown)\n", iters - DEMO_MAX_ROWS);
  printf(
      "# mean over calls %d..%d: early ranks %.2f ms in the call, last arriver %.2f ms, "
      "tail %.2f ms\n",
      iters > 1 ? 1 : 0, iters - 1, ms(sumEarly / counted), ms(sumLate / counted),
      ms(sumTail / counted));
  if (nBy[0] && nBy[1])
    printf(
        "# mean tail: classic plan %.2f ms (%d calls), PAP-aware plan %.2f ms (%d calls): %.2fx\n",
        ms(tailBy[0] / nBy[0]), nBy[0], ms(tailBy[1] / nBy[1]), nBy[1],
        tailBy[0] / nBy[0] / (tailBy[1] / nBy[1]));
  if (balancedSec > 0) {
    /* The calls after the selector switched to a PAP-aware plan, when there are some: the
     * earlier ones show the classic plan. */
    int pap = nBy[1] > 0;
    double ratio = (pap ? tailBy[1] / nBy[1] : sumTail / counted) / balancedSec;
    /* Timing noise moves the ratio by some 10%: only a clear gap means work moved earlier. */
    printf("# tail%s / balanced allreduce = %.2f (%s)\n", pap ? " of the PAP-aware calls" : "",
           ratio,
           ratio < 0.8 ? "well below 1: work was done before the last arrival"
                       : "about 1: the collective ran after the last arrival");
  }
  if (wrong) {
    printf("result check: FAILED (%lld wrong elements)\n", (long long)wrong);
  } else {
    printf("result check: OK (%d calls x %d ranks, bit-exact)\n", iters + DEMO_BALANCED_CALLS, n);
  }
}

static void* demoRank(void* arg) {
  struct demoRank* dr = arg;
  struct demo* d = dr->d;
  papcclComm_t comm = dr->comm;
  size_t count = d->bytes / 4;
  size_t bytes = count * 4;
  float *send = NULL, *recv = NULL, *expected = NULL;
  double* stamps = calloc((size_t)2 * d->iters, sizeof(double));
  double* all = calloc((size_t)2 * d->iters * d->nranks, sizeof(double));
  if (posix_memalign((void**)&send, 4096, bytes + 64) ||
      posix_memalign((void**)&recv, 4096, bytes + 64) || !(expected = malloc(bytes + 64)) ||
      !stamps || !all) {
    fprintf(stderr, "pap_demo: out of memory\n");
    _exit(1);
  }
  papPerfFillInput(send, count, 0, papcclFloat32, papcclSum, dr->rank, d->nranks, 1);
  papPerfFillExpected(expected, count, 0, papcclFloat32, papcclSum, d->nranks, 1);
  int64_t wrong = 0;

  /* Balanced reference, after one untimed call that pays for first-touch setup. */
  double balanced = 0;
  for (int it = 0; it <= DEMO_BALANCED_CALLS; it++) {
    memset(recv, 0xa5, bytes);
    barrier(comm);
    double t0 = papPerfNow();
    DCHECK(comm, papcclAllReduce(send, recv, count, papcclFloat32, papcclSum, comm, NULL));
    if (it > 0) balanced += papPerfNow() - t0;
    wrong += papPerfCountWrong(recv, expected, count, papcclFloat32, papcclSum);
  }
  double b = balanced / DEMO_BALANCED_CALLS;
  DCHECK(comm, papcclAllReduce(&b, &b, 1, papcclFloat64, papcclSum, comm, NULL));
  balanced = b / d->nranks;

  for (int it = 0; it < d->iters; it++) {
    memset(recv, 0xa5, bytes); /* poison: a skipped write shows up */
    barrier(comm);
    papPerfComputeUs(papPerfArrivalDelayUs(&d->arrival, dr->rank, d->nranks, it));
    stamps[2 * it] = papPerfNow();
    DCHECK(comm, papcclAllReduce(send, recv, count, papcclFloat32, papcclSum, comm, NULL));
    stamps[2 * it + 1] = papPerfNow();
    if (dr->rank == 0) {
      papcclPapStats st;
      DCHECK(comm, papcclCommGetPapStats(comm, &st));
      snprintf(d->algo[it], sizeof(d->algo[it]), "%s", st.lastAlgoName);
    }
    wrong += papPerfCountWrong(recv, expected, count, papcclFloat32, papcclSum);
  }
  DCHECK(comm, papcclAllGather(stamps, all, (size_t)2 * d->iters, papcclFloat64, comm, NULL));
  DCHECK(comm, papcclAllReduce(&wrong, &wrong, 1, papcclInt64, papcclSum, comm, NULL));
  if (dr->rank == 0) report(d, all, balanced, wrong);
  dr->rc = wrong ? 1 : 0;
  free(send);
  free(recv);
  free(expected);
  free(stamps);
  free(all);
  return NULL;
}

static void usage(void) {
  printf(
      "USAGE: pap_demo [-b bytes (16M)] [-n calls (24)] [-t threads per process]\n"
      "\t[--arrival balanced|late|late:R|staircase (late)] [--skew usec (20000)]\n"
      "Runs allreduce (float32 sum) calls where some ranks arrive late, checks every result\n"
      "bit-exactly and reports, per call, the time early and late ranks spend inside it and\n"
      "the tail after the last arrival. Start it with papcclrun -n 4 pap_demo, or alone\n"
      "(then its ranks are 4 threads).\n");
}

int main(int argc, char** argv) {
  static struct demo d;
  enum {
    OPT_ARRIVAL = 256,
    OPT_SKEW
  };
  static const struct option longopts[] = {{"bytes", required_argument, 0, 'b'},
                                           {"iters", required_argument, 0, 'n'},
                                           {"nthreads", required_argument, 0, 't'},
                                           {"arrival", required_argument, 0, OPT_ARRIVAL},
                                           {"skew", required_argument, 0, OPT_SKEW},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  setlinebuf(stdout);
  d.bytes = 16 << 20;
  d.iters = 24;
  d.nThreads = 0;
  char errText[256];
  d.arrival =
      (struct papPerfArrival){.kind = PAP_PERF_ARRIVAL_LATE, .lateRank = -1, .skewUs = 20000.0};
  for (;;) {
    int idx, c = getopt_long(argc, argv, "b:n:t:h", longopts, &idx);
    if (c == -1) break;
    char* end;
    double v;
    switch (c) {
    case 'b':
      v = strtod(optarg, &end);
      if (*end == 'K' || *end == 'k') v *= 1024;
      if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
      if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
      if (v < 4) {
        fprintf(stderr, "pap_demo: -b needs at least 4 bytes\n");
        return 2;
      }
      d.bytes = (size_t)v;
      break;
    case 'n':
      d.iters = atoi(optarg);
      break;
    case 't':
      d.nThreads = atoi(optarg);
      break;
    case OPT_ARRIVAL:
      if (papPerfArrivalParse(optarg, &d.arrival, errText, sizeof(errText)) != 0) {
        fprintf(stderr, "pap_demo: bad --arrival: %s\n", errText);
        return 2;
      }
      break;
    case OPT_SKEW:
      d.arrival.skewUs = strtod(optarg, NULL);
      break;
    default:
      usage();
      return c == 'h' ? 0 : 2;
    }
  }
  if (d.iters < 1) {
    fprintf(stderr, "pap_demo: -n must be >= 1\n");
    return 2;
  }
  int localRank;
  if (papPerfProcSetup(&d.proc, &d.nprocs, &localRank) != 0) return 2;
  if (d.nThreads <= 0) d.nThreads = d.nprocs > 1 ? 1 : 4;
  d.nranks = d.nprocs * d.nThreads;
  if (d.arrival.kind == PAP_PERF_ARRIVAL_LATE && d.arrival.lateRank >= d.nranks) {
    fprintf(stderr, "pap_demo: late rank %d, but only %d ranks\n", d.arrival.lateRank, d.nranks);
    return 2;
  }

  struct demoRank* ranks = calloc((size_t)d.nThreads, sizeof(*ranks));
  d.algo = calloc((size_t)d.iters, sizeof(*d.algo));
  if (!ranks || !d.algo) return 1;
  DCHECK(NULL, papcclGetUniqueId(&d.id));
  DCHECK(NULL, papcclGroupStart());
  for (int t = 0; t < d.nThreads; t++) {
    ranks[t].d = &d;
    ranks[t].rank = d.proc * d.nThreads + t;
    DCHECK(NULL, papcclCommInitRank(&ranks[t].comm, d.nranks, d.id, ranks[t].rank));
  }
  DCHECK(NULL, papcclGroupEnd());
  for (int t = 1; t < d.nThreads; t++) {
    if (pthread_create(&ranks[t].tid, NULL, demoRank, &ranks[t]) != 0) return 1;
  }
  demoRank(&ranks[0]);
  int rc = ranks[0].rc;
  for (int t = 1; t < d.nThreads; t++) {
    pthread_join(ranks[t].tid, NULL);
    rc |= ranks[t].rc;
  }
  for (int t = 0; t < d.nThreads; t++)
    DCHECK(ranks[t].comm, papcclCommDestroy(ranks[t].comm));
  free(ranks);
  free(d.algo);
  return rc;
}
