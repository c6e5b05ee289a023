/* SPDX-License-Identifier: Apache-2.0 */
/* memfloor: the memory floor of a host allreduce, T threads each copying S bytes at once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A 2-rank allreduce of S bytes must at least read S and write S bytes per rank, and the
 * ranks share one memory system: two threads each doing memcpy(S) at the same time is the
 * floor the allreduce time is compared with. */

struct copier {
  pthread_t tid;
  char *src, *dst;
  size_t bytes;
  pthread_barrier_t* start;
  pthread_barrier_t* done;
  int runs;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void* copyLoop(void* arg) {
  struct copier* c = arg;
  for (int i = 0; i < c->runs; i++) {
    pthread_barrier_wait(c->start);
    memcpy(c->dst, c->src, c->bytes);
    pthread_barrier_wait(c->done);
  }
  return NULL;
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  size_t bytes = 64 << 20;
  int threads = 2, runs = 11, opt;
  while ((opt = getopt(argc, argv, "s:t:r:h")) != -1) {
    char* end;
    double v;
    switch (opt) {
    case 's':
      v = strtod(optarg, &end);
      if (*end == 'K' || *end == 'k') v *= 1024;
      if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
      if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
      bytes = v > 0 ? (size_t)v : bytes;
      break;
    case 't':
      threads = atoi(optarg);
      break;
    case 'r':
      runs = atoi(optarg);
      break;
    default:
      printf(
          "USAGE: %s [-s bytes per thread (64M)] [-t threads (2)] [-r runs (11)]\n"
          "Prints the median time for the threads to memcpy -s bytes each, concurrently.\n",
          argv[0]);
      return opt == 'h' ? 0 : 2;
    }
  }
  if (threads < 1 || runs < 1) return 2;
  pthread_barrier_t start, done;
  pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
  struct copier* c = calloc((size_t)threads, sizeof(*c));
  double* t = calloc((size_t)runs, sizeof(double));
  if (!c || !t) return 1;
  for (int i = 0; i < threads; i++) {
    c[i] = (struct copier){0, malloc(bytes), malloc(bytes), bytes, &start, &done, runs + 1};
    if (!c[i].src || !c[i].dst) return 1;
    memset(c[i].src, 1 + i, bytes); /* fault every page in before timing */
    memset(c[i].dst, 0, bytes);
    pthread_create(&c[i].tid, NULL, copyLoop, &c[i]);
  }
  for (int r = 0; r <= runs; r++) { /* run 0 warms up */
    pthread_barrier_wait(&start);
    double t0 = now();
    pthread_barrier_wait(&done);
    if (r > 0) t[r - 1] = now() - t0;
  }
  for (int i = 0; i < threads; i++)
    pthread_join(c[i].tid, NULL);
  qsort(t, (size_t)runs, sizeof(double), cmpDouble);
  double med = t[runs / 2];
  printf(
      "# memory floor: %d threads each memcpy %zu bytes concurrently (read %zu + write %zu "
      "bytes per thread)\n",
      threads, bytes, bytes, bytes);
  printf("# median of %d runs: %.1f us (min %.1f, max %.1f); per thread %.2f GB/s copied\n", runs,
         med * 1e6, t[0] * 1e6, t[runs - 1] * 1e6, (double)bytes / 1e9 / med);
  printf("memfloor_us %.1f\n", med * 1e6);
  for (int i = 0; i < threads; i++) {
    free(c[i].src);
    free(c[i].dst);
  }
  free(c);
  free(t);
  return 0;
}
