/* SPDX-License-Identifier: Apache-2.0 */
/* The shared timing loop of the comparison drivers (bench_loop.h). */
#include "bench_loop.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../arrival.h"

static size_t parseSize(const char* t) {
  char* end;
  double v = strtod(t, &end);
  if (end == t || v < 0) return (size_t)-1;
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

/* Rank r's element i: a hash of i plus a rank offset, integers below 2048 (the sum over up
 * to 8192 ranks is exact in float32). The hash makes every element's value depend on its
 * index without a period, so a library that reduced the right numbers into the wrong
 * places (a chunk permuted or shifted) fails the check, which a constant fill would pass. */
static float cmpValue(size_t i, int r) {
  uint32_t h = (uint32_t)i * 2654435761u;
  return (float)(((h >> 22) + 37u * (uint32_t)r) & 1023u);
}

void cmpFill(float* mine, float* expect, size_t count, int rank, int nranks) {
  for (size_t i = 0; i < count; i++) {
    float sum = 0;
    for (int r = 0; r < nranks; r++)
      sum += cmpValue(i, r);
    mine[i] = cmpValue(i, rank);
    expect[i] = sum;
  }
}

int cmpCallsFor(size_t bytes, int iters, int smallMult) {
  size_t mult = bytes >= (1u << 20) ? 1 : (1u << 20) / bytes;
  if (mult > (size_t)smallMult) mult = (size_t)smallMult;
  return iters * (int)mult;
}

int cmpRun(struct cmpLib* lib, int argc, char** argv) {
  size_t minB = 64 * 1024, maxB = 16 << 20, factor = 16;
  int iters = 10, warmup = 3;
  int smallMult = 50; /* --small-mult: small sizes run up to this many times `iters` calls */
  const char* pattern = "balanced";
  struct papPerfArrival arr;
  memset(&arr, 0, sizeof(arr));
  char err[256];
  static const struct option longopts[] = {{"arrival", required_argument, 0, 'A'},
                                           {"skew", required_argument, 0, 'S'},
                                           {"sizes", required_argument, 0, 'L'},
                                           {"small-mult", required_argument, 0, 'M'},
                                           {0, 0, 0, 0}};
  size_t list[64];
  int nlist = 0;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "b:e:f:n:w:", longopts, NULL)) != -1) {
    switch (c) {
    case 'b':
      minB = parseSize(optarg);
      break;
    case 'e':
      maxB = parseSize(optarg);
      break;
    case 'f':
      factor = (size_t)atol(optarg);
      break;
    case 'n':
      iters = atoi(optarg);
      break;
    case 'w':
      warmup = atoi(optarg);
      break;
    case 'A':
      pattern = optarg;
      break;
    case 'S':
      arr.skewUs = atof(optarg);
      break;
    case 'M':
      smallMult = atoi(optarg);
      break;
    case 'L': { /* --sizes 8,64K,1M: these sizes instead of -b/-e/-f */
      nlist = 0;
      for (const char* p = optarg; *p && nlist < 64;) {
        size_t v = parseSize(p);
        if (v == (size_t)-1 || v < 4) {
          fprintf(stderr, "%s: --sizes: bad size at '%s'\n", argv[0], p);
          return 2;
        }
        list[nlist++] = v;
        const char* comma = strchr(p, ',');
        if (comma == NULL) break;
        p = comma + 1;
      }
      break;
    }
    default:
      fprintf(stderr,
              "usage: %s [-b min] [-e max] [-f factor] [-n iters] [-w warmup] "
              "[--sizes S1,S2,...] [--arrival PATTERN] [--skew USEC] [--small-mult M]\n",
              argv[0]);
      return 2;
    }
  }
  if (papPerfArrivalParse(pattern, &arr, err, sizeof(err)) != 0) {
    fprintf(stderr, "%s: --arrival: %s\n", argv[0], err);
    return 2;
  }
  if (minB == (size_t)-1 || maxB == (size_t)-1 || minB < 4 || minB > maxB || factor < 2 ||
      iters < 1 || warmup < 0 || smallMult < 1) {
    fprintf(stderr, "%s: bad -b/-e/-f/-n/-w\n", argv[0]);
    return 2;
  }
  if (nlist == 0) { /* -b/-e/-f */
    for (size_t b = minB; nlist < 64; b *= factor) {
      list[nlist++] = b;
      if (b > maxB / factor) break; /* the next one is past maxB (or would overflow) */
    }
  }
  maxB = 0;
  for (int i = 0; i < nlist; i++)
    if (list[i] > maxB) maxB = list[i];
  size_t maxCount = maxB / 4;
  int maxIters = smallMult * iters;
  float* buf = (float*)malloc(maxCount * sizeof(float) + 64);
  float* mine = (float*)malloc(maxCount * sizeof(float) + 64);
  float* expect = (float*)malloc(maxCount * sizeof(float) + 64);
  double* st = (double*)malloc(sizeof(double) * 4 * (size_t)maxIters);
  double* tmp = (double*)malloc(sizeof(double) * (size_t)maxIters);
  if (!buf || !mine || !expect || !st || !tmp) {
    fprintf(stderr, "%s: out of memory\n", argv[0]);
    return 1;
  }
  cmpFill(mine, expect, maxCount, lib->rank, lib->nranks);
  int rc = 0;
  long call = 0;
  for (int si = 0; si < nlist; si++) {
    size_t bytes = list[si];
    size_t count = bytes / 4;
    if (lib->prepare && lib->prepare(lib->ctx, buf, count) != 0) {
      rc = 1;
      break;
    }
    /* Warm-up calls see the same arrival pattern, so an adaptive library (papccl's selector)
     * reaches its steady state before the timed calls. */
    for (int w = 0; w < warmup; w++) {
      memcpy(buf, mine, count * sizeof(float));
      if (lib->barrier(lib->ctx) != 0) return 1;
      papPerfComputeUs(papPerfArrivalDelayUs(&arr, lib->rank, lib->nranks, call++));
      if (lib->allreduceF32(lib->ctx, buf, count) != 0) return 1;
    }
    int cellIters = cmpCallsFor(bytes, iters, smallMult);
    int64_t wrong = 0;
    for (int it = 0; it < cellIters; it++) {
      memcpy(buf, mine, count * sizeof(float));
      if (lib->barrier(lib->ctx) != 0) return 1;
      papPerfComputeUs(papPerfArrivalDelayUs(&arr, lib->rank, lib->nranks, call++));
      double t0 = papPerfNow();
      if (lib->allreduceF32(lib->ctx, buf, count) != 0) return 1;
      double t1 = papPerfNow();
      for (size_t i = 0; i < count; i++)
        wrong += buf[i] != expect[i];
      st[it] = t0;
      st[cellIters + it] = t0;
      st[2 * cellIters + it] = t1;
      st[3 * cellIters + it] = t1 - t0;
    }
    size_t n = (size_t)cellIters;
    if (lib->allreduceF64(lib->ctx, st, n, 0) || lib->allreduceF64(lib->ctx, st + n, n, 1) ||
        lib->allreduceF64(lib->ctx, st + 2 * n, n, 0) ||
        lib->allreduceF64(lib->ctx, st + 3 * n, n, 2))
      return 1;
    double w = (double)wrong;
    if (lib->allreduceF64(lib->ctx, &w, 1, 2)) return 1;
    double med[3];
    for (int col = 0; col < 3; col++) {
      for (size_t i = 0; i < n; i++) {
        double v = col == 0   ? st[3 * n + i] / lib->nranks
                   : col == 1 ? st[2 * n + i] - st[i]
                              : st[i] - st[n + i];
        tmp[i] = v * 1e6;
      }
      med[col] = papPerfMedian(tmp, n);
    }
    if (lib->rank == 0) {
      printf("cell %s %d %s:%g %zu %.2f %.2f %.2f %.0f\n", lib->name, lib->nranks, pattern,
             arr.skewUs, bytes, med[0], med[1], med[2], w);
      fflush(stdout);
    }
    if (w != 0) rc = 1;
  }
  papPerfArrivalFree(&arr);
  free(buf);
  free(mine);
  free(expect);
  free(st);
  free(tmp);
  return rc;
}
