/* SPDX-License-Identifier: Apache-2.0 */
/* mpi_allreduce_bench: MPI_Allreduce (float32 sum) timed like all_reduce_perf, same columns. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Same number format as the perf driver: as many decimals as the width allows. */
static void floatStr(double v, int width, char* out, size_t len) {
  int digits = 0;
  for (double p = 1; v >= p && digits < 400; p *= 10)
    digits++;
  if (digits < width - 2)
    snprintf(out, len, "%*.2f", width, v);
  else if (digits < width - 1)
    snprintf(out, len, "%*.1f", width, v);
  else if (digits < width + 1)
    snprintf(out, len, "%*.0f", width, v);
  else
    snprintf(out, len, width >= 7 ? "%*.1e" : "%*.0e", width, v);
}

static double parseSize(const char* text) {
  char* end;
  double v = strtod(text, &end);
  if (end == text) return -1;
  switch (*end) {
  case '\0':
    return v;
  case 'G':
  case 'g':
    return v * 1024 * 1024 * 1024;
  case 'M':
  case 'm':
    return v * 1024 * 1024;
  case 'K':
  case 'k':
    return v * 1024;
  default:
    return -1;
  }
}

/* Integer-valued inputs: the float sum is exact in any order for these sizes and ranks. */
static void fill(float* buf, size_t count, int rank) {
  for (size_t i = 0; i < count; i++)
    buf[i] = (float)((i * 7 + (size_t)rank * 13) % 1024);
}
static int64_t countWrong(const float* buf, size_t count, int nranks) {
  int64_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < nranks; r++)
      want += (float)((i * 7 + (size_t)r * 13) % 1024);
    if (buf[i] != want) wrong++;
  }
  return wrong;
}

/* Mean time of one MPI_Allreduce over iters calls, averaged over ranks. */
static double timeAllreduce(float* send, float* recv, size_t count, size_t maxBytes, int iters,
                            int inPlace, int nranks) {
  size_t bytes = count * sizeof(float);
  size_t steps = bytes ? maxBytes / bytes : 1;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int it = 0; it < iters; it++) {
    size_t shift = (bytes * ((size_t)it % (steps ? steps : 1))) / sizeof(float);
    MPI_Allreduce(inPlace ? MPI_IN_PLACE : send + shift, recv + shift, (int)count, MPI_FLOAT,
                  MPI_SUM, MPI_COMM_WORLD);
  }
  double sec = (MPI_Wtime() - t0) / iters, sum = 0;
  MPI_Allreduce(&sec, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / nranks;
}

int main(int argc, char** argv) {
  size_t minBytes = 8, maxBytes = 64 << 20, stepFactor = 2;
  int iters = 20, warmup = 5, check = 1, opt;
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  while ((opt = getopt(argc, argv, "b:e:f:n:w:c:h")) != -1) {
    double v = 0;
    switch (opt) {
    case 'b':
    case 'e':
      v = parseSize(optarg);
      if (v < 0) {
        if (rank == 0) fprintf(stderr, "invalid size '%s'\n", optarg);
        MPI_Finalize();
        return 255;
      }
      *(opt == 'b' ? &minBytes : &maxBytes) = (size_t)v;
      break;
    case 'f':
      stepFactor = (size_t)strtol(optarg, NULL, 0);
      break;
    case 'n':
      iters = atoi(optarg);
      break;
    case 'w':
      warmup = atoi(optarg);
      break;
    case 'c':
      check = atoi(optarg);
      break;
    default:
      if (rank == 0) {
        printf(
            "USAGE: %s [-b minbytes] [-e maxbytes] [-f stepfactor] [-n iters] [-w warmup] "
            "[-c 0/1]\n",
            argv[0]);
      }
      MPI_Finalize();
      return 0;
    }
  }
  if (stepFactor < 2) stepFactor = 2;
  if (minBytes < 4) minBytes = 4;
  if (iters < 1) iters = 1;
  float* send = malloc(maxBytes + 64);
  float* recv = malloc(maxBytes + 64);
  if (!send || !recv) MPI_Abort(MPI_COMM_WORLD, 1);
  memset(send, 0, maxBytes + 64);
  memset(recv, 0, maxBytes + 64);

  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  MPI_Get_library_version(lib, &len);
  char* nl = strchr(lib, '\n');
  if (nl) *nl = '\0';
  char* comma = strchr(lib, ',');
  if (comma) *comma = '\0';
  if (rank == 0) {
    printf("# MPI_Allreduce reference (float32 sum) on %d ranks, host memory: %s\n", nranks, lib);
    printf(
        "# minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d validation: "
        "%d\n",
        minBytes, maxBytes, stepFactor, warmup, iters, check);
    printf("#\n");
    printf(
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place  "
        "        \n",
        "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size",
           "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
           "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "");
  }
  for (size_t size = minBytes; size <= maxBytes; size *= 2) {
    for (int it = 0; it < warmup; it++) {
      MPI_Allreduce(send, recv, (int)(size / sizeof(float)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    if (size > maxBytes / 2) break;
  }
  double bwSum = 0;
  int bwCount = 0;
  int64_t errors = 0;
  for (size_t size = minBytes; size <= maxBytes; size *= stepFactor) {
    size_t count = size / sizeof(float);
    if (rank == 0) printf("%12zu  %12zu  %8s  %6s  %6i", count * 4, count, "float", "sum", -1);
    for (int inPlace = 0; inPlace < 2; inPlace++) {
      double sec = timeAllreduce(send, recv, count, maxBytes, iters, inPlace, nranks);
      double algBw = (double)(count * 4) / 1e9 / sec;
      double busBw = algBw * 2.0 * (nranks - 1) / nranks;
      long long wrong = 0, mine = 0;
      if (check) {
        fill(inPlace ? recv : send, count, rank);
        MPI_Allreduce(inPlace ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        mine = countWrong(recv, count, nranks);
        MPI_Allreduce(&mine, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        errors += mine ? 1 : 0;
      }
      char ts[16], as[16], bs[16];
      floatStr(sec * 1e6, 7, ts, sizeof(ts));
      floatStr(algBw, 6, as, sizeof(as));
      floatStr(busBw, 6, bs, sizeof(bs));
      if (rank == 0 && check) printf("  %7s  %6s  %6s  %6g", ts, as, bs, (double)wrong);
      if (rank == 0 && !check) printf("  %7s  %6s  %6s    N/A", ts, as, bs);
      bwSum += busBw;
      bwCount++;
    }
    if (rank == 0) printf("\n");
    if (size > maxBytes / stepFactor) break;
  }
  long long totalErrors = 0, e = errors;
  MPI_Allreduce(&e, &totalErrors, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("# %-20s : %lld %s\n", "Out of bounds values", totalErrors,
           totalErrors ? "FAILED" : "OK");
    printf("# %-20s : %g \n", "Avg bus bandwidth", bwCount ? bwSum / bwCount : 0.0);
    printf("#\n");
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return totalErrors ? 7 : 0;
}
