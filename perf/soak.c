/* SPDX-License-Identifier: Apache-2.0 */
/* papccl_soak: random collectives, sizes, types, ops, arrival patterns and communicator splits
 * on N forked ranks for a given time; every result is checked exactly against a local
 * reference. One seed fixes the whole operation sequence, so any failure can be replayed.
 * This file: the parent (forks the ranks, watches them, reports); one rank is soak_rank.c,
 * the inputs and references soak_values.c. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arrival.h"
#include "papccl.h"
#include "soak.h"

#if defined(__SANITIZE_ADDRESS__)
#define SOAK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOAK_ASAN 1
#endif
#endif
#ifdef SOAK_ASAN
#include <sanitizer/lsan_interface.h>
#endif

/* ---- Parent: forks the ranks, watches them, reports ------------------------------------- */

static pid_t g_pids[SOAK_MAX_RANKS];
static int g_npids;

static void killChildren(void) {
  for (int r = 0; r < g_npids; r++)
    if (g_pids[r] > 0) kill(g_pids[r], SIGKILL);
}

static void onSignal(int sig) {
  killChildren(); /* async-signal-safe: kill and _exit only */
  _exit(128 + sig);
}

static int readFull(int fd, void* buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t k = read(fd, (char*)buf + got, len - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    got += (size_t)k;
  }
  return 0;
}

static void sumStats(const struct soakShared* sh, int n, struct rankStats* t) {
  memset(t, 0, sizeof(*t));
  for (int r = 0; r < n; r++) {
    const struct rankStats* s = &sh->r[r];
    atomic_fetch_add(&t->ops, atomic_load(&s->ops));
    atomic_fetch_add(&t->bytes, atomic_load(&s->bytes));
    atomic_fetch_add(&t->wrongOps, atomic_load(&s->wrongOps));
    atomic_fetch_add(&t->wrongElems, atomic_load(&s->wrongElems));
    atomic_fetch_add(&t->errors, atomic_load(&s->errors));
    atomic_fetch_add(&t->splits, atomic_load(&s->splits));
    atomic_fetch_add(&t->groups, atomic_load(&s->groups));
    atomic_fetch_add(&t->childOps, atomic_load(&s->childOps));
    for (int c = 0; c < C_NUM; c++)
      atomic_fetch_add(&t->coll[c], atomic_load(&s->coll[c]));
  }
}

/* Seconds since rank's last completed operation; 0 when it completed one after `now` was read
 * (unsigned, the difference would wrap to a huge idle time: a false hang). */
static double idleS(struct rankStats* s, uint64_t now) {
  uint64_t last = atomic_load_explicit(&s->lastProgressNs, memory_order_relaxed);
  return last >= now ? 0 : (double)(now - last) * 1e-9;
}

static void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s [--seconds S] [--ranks N] [--seed SEED] [--max-bytes B] [--watchdog S]\n"
          "          [--progress S] [--verbose]\n"
          "  random collectives on N forked ranks (2..%d, default 4) for S seconds (default 60);\n"
          "  every result is checked exactly. Exit 0 only with no wrong result, error or hang.\n",
          prog, SOAK_MAX_RANKS);
}

/* A rank's exit status once it is done: _exit() skips LeakSanitizer's check at exit, so
 * under ASan (detect_leaks=1) the rank checks for leaks first; a leak fails it. */
static int rankLeakChecked(int rank, int status) {
#ifdef SOAK_ASAN
  fflush(stdout);
  fflush(stderr);
  if (__lsan_do_recoverable_leak_check() != 0) {
    fprintf(stderr, "papccl_soak: rank %d: LeakSanitizer found leaks (reported above)\n", rank);
    if (status == 0) status = 1;
  }
#else
  (void)rank;
#endif
  return status;
}

int main(int argc, char** argv) {
  struct soakCfg cfg = {60, 60, 10, 4, 0, 4 << 20, 0};
  int seedSet = 0;
  static const struct option longOpts[] = {{"seconds", required_argument, NULL, 's'},
                                           {"ranks", required_argument, NULL, 'n'},
                                           {"seed", required_argument, NULL, 'S'},
                                           {"max-bytes", required_argument, NULL, 'b'},
                                           {"watchdog", required_argument, NULL, 'w'},
                                           {"progress", required_argument, NULL, 'p'},
                                           {"verbose", no_argument, NULL, 'v'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "s:n:S:b:w:p:vh", longOpts, NULL)) != -1) {
    switch (ch) {
    case 's':
      cfg.seconds = atof(optarg);
      break;
    case 'n':
      cfg.nranks = atoi(optarg);
      break;
    case 'S':
      cfg.seed = strtoull(optarg, NULL, 0);
      seedSet = 1;
      break;
    case 'b':
      cfg.maxBytes = (size_t)strtoull(optarg, NULL, 0);
      break;
    case 'w':
      cfg.watchdogS = atof(optarg);
      break;
    case 'p':
      cfg.progressS = atof(optarg);
      break;
    case 'v':
      cfg.verbose = 1;
      break;
    default:
      usage(argv[0]);
      return ch == 'h' ? 0 : 2;
    }
  }
  if (cfg.nranks < 2 || cfg.nranks > SOAK_MAX_RANKS || cfg.seconds < 0 || cfg.maxBytes < 64 ||
      cfg.watchdogS <= 0 || cfg.progressS <= 0) {
    usage(argv[0]);
    return 2;
  }
  if (!seedSet) cfg.seed = mix64(nowNs() ^ ((uint64_t)getpid() << 32));
  printf("# papccl_soak: %d ranks (processes), %.0f s, max %zu bytes per buffer, watchdog %.0f s\n",
         cfg.nranks, cfg.seconds, cfg.maxBytes, cfg.watchdogS);
  printf("# seed %" PRIu64 " (replay: --seed %" PRIu64 " --ranks %d)\n", cfg.seed, cfg.seed,
         cfg.nranks);
  fflush(stdout);
  fflush(stderr);

  struct soakShared* sh = (struct soakShared*)mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("papccl_soak: mmap");
    return 1;
  }
  memset(sh, 0, sizeof(*sh));
  const uint64_t t0 = nowNs();
  for (int r = 0; r < cfg.nranks; r++)
    atomic_store(&sh->r[r].lastProgressNs, t0);

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);

  /* Fork before the library starts any thread here (papcclGetUniqueId starts the root
   * listener), then hand the id to the children through socket pairs. */
  int idFds[SOAK_MAX_RANKS];
  const pid_t parent = getpid();
  for (int r = 0; r < cfg.nranks; r++) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
      perror("papccl_soak: socketpair");
      killChildren();
      return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
      perror("papccl_soak: fork");
      killChildren();
      return 1;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the parent */
      if (getppid() != parent) _exit(1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      close(fds[1]);
      for (int q = 0; q < r; q++)
        close(idFds[q]);
      papcclUniqueId id;
      if (readFull(fds[0], &id, sizeof(id)) != 0) _exit(3);
      close(fds[0]);
      _exit(rankLeakChecked(r, papSoakRankMain(&cfg, sh, r, id)));
    }
    close(fds[0]);
    idFds[r] = fds[1];
    g_pids[r] = pid;
    g_npids = r + 1;
  }
  papcclUniqueId id;
  papcclResult_t res = papcclGetUniqueId(&id);
  if (res != papcclSuccess) {
    fprintf(stderr, "papccl_soak: papcclGetUniqueId failed: %s\n", papcclGetErrorString(res));
    killChildren();
    return 1;
  }
  for (int r = 0; r < cfg.nranks; r++) {
    if (send(idFds[r], &id, sizeof(id), MSG_NOSIGNAL) != (ssize_t)sizeof(id))
      fprintf(stderr, "papccl_soak: cannot send the id to rank %d\n", r);
    close(idFds[r]);
  }

  int remaining = cfg.nranks, failed = 0, hung = 0;
  double nextProgress = cfg.progressS;
  while (remaining > 0) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    for (int r = 0; r < cfg.nranks; r++) {
      int status = 0;
      if (g_pids[r] <= 0 || waitpid(g_pids[r], &status, WNOHANG) != g_pids[r]) continue;
      g_pids[r] = -1;
      remaining--;
      if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || hung) continue;
      if (WIFEXITED(status))
        fprintf(stderr, "papccl_soak: rank %d exited with status %d during: %s\n", r,
                WEXITSTATUS(status), sh->r[r].current);
      else
        fprintf(stderr, "papccl_soak: rank %d killed by signal %d during: %s\n", r,
                WTERMSIG(status), sh->r[r].current);
      failed = 1;
    }
    uint64_t now = nowNs();
    double el = (double)(now - t0) * 1e-9;
    if (failed && remaining > 0) {
      fprintf(stderr, "papccl_soak: stopping the other ranks\n");
      killChildren();
      continue;
    }
    if (el >= cfg.seconds) atomic_store(&sh->stop, 1);
    for (int r = 0; r < cfg.nranks && !hung; r++) {
      double idle = idleS(&sh->r[r], now);
      if (g_pids[r] > 0 && idle > cfg.watchdogS) {
        hung = 1;
        fprintf(stderr, "papccl_soak: HANG: no operation completed on rank %d for %.0f s\n", r,
                idle);
        for (int q = 0; q < cfg.nranks; q++)
          fprintf(stderr, "papccl_soak:   rank %d%s, last progress %.1f s ago: %s\n", q,
                  g_pids[q] > 0 ? "" : " (exited)", idleS(&sh->r[q], now), sh->r[q].current);
        killChildren();
      }
    }
    if (el >= nextProgress) {
      struct rankStats t;
      sumStats(sh, cfg.nranks, &t);
      printf("[%7.1f s] ops %" PRIu64 " (%.1f/s)  bytes %.3f GiB  splits %" PRIu64
             "  groups %" PRIu64 "  wrong %" PRIu64 "  errors %" PRIu64 "\n",
             el, atomic_load(&t.ops), (double)atomic_load(&t.ops) / el,
             (double)atomic_load(&t.bytes) / (1 << 30), atomic_load(&t.splits),
             atomic_load(&t.groups), atomic_load(&t.wrongOps), atomic_load(&t.errors));
      fflush(stdout);
      nextProgress += cfg.progressS;
    }
  }
  double el = (double)(nowNs() - t0) * 1e-9;
  struct rankStats t;
  sumStats(sh, cfg.nranks, &t);
  uint64_t wrong = atomic_load(&t.wrongOps), errors = atomic_load(&t.errors);
  if (failed && errors == 0) errors = 1; /* a rank died without saying why */
  int pass = !failed && !hung && wrong == 0 && errors == 0;
  printf("# papccl_soak summary: seed %" PRIu64 ", %d ranks, %.1f s\n", cfg.seed, cfg.nranks, el);
  printf("#   ops %" PRIu64 " (%" PRIu64
         " on split children; %.1f/s), bytes %.3f GiB, splits %" PRIu64 ", groups %" PRIu64 "\n",
         atomic_load(&t.ops), atomic_load(&t.childOps), (double)atomic_load(&t.ops) / el,
         (double)atomic_load(&t.bytes) / (1 << 30), atomic_load(&t.splits), atomic_load(&t.groups));
  printf("#  ");
  for (int c = 0; c < C_NUM; c++)
    printf(" %s %" PRIu64, collNames[c], atomic_load(&t.coll[c]));
  printf("\n");
  printf("#   wrong results %" PRIu64 " (%" PRIu64 " elements), errors %" PRIu64 ", hang %s\n",
         wrong, atomic_load(&t.wrongElems), errors, hung ? "yes" : "no");
  printf("# result: %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
