/* SPDX-License-Identifier: Apache-2.0 */
/* linefloor: this host's shared-memory latency floor for a 2-rank 8-byte allreduce.
 *
 * Two processes (fork) share one anonymous mapping with one cache line each and spin on
 * plain loads (each on its own CPU when there are two):
 *   pingpong  one-way latency: A writes its line, B waits for it and answers; half the
 *             round trip.
 *   exchange  the least any 2-rank allreduce of one line can take: both write their line
 *             with sequence number i, then wait for the other's i (the flat allreduce does
 *             exactly this, plus the API, the reduction and the bookkeeping).
 * Prints the median over runs of the mean per iteration, in us.
 *
 * Usage: linefloor [-n iterations per run (100000)] [-r runs (11)] */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct line {
  _Atomic uint64_t seq;
  uint64_t data;
  char pad[48];
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void waitFor(struct line* l, uint64_t v) {
  while (atomic_load_explicit(&l->seq, memory_order_acquire) < v)
    relax();
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  long iters = 100000;
  int runs = 11;
  int c;
  while ((c = getopt(argc, argv, "n:r:")) != -1) {
    if (c == 'n')
      iters = atol(optarg);
    else if (c == 'r')
      runs = atoi(optarg);
    else {
      fprintf(stderr, "usage: %s [-n iterations] [-r runs]\n", argv[0]);
      return 2;
    }
  }
  if (iters < 1 || runs < 1 || runs > 1000) {
    fprintf(stderr, "%s: bad -n or -r\n", argv[0]);
    return 2;
  }
  /* lines[0], lines[1]: the two processes' lines; results after them. */
  size_t bytes = 2 * sizeof(struct line) + sizeof(double) * 2 * (size_t)runs;
  void* m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  struct line* lines = (struct line*)m;
  double* res = (double*)(lines + 2);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  int me = pid == 0 ? 1 : 0;
  struct line* mine = &lines[me];
  struct line* other = &lines[1 - me];
  uint64_t s = 0;
  for (int r = 0; r < runs; r++) {
    /* ping-pong: rank 0 serves, rank 1 answers */
    double t0 = now();
    for (long i = 0; i < iters; i++) {
      s++;
      if (me == 0) {
        atomic_store_explicit(&mine->seq, s, memory_order_release);
        waitFor(other, s);
      } else {
        waitFor(other, s);
        atomic_store_explicit(&mine->seq, s, memory_order_release);
      }
    }
    double t1 = now();
    /* exchange: both publish, both wait */
    for (long i = 0; i < iters; i++) {
      s++;
      mine->data = (uint64_t)i;
      atomic_store_explicit(&mine->seq, s, memory_order_release);
      waitFor(other, s);
    }
    double t2 = now();
    if (me == 0) {
      res[r] = (t1 - t0) / (double)iters / 2 * 1e6;
      res[runs + r] = (t2 - t1) / (double)iters * 1e6;
    }
  }
  if (me == 1) _exit(0);
  int st = 0;
  waitpid(pid, &st, 0);
  qsort(res, (size_t)runs, sizeof(double), cmpDouble);
  qsort(res + runs, (size_t)runs, sizeof(double), cmpDouble);
  printf("# linefloor: 2 processes, one cache line each, %ld iterations x %d runs (medians)\n",
         iters, runs);
  printf("pingpong_oneway_us %.3f\n", res[runs / 2]);
  printf("exchange_us %.3f\n", res[runs + runs / 2]);
  munmap(m, bytes);
  return 0;
}
