/* SPDX-License-Identifier: Apache-2.0 */
/* Arrival-pattern injection for benchmarks and tests: how late each rank reaches each call.
 * Needs libc only (no papccl), so tests and other programs can link it alone. */
#ifndef PAPCCL_PERF_ARRIVAL_H_
#define PAPCCL_PERF_ARRIVAL_H_

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CLOCK_MONOTONIC in seconds; comparable across processes on one host. */
double papPerfNow(void);
/* Waits us microseconds: sleeps most of it, spins (bounded, 50 us) the last stretch. For
 * tests, which need an order of arrival and not a model of the work before it. */
void papPerfDelayUs(double us);
/* Computes for us microseconds: spins the whole time, holding its core as a training rank's
 * forward pass does. Benchmarks make their late ranks wait with this, never with a sleep: a
 * sleeping late rank would lend its core to the waiting ranks. */
void papPerfComputeUs(double us);

enum papPerfArrivalKind {
  PAP_PERF_ARRIVAL_BALANCED = 0,
  PAP_PERF_ARRIVAL_LATE = 1, /* late:R: rank R (default the last) arrives skew late */
  PAP_PERF_ARRIVAL_STAIRCASE = 2, /* rank r arrives r * skew / (nranks - 1) late */
  PAP_PERF_ARRIVAL_LATE_K = 3, /* late-k:K: the last K ranks arrive skew late */
  PAP_PERF_ARRIVAL_UNIFORM = 4, /* every rank, every call: U[0, skew] */
  PAP_PERF_ARRIVAL_NORMAL = 5, /* N(skew/2, skew/6) clipped to [0, skew] */
  PAP_PERF_ARRIVAL_TRACE = 6, /* trace:FILE: one line per call, one offset (us) per rank */
  PAP_PERF_ARRIVAL_TOGETHER = 7 /* every rank arrives skew late: balanced after the same work */
};

#define PAP_PERF_TRACE_MAX_ROWS 100000
#define PAP_PERF_TRACE_MAX_COLS 4096

struct papPerfArrival {
  int kind;
  int lateRank; /* LATE: the late rank; -1 = the last rank */
  double skewUs;
  int k; /* LATE_K */
  unsigned long long seed; /* UNIFORM, NORMAL: the same seed gives the same delays */
  int traceRows, traceCols; /* TRACE: offsets[row * traceCols + rank]; calls cycle rows */
  double* trace;
};

/* Parses balanced, together, late, late:R, late-k:K, staircase, uniform, normal or trace:FILE (read
 * now). Returns 0, or -1 with a reason in err. Free with papPerfArrivalFree. */
int papPerfArrivalParse(const char* text, struct papPerfArrival* out, char* err, size_t errLen);
void papPerfArrivalFree(struct papPerfArrival* arrival);
/* The trace:FILE part of papPerfArrivalParse: reads the trace from f (path names it in err)
 * into arrival->trace, traceRows and traceCols. Returns 0, or -1 with a reason in err. */
int papPerfArrivalParseTrace(FILE* f, const char* path, struct papPerfArrival* arrival, char* err,
                             size_t errLen);
/* How late rank arrives at call `iter`, in microseconds (>= 0). */
double papPerfArrivalDelayUs(const struct papPerfArrival* arrival, int rank, int nranks, long iter);
/* Median of v[0..n) (sorts v). 0 when n == 0. */
double papPerfMedian(double* v, size_t n);
/* Writes e.g. "late:3 (skew 20000 us)" into buf. */
void papPerfArrivalDescribe(const struct papPerfArrival* arrival, int nranks, char* buf,
                            size_t len);

#ifdef __cplusplus
}
#endif

#endif /* PAPCCL_PERF_ARRIVAL_H_ */
