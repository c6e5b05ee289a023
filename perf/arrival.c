/* SPDX-License-Identifier: Apache-2.0 */
/* Arrival patterns: deterministic per (seed, call, rank), so ranks need not coordinate. */
#include "arrival.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double papPerfNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void papPerfDelayUs(double us) {
  if (us <= 0) return;
  double end = papPerfNow() + us * 1e-6;
  double sleepUs = us - 50.0; /* spin the last 50 us: wake-up latency is larger than that */
  if (sleepUs > 0) {
    struct timespec ts = {(time_t)(sleepUs * 1e-6), (long)(fmod(sleepUs, 1e6) * 1e3)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  while (papPerfNow() < end) {
  }
}

void papPerfComputeUs(double us) {
  if (us <= 0) return;
  double end = papPerfNow() + us * 1e-6;
  while (papPerfNow() < end) {
  }
}

static int parseInt(const char* s, long lo, long hi, long* out) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* Reads a trace: lines of whitespace-separated offsets in us; '#' starts a comment. Every
 * row must have the same number of columns. */
int papPerfArrivalParseTrace(FILE* f, const char* path, struct papPerfArrival* a, char* err,
                             size_t errLen) {
  size_t cap = 1024, n = 0;
  double* v = (double*)malloc(cap * sizeof(double));
  int rows = 0, cols = -1, rc = -1;
  char line[65536];
  int lineNo = 0;
  if (v == NULL) {
    snprintf(err, errLen, "out of memory reading '%s'", path);
    goto out;
  }
  while (fgets(line, sizeof(line), f)) {
    lineNo++;
    if (strchr(line, '\n') == NULL && !feof(f)) {
      snprintf(err, errLen, "%s:%d: line longer than %zu bytes", path, lineNo, sizeof(line));
      goto out;
    }
    char* hash = strchr(line, '#');
    if (hash) *hash = '\0';
    int c = 0;
    char* p = line;
    for (;;) {
      while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p == ',')
        p++;
      if (*p == '\0') break;
      char* end;
      errno = 0;
      double d = strtod(p, &end);
      if (end == p || errno != 0 || !isfinite(d) || d < 0 || d > 60e6) {
        snprintf(err, errLen, "%s:%d: '%.20s' is not an offset in [0, 60e6] us", path, lineNo, p);
        goto out;
      }
      if (n == cap) {
        double* nv = (double*)realloc(v, cap * 2 * sizeof(double));
        if (nv == NULL) {
          snprintf(err, errLen, "out of memory reading '%s'", path);
          goto out;
        }
        v = nv;
        cap *= 2;
      }
      v[n++] = d;
      c++;
      p = end;
    }
    if (c == 0) continue;
    if (cols < 0) cols = c;
    if (c != cols) {
      snprintf(err, errLen, "%s:%d: %d offsets, but the first row has %d", path, lineNo, c, cols);
      goto out;
    }
    if (++rows > PAP_PERF_TRACE_MAX_ROWS || cols > PAP_PERF_TRACE_MAX_COLS) {
      snprintf(err, errLen, "%s: more than %d rows or %d columns", path, PAP_PERF_TRACE_MAX_ROWS,
               PAP_PERF_TRACE_MAX_COLS);
      goto out;
    }
  }
  if (rows == 0) {
    snprintf(err, errLen, "%s: no offsets", path);
    goto out;
  }
  a->trace = v;
  a->traceRows = rows;
  a->traceCols = cols;
  v = NULL;
  rc = 0;
out:
  free(v);
  return rc;
}

static int loadTrace(const char* path, struct papPerfArrival* a, char* err, size_t errLen) {
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, errLen, "cannot open trace file '%s': %s", path, strerror(errno));
    return -1;
  }
  int rc = papPerfArrivalParseTrace(f, path, a, err, errLen);
  fclose(f);
  return rc;
}

int papPerfArrivalParse(const char* text, struct papPerfArrival* out, char* err, size_t errLen) {
  long v;
  double skew = out->skewUs;
  papPerfArrivalFree(out);
  memset(out, 0, sizeof(*out));
  out->skewUs = skew;
  out->lateRank = -1;
  out->seed = 12345;
  if (strcmp(text, "balanced") == 0) {
    out->kind = PAP_PERF_ARRIVAL_BALANCED;
  } else if (strcmp(text, "together") == 0) {
    out->kind = PAP_PERF_ARRIVAL_TOGETHER;
  } else if (strcmp(text, "staircase") == 0) {
    out->kind = PAP_PERF_ARRIVAL_STAIRCASE;
  } else if (strcmp(text, "late") == 0) {
    out->kind = PAP_PERF_ARRIVAL_LATE;
  } else if (strncmp(text, "late:", 5) == 0) {
    if (parseInt(text + 5, 0, 1 << 24, &v) != 0) {
      snprintf(err, errLen, "late:R needs a rank R >= 0, got '%s'", text + 5);
      return -1;
    }
    out->kind = PAP_PERF_ARRIVAL_LATE;
    out->lateRank = (int)v;
  } else if (strncmp(text, "late-k:", 7) == 0) {
    if (parseInt(text + 7, 1, 1 << 24, &v) != 0) {
      snprintf(err, errLen, "late-k:K needs K >= 1, got '%s'", text + 7);
      return -1;
    }
    out->kind = PAP_PERF_ARRIVAL_LATE_K;
    out->k = (int)v;
  } else if (strcmp(text, "uniform") == 0) {
    out->kind = PAP_PERF_ARRIVAL_UNIFORM;
  } else if (strcmp(text, "normal") == 0) {
    out->kind = PAP_PERF_ARRIVAL_NORMAL;
  } else if (strncmp(text, "trace:", 6) == 0) {
    out->kind = PAP_PERF_ARRIVAL_TRACE;
    return loadTrace(text + 6, out, err, errLen);
  } else {
    snprintf(err, errLen,
             "unknown arrival pattern '%s' (balanced, together, late, late:R, late-k:K, staircase, "
             "uniform, normal, trace:FILE)",
             text);
    return -1;
  }
  return 0;
}

void papPerfArrivalFree(struct papPerfArrival* a) {
  free(a->trace);
  a->trace = NULL;
  a->traceRows = a->traceCols = 0;
}

/* splitmix64 of (seed, iter, rank): a uniform double in [0, 1). */
static double unit(unsigned long long seed, long iter, int rank, int salt) {
  uint64_t z = seed ^ ((uint64_t)iter * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)rank << 32) ^
               ((uint64_t)salt << 56);
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

double papPerfArrivalDelayUs(const struct papPerfArrival* a, int rank, int nranks, long iter) {
  double s = a->skewUs;
  switch (a->kind) {
  case PAP_PERF_ARRIVAL_LATE:
    return s > 0 && rank == (a->lateRank < 0 ? nranks - 1 : a->lateRank) ? s : 0;
  case PAP_PERF_ARRIVAL_LATE_K:
    return s > 0 && rank >= nranks - a->k ? s : 0;
  case PAP_PERF_ARRIVAL_TOGETHER:
    return s > 0 ? s : 0;
  case PAP_PERF_ARRIVAL_STAIRCASE:
    return s > 0 && nranks > 1 ? s * rank / (nranks - 1) : 0;
  case PAP_PERF_ARRIVAL_UNIFORM:
    return s > 0 ? s * unit(a->seed, iter, rank, 1) : 0;
  case PAP_PERF_ARRIVAL_NORMAL: {
    if (s <= 0) return 0;
    double u1 = unit(a->seed, iter, rank, 2), u2 = unit(a->seed, iter, rank, 3);
    if (u1 < 1e-300) u1 = 1e-300;
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
    double d = s / 2 + z * s / 6;
    return d < 0 ? 0 : d > s ? s : d;
  }
  case PAP_PERF_ARRIVAL_TRACE: {
    if (a->traceRows <= 0 || rank >= a->traceCols) return 0;
    long row = iter % a->traceRows;
    return a->trace[(size_t)row * (size_t)a->traceCols + (size_t)rank];
  }
  default:
    return 0;
  }
}

void papPerfArrivalDescribe(const struct papPerfArrival* a, int nranks, char* buf, size_t len) {
  switch (a->kind) {
  case PAP_PERF_ARRIVAL_LATE:
    snprintf(buf, len, "late:%d (skew %g us)", a->lateRank < 0 ? nranks - 1 : a->lateRank,
             a->skewUs);
    break;
  case PAP_PERF_ARRIVAL_LATE_K:
    snprintf(buf, len, "late-k:%d (the last %d ranks %g us late)", a->k, a->k, a->skewUs);
    break;
  case PAP_PERF_ARRIVAL_TOGETHER:
    snprintf(buf, len, "together (every rank %g us late)", a->skewUs);
    break;
  case PAP_PERF_ARRIVAL_STAIRCASE:
    snprintf(buf, len, "staircase (rank r arrives r*%g/%d us late)", a->skewUs,
             nranks > 1 ? nranks - 1 : 1);
    break;
  case PAP_PERF_ARRIVAL_UNIFORM:
    snprintf(buf, len, "uniform (U[0, %g] us per rank and call)", a->skewUs);
    break;
  case PAP_PERF_ARRIVAL_NORMAL:
    snprintf(buf, len, "normal (N(%g, %g) us clipped to [0, %g])", a->skewUs / 2, a->skewUs / 6,
             a->skewUs);
    break;
  case PAP_PERF_ARRIVAL_TRACE:
    snprintf(buf, len, "trace (%d calls x %d ranks of recorded offsets)", a->traceRows,
             a->traceCols);
    break;
  default:
    snprintf(buf, len, "balanced");
  }
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

double papPerfMedian(double* v, size_t n) {
  if (n == 0) return 0;
  qsort(v, n, sizeof(double), cmpDouble);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
