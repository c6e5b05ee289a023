/* SPDX-License-Identifier: Apache-2.0 */
/* papcclrun: starts N local ranks of a program with the environment papccl's bootstrap reads. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "free_port.h"

#ifndef PAPCCL_LAUNCHER_VERSION
#define PAPCCL_LAUNCHER_VERSION "unknown"
#endif

#define MAX_RANKS 1024
#define NS_PER_S 1000000000LL
#define GRACE_NS (2 * NS_PER_S) /* SIGTERM, then SIGKILL after this long */
#define EXIT_LAUNCHER 1 /* papcclrun itself failed (fork, pipes, ...) */
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124
#define LINE_BYTES 8192 /* --tag-output: longer lines are passed on in pieces */

static const char* progName = "papcclrun";

/* One of a rank's output pipes under --tag-output. */
struct outStream {
  int fd; /* read end; -1 when closed */
  int destFd; /* 1 or 2 */
  int midLine; /* the last bytes written to destFd did not end a line */
  size_t len; /* bytes pending in buf (no newline among them) */
  char buf[LINE_BYTES];
};

struct rankProc {
  pid_t pid; /* also the id of the rank's process group; 0 before it starts */
  int running; /* started and not yet reaped */
  struct outStream out[2];
};

struct launch {
  int nranks;
  int tagOutput;
  int64_t timeoutSetNs; /* --timeout as given; 0: none */
  int64_t timeoutNs; /* its deadline on CLOCK_MONOTONIC */
  char** argv; /* the program and its arguments */
  char commId[64];
  int bindMode; /* BIND_AUTO, BIND_CORE, BIND_NONE (--bind-to) */
  int ncpus; /* CPUs of our affinity, in order; ranks bound to cpus[rank] when binding */
  int* cpus;

  struct rankProc* ranks; /* owned; nranks entries */
  int nrunning;
  int sigFd;
  sigset_t oldMask;
  void (*oldPipeHandler)(int);
  pid_t selfPid;

  int stopping; /* set once: a rank failed, a timeout or a signal */
  int killed; /* SIGKILL sent */
  int64_t killAt; /* when stopping: SIGKILL deadline */
  int stopSignal; /* what the ranks got when stopping began */
  int exitCode; /* decided by the first cause */
};

static void errMsg(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void errMsg(const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s: %s\n", progName, msg);
  fflush(stderr);
}

static int64_t nowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: %s -n N [options] [--] program [args...]\n"
          "\n"
          "Starts N ranks of program on this host. Each rank gets PAPCCL_RANK, PAPCCL_NRANKS,\n"
          "PAPCCL_LOCAL_RANK, PAPCCL_LOCAL_SIZE and PAPCCL_COMM_ID=127.0.0.1:PORT (a free port;\n"
          "rank 0 serves papccl's rendezvous there, so every rank derives the same unique id).\n"
          "\n"
          "options:\n"
          "  -n, --np N        number of ranks, 1..%d (required; -np also works)\n"
          "      --timeout SEC stop every rank and exit 124 after SEC seconds\n"
          "      --tag-output  prefix each line a rank prints with \"[rank] \"\n"
          "      --bind-to core|none\n"
          "                    core: rank r runs on the r-th CPU it may use; none: where the\n"
          "                    kernel puts it. Default: core when the ranks fit on those\n"
          "                    CPUs (as Open MPI binds), none when they outnumber them\n"
          "  -h, --help        show this help\n"
          "      --version     show the version\n"
          "\n"
          "SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to every rank, and SIGKILL\n"
          "follows 2 s later; SIGUSR1 and SIGUSR2 are passed on too. When a rank exits\n"
          "non-zero or dies by a signal, the others get SIGTERM, then SIGKILL 2 s later.\n"
          "Rank 0 reads papcclrun's stdin unless it is a terminal; other ranks read /dev/null.\n"
          "\n"
          "exit status: 0 when every rank exits 0; otherwise the first failing rank's code\n"
          "(128+S for a rank killed by signal S), 124 on --timeout, 128+S when papcclrun got\n"
          "signal S, 2 for bad arguments, 126 or 127 when the program cannot be run, 1 when\n"
          "papcclrun itself fails.\n",
          progName, MAX_RANKS);
}

static void usageError(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usageError(const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s: %s\n(try '%s --help')\n", progName, msg, progName);
  exit(EXIT_USAGE);
}

static int parseRankCount(const char* s) {
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < 1 || v > MAX_RANKS)
    usageError("-n wants a rank count from 1 to %d, got '%s'", MAX_RANKS, s);
  return (int)v;
}

static int64_t parseSeconds(const char* s) {
  char* end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v > 0.0) || v > 1e8)
    usageError("--timeout wants seconds > 0 (at most 1e8), got '%s'", s);
  return (int64_t)(v * (double)NS_PER_S);
}

/* getopt does not know the mpirun habit "-np N"; spell it "--np" before it parses. Stops at
 * the program name so that the program's own arguments are never touched. */
static void rewriteNp(int argc, char** argv) {
  static char longNp[] = "--np";
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (a[0] != '-' || strcmp(a, "--") == 0) return;
    if (strcmp(a, "-np") == 0) argv[i] = longNp;
    /* options whose value is the next word */
    if (strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "--np") == 0 ||
        strcmp(argv[i], "--timeout") == 0 || strcmp(argv[i], "--bind-to") == 0)
      i++;
  }
}

enum {
  BIND_AUTO = 0,
  BIND_CORE,
  BIND_NONE
};

static void parseArgs(int argc, char** argv, struct launch* l) {
  enum {
    OPT_TIMEOUT = 256,
    OPT_TAG,
    OPT_VERSION,
    OPT_BIND
  };
  static const struct option longOpts[] = {
      {"np", required_argument, NULL, 'n'},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"tag-output", no_argument, NULL, OPT_TAG},
      {"bind-to", required_argument, NULL, OPT_BIND},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, OPT_VERSION},
      {NULL, 0, NULL, 0},
  };
  rewriteNp(argc, argv);
  opterr = 0; /* our own messages below */
  int c;
  /* '+': stop at the first word that is not an option (the program) */
  while ((c = getopt_long(argc, argv, "+:n:h", longOpts, NULL)) != -1) {
    switch (c) {
    case 'n':
      l->nranks = parseRankCount(optarg);
      break;
    case OPT_TIMEOUT:
      l->timeoutSetNs = parseSeconds(optarg);
      break;
    case OPT_TAG:
      l->tagOutput = 1;
      break;
    case OPT_BIND:
      if (strcmp(optarg, "core") == 0)
        l->bindMode = BIND_CORE;
      else if (strcmp(optarg, "none") == 0)
        l->bindMode = BIND_NONE;
      else
        usageError("--bind-to wants core or none, got '%s'", optarg);
      break;
    case 'h':
      usage(stdout);
      exit(0);
    case OPT_VERSION:
      printf("papcclrun (papccl) %s\n", PAPCCL_LAUNCHER_VERSION);
      exit(0);
    case ':':
      usageError("option '%s' needs a value", argv[optind - 1]);
    default:
      if (optopt != 0)
        usageError("unknown option '-%c'", optopt);
      else
        usageError("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (l->nranks == 0) usageError("the rank count is missing: give -n N");
  if (optind >= argc) usageError("the program to run is missing");
  l->argv = argv + optind;
}

/* Chooses the rendezvous port: below the ephemeral range (free_port.h says why); where the
 * range leaves no room below it, the kernel picks one. */
static int pickFreePort(int* portOut) {
  int port = papFreeFixedPort();
  if (port > 0) {
    *portOut = port;
    return 0;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    errMsg("socket failed: %s", strerror(errno));
    return -1;
  }
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, (struct sockaddr*)&addr, sizeof(addr)) != 0 ||
      getsockname(fd, (struct sockaddr*)&addr, &len) != 0) {
    errMsg("cannot find a free port on 127.0.0.1: %s", strerror(errno));
    close(fd);
    return -1;
  }
  close(fd);
  *portOut = ntohs(addr.sin_port);
  return 0;
}

/* Ranks write through fds 1 and 2 that we dup2 in place; make sure 0-2 exist so a pipe
 * never lands on them (dup2 onto itself would keep its close-on-exec flag). */
static void ensureStdFds(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    int nullFd = open("/dev/null", O_RDWR);
    if (nullFd >= 0 && nullFd != fd) {
      dup2(nullFd, fd);
      close(nullFd);
    }
  }
}

/* --tag-output holds two pipes per rank open: raise the soft fd limit as far as allowed. */
static int ensureFdLimit(int nranks) {
  struct rlimit rl;
  rlim_t need = (rlim_t)nranks * 2 + 32;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need) return 0;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur >= need) return 0;
  errMsg("--tag-output with %d ranks needs %lu open files, the limit is %lu", nranks,
         (unsigned long)need, (unsigned long)rl.rlim_cur);
  return -1;
}

static void writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return; /* EPIPE etc.: the reader went away; drop the output */
    p += w;
    n -= (size_t)w;
  }
}

/* Writes prefix + data in one writev so that short lines of different ranks never mix. */
static void writeTagged(int fd, int rank, int withPrefix, const char* data, size_t n,
                        int addNewline) {
  char prefix[24];
  int plen = withPrefix ? snprintf(prefix, sizeof(prefix), "[%d] ", rank) : 0;
  struct iovec iov[3];
  int cnt = 0;
  if (plen > 0) iov[cnt++] = (struct iovec){prefix, (size_t)plen};
  if (n > 0) iov[cnt++] = (struct iovec){(void*)data, n};
  if (addNewline) iov[cnt++] = (struct iovec){"\n", 1};
  size_t total = (size_t)plen + n + (addNewline ? 1 : 0);
  ssize_t w;
  do {
    w = writev(fd, iov, cnt);
  } while (w < 0 && errno == EINTR);
  if (w < 0 || (size_t)w == total) return;
  /* short write (large line into a pipe): finish byte-wise in order */
  char* flat = malloc(total);
  if (flat == NULL) return;
  size_t o = 0;
  for (int i = 0; i < cnt; i++) {
    memcpy(flat + o, iov[i].iov_base, iov[i].iov_len);
    o += iov[i].iov_len;
  }
  writeAll(fd, flat + w, total - (size_t)w);
  free(flat);
}

/* Passes on every complete line in s->buf; keeps the rest. */
static void flushLines(struct outStream* s, int rank, int atEof) {
  size_t start = 0;
  for (size_t i = 0; i < s->len; i++) {
    if (s->buf[i] != '\n') continue;
    writeTagged(s->destFd, rank, !s->midLine, s->buf + start, i + 1 - start, 0);
    s->midLine = 0;
    start = i + 1;
  }
  size_t rest = s->len - start;
  if (rest > 0 && (atEof || rest == sizeof(s->buf))) {
    /* a last line without newline gets one; an over-long line goes out in pieces */
    writeTagged(s->destFd, rank, !s->midLine, s->buf + start, rest, atEof);
    s->midLine = !atEof;
    start = s->len;
    rest = 0;
  }
  if (rest > 0 && start > 0) memmove(s->buf, s->buf + start, rest);
  s->len = rest;
}

/* Reads what is available on s; returns 0 at end of file (s closed). */
static int readStream(struct outStream* s, int rank) {
  ssize_t n;
  do {
    n = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    s->len += (size_t)n;
    flushLines(s, rank, 0);
    return 1;
  }
  if (n < 0 && errno == EAGAIN) return 1;
  flushLines(s, rank, 1);
  close(s->fd);
  s->fd = -1;
  return 0;
}

/* Signals a rank's process group, which also reaches what the rank started (a shell's
 * children, for instance). Harmless when the group is gone (ESRCH). */
static void signalRank(const struct rankProc* r, int sig) {
  if (r->pid > 0) kill(-r->pid, sig);
}

static void signalAll(struct launch* l, int sig, int onlyRunning) {
  for (int i = 0; i < l->nranks; i++) {
    if (!onlyRunning || l->ranks[i].running) signalRank(&l->ranks[i], sig);
  }
}

/* Begins the stop sequence once: SIGTERM (or sig) to every rank now, SIGKILL at killAt. */
static void startStopping(struct launch* l, int exitCode, int sig) {
  if (l->stopping) return;
  l->stopping = 1;
  l->stopSignal = sig;
  l->exitCode = exitCode;
  l->killAt = nowNs() + GRACE_NS;
  signalAll(l, sig, 0);
}

static const char* sigName(int sig) {
#define PAP_SIG(name) \
  { name, #name }
  static const struct {
    int sig;
    const char* name;
  } names[] = {PAP_SIG(SIGHUP),  PAP_SIG(SIGINT),  PAP_SIG(SIGQUIT), PAP_SIG(SIGILL),
               PAP_SIG(SIGTRAP), PAP_SIG(SIGABRT), PAP_SIG(SIGBUS),  PAP_SIG(SIGFPE),
               PAP_SIG(SIGKILL), PAP_SIG(SIGUSR1), PAP_SIG(SIGSEGV), PAP_SIG(SIGUSR2),
               PAP_SIG(SIGPIPE), PAP_SIG(SIGALRM), PAP_SIG(SIGTERM), PAP_SIG(SIGXCPU),
               PAP_SIG(SIGXFSZ), PAP_SIG(SIGSYS)};
#undef PAP_SIG
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (names[i].sig == sig) return names[i].name;
  }
  return strsignal(sig);
}

static void describeStatus(int status, char* buf, size_t len) {
  if (WIFEXITED(status))
    snprintf(buf, len, "exited with code %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, len, "was killed by signal %d (%s)%s", WTERMSIG(status),
             sigName(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
  else
    snprintf(buf, len, "stopped with wait status 0x%x", status);
}

static void reapChildren(struct launch* l) {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    struct rankProc* r = NULL;
    int rank = -1;
    for (int i = 0; i < l->nranks; i++) {
      if (l->ranks[i].pid == pid) {
        r = &l->ranks[i];
        rank = i;
        break;
      }
    }
    if (r == NULL || !r->running) continue;
    r->running = 0;
    l->nrunning--;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (l->stopping) continue; /* a consequence of the stop, not its cause */
    char why[128];
    describeStatus(status, why, sizeof(why));
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (l->nrunning > 0)
      errMsg("rank %d (pid %d) %s; stopping the other %d rank%s", rank, (int)pid, why, l->nrunning,
             l->nrunning == 1 ? "" : "s");
    else
      errMsg("rank %d (pid %d) %s", rank, (int)pid, why);
    startStopping(l, code, SIGTERM);
  }
}

static int isTerminatingSignal(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

static void handleSignals(struct launch* l) {
  struct signalfd_siginfo si;
  for (;;) {
    ssize_t n = read(l->sigFd, &si, sizeof(si));
    if (n != (ssize_t)sizeof(si)) return; /* EAGAIN: drained */
    int sig = (int)si.ssi_signo;
    if (sig == SIGCHLD) {
      reapChildren(l);
    } else if (isTerminatingSignal(sig)) {
      /* Only the first one counts: wrappers such as timeout(1) deliver a signal twice
       * (to us and to our process group), and SIGKILL follows GRACE_NS later anyway. */
      if (!l->stopping) {
        errMsg("got %s; passing it on to %d rank%s", sigName(sig), l->nrunning,
               l->nrunning == 1 ? "" : "s");
        startStopping(l, 128 + sig, sig);
      }
    } else {
      signalAll(l, sig, 1); /* SIGUSR1/2: pass on only */
    }
  }
}

/* Runs in the child between fork and exec: only async-signal-safe work plus setenv (the
 * launcher is single-threaded, so the copied heap is consistent). */
static void __attribute__((noreturn))
childExec(struct launch* l, int rank, int errPipe, int outFd, int errFd, int stdinIsTty) {
  setpgid(0, 0);
  /* die with the launcher, even if it is killed with SIGKILL */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != l->selfPid) _exit(EXIT_LAUNCHER); /* it already died */
  sigprocmask(SIG_SETMASK, &l->oldMask, NULL);
  signal(SIGPIPE, l->oldPipeHandler);
  if (rank != 0 || stdinIsTty) {
    /* background process groups reading a terminal would stop (SIGTTIN) */
    int nullFd = open("/dev/null", O_RDONLY);
    if (nullFd >= 0 && nullFd != 0) {
      dup2(nullFd, 0);
      close(nullFd);
    }
  }
  if (outFd >= 0) dup2(outFd, 1);
  if (errFd >= 0) dup2(errFd, 2);
  if (l->cpus != NULL) { /* one CPU per rank: two polling ranks never share one */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(l->cpus[rank % l->ncpus], &set);
    sched_setaffinity(0, sizeof(set), &set); /* best effort: unbound is still correct */
  }
  char num[16];
  snprintf(num, sizeof(num), "%d", rank);
  setenv("PAPCCL_RANK", num, 1);
  setenv("PAPCCL_LOCAL_RANK", num, 1);
  snprintf(num, sizeof(num), "%d", l->nranks);
  setenv("PAPCCL_NRANKS", num, 1);
  setenv("PAPCCL_LOCAL_SIZE", num, 1);
  setenv("PAPCCL_COMM_ID", l->commId, 1);
  execvp(l->argv[0], l->argv);
  int err = errno;
  ssize_t ignored = write(errPipe, &err, sizeof(err));
  (void)ignored;
  _exit(err == ENOENT ? 127 : 126);
}

/* Starts one rank; returns 0, or the exit code to leave with. */
static int spawnRank(struct launch* l, int rank, int stdinIsTty) {
  struct rankProc* r = &l->ranks[rank];
  int errPipe[2];
  int outPipes[2][2] = {{-1, -1}, {-1, -1}};
  if (pipe2(errPipe, O_CLOEXEC) != 0) {
    errMsg("pipe failed: %s", strerror(errno));
    return EXIT_LAUNCHER;
  }
  pid_t pid = -1;
  for (int k = 0; l->tagOutput && k < 2; k++) {
    if (pipe2(outPipes[k], O_CLOEXEC) != 0) {
      errMsg("pipe failed: %s", strerror(errno));
      goto out_close_pipes;
    }
  }
  pid = fork();
  if (pid < 0) {
    errMsg("fork of rank %d failed: %s", rank, strerror(errno));
    goto out_close_pipes;
  }
  if (pid == 0) childExec(l, rank, errPipe[1], outPipes[0][1], outPipes[1][1], stdinIsTty);
  setpgid(pid, pid); /* also here, so no signal of ours can miss the group */
  r->pid = pid;
  r->running = 1;
  l->nrunning++;
  close(errPipe[1]);
  for (int k = 0; k < 2; k++) {
    r->out[k].fd = outPipes[k][0];
    r->out[k].destFd = k + 1;
    if (outPipes[k][1] >= 0) close(outPipes[k][1]);
  }
  int err = 0;
  ssize_t n;
  do {
    n = read(errPipe[0], &err, sizeof(err)); /* returns 0 once exec closed the pipe */
  } while (n < 0 && errno == EINTR);
  close(errPipe[0]);
  if (n == (ssize_t)sizeof(err)) {
    errMsg("cannot run '%s': %s", l->argv[0], strerror(err));
    return err == ENOENT ? 127 : 126;
  }
  return 0;

out_close_pipes:
  for (int k = 0; k < 2; k++) {
    for (int e = 0; e < 2; e++) {
      if (outPipes[k][e] >= 0) close(outPipes[k][e]);
    }
  }
  close(errPipe[0]);
  close(errPipe[1]);
  return EXIT_LAUNCHER;
}

static int pollTimeoutMs(const struct launch* l) {
  int64_t deadline = INT64_MAX;
  if (l->stopping && !l->killed) deadline = l->killAt;
  if (!l->stopping && l->timeoutNs > 0) deadline = l->timeoutNs;
  if (deadline == INT64_MAX) return -1;
  int64_t left = deadline - nowNs();
  if (left <= 0) return 0;
  int64_t ms = (left + 999999) / 1000000;
  return ms > 60000 ? 60000 : (int)ms;
}

static void checkDeadlines(struct launch* l) {
  int64_t now = nowNs();
  if (!l->stopping && l->timeoutNs > 0 && now >= l->timeoutNs) {
    errMsg("timeout after %g s: stopping %d running rank%s", (double)l->timeoutSetNs / NS_PER_S,
           l->nrunning, l->nrunning == 1 ? "" : "s");
    startStopping(l, EXIT_TIMEOUT, SIGTERM);
  }
  if (l->stopping && !l->killed && now >= l->killAt) {
    int left = l->nrunning;
    if (left > 0)
      errMsg("%d rank%s still running %d s after %s; sending SIGKILL", left, left == 1 ? "" : "s",
             (int)(GRACE_NS / NS_PER_S), sigName(l->stopSignal));
    signalAll(l, SIGKILL, 0); /* also what exited ranks left behind in their groups */
    l->killed = 1;
  }
}

/* Main loop: signals, output, deadlines, until every rank has been reaped. */
static void superviseRanks(struct launch* l, struct pollfd* pfds, int* owners) {
  while (l->nrunning > 0) {
    int n = 0;
    pfds[n++] = (struct pollfd){.fd = l->sigFd, .events = POLLIN};
    for (int i = 0; l->tagOutput && i < l->nranks; i++) {
      for (int k = 0; k < 2; k++) {
        if (l->ranks[i].out[k].fd < 0) continue;
        owners[n] = 2 * i + k;
        pfds[n++] = (struct pollfd){.fd = l->ranks[i].out[k].fd, .events = POLLIN};
      }
    }
    int ready = poll(pfds, (nfds_t)n, pollTimeoutMs(l));
    if (ready < 0 && errno != EINTR) {
      errMsg("poll failed: %s", strerror(errno));
      startStopping(l, EXIT_LAUNCHER, SIGKILL);
      l->killed = 1;
    }
    if (ready > 0) {
      for (int p = 1; p < n; p++) {
        if (!(pfds[p].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        int rank = owners[p] / 2;
        readStream(&l->ranks[rank].out[owners[p] % 2], rank);
      }
      if (pfds[0].revents & POLLIN) handleSignals(l);
    }
    checkDeadlines(l);
  }
}

/* After the last rank exited: pass on what is still in the pipes, without waiting for
 * processes the ranks left behind that may hold them open. */
static void drainOutput(struct launch* l) {
  for (int i = 0; l->tagOutput && i < l->nranks; i++) {
    for (int k = 0; k < 2; k++) {
      struct outStream* s = &l->ranks[i].out[k];
      while (s->fd >= 0) {
        struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) <= 0) break;
        if (!readStream(s, i)) break;
      }
      if (s->fd >= 0) {
        flushLines(s, i, 1);
        close(s->fd);
        s->fd = -1;
      }
    }
  }
}

int main(int argc, char** argv) {
  struct launch l;
  memset(&l, 0, sizeof(l));
  parseArgs(argc, argv, &l);
  ensureStdFds();
  if (l.tagOutput && ensureFdLimit(l.nranks) != 0) return EXIT_LAUNCHER;

  /* Binding: the CPUs we may use, in order; used when asked, or by default when every rank
   * gets its own. */
  cpu_set_t allowed;
  if (l.bindMode != BIND_NONE && sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    int n = CPU_COUNT(&allowed);
    if (n > 0 && (l.bindMode == BIND_CORE || l.nranks <= n)) {
      l.cpus = calloc((size_t)n, sizeof(int));
      if (l.cpus == NULL) {
        errMsg("out of memory for the CPU list");
        return EXIT_LAUNCHER;
      }
      for (int c = 0; c < CPU_SETSIZE && l.ncpus < n; c++)
        if (CPU_ISSET(c, &allowed)) l.cpus[l.ncpus++] = c;
    }
  }

  int port = 0;
  if (pickFreePort(&port) != 0) {
    free(l.cpus);
    return EXIT_LAUNCHER;
  }
  snprintf(l.commId, sizeof(l.commId), "127.0.0.1:%d", port);

  l.ranks = calloc((size_t)l.nranks, sizeof(*l.ranks));
  struct pollfd* pfds = calloc((size_t)l.nranks * 2 + 1, sizeof(*pfds));
  int* owners = calloc((size_t)l.nranks * 2 + 1, sizeof(*owners)); /* pfds[p]: rank owners[p] / 2 */
  if (l.ranks == NULL || pfds == NULL || owners == NULL) {
    errMsg("out of memory for %d ranks", l.nranks);
    free(l.cpus);
    return EXIT_LAUNCHER;
  }
  for (int i = 0; i < l.nranks; i++)
    l.ranks[i].out[0].fd = l.ranks[i].out[1].fd = -1;
  if (l.timeoutSetNs > 0) l.timeoutNs = nowNs() + l.timeoutSetNs;

  /* Signals are taken from a signalfd, so the loop sees them in order with everything else.
   * Blocked before the first fork, so no SIGCHLD or SIGINT is missed. */
  sigset_t mask;
  sigemptyset(&mask);
  const int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
    sigaddset(&mask, sigs[i]);
  if (sigprocmask(SIG_BLOCK, &mask, &l.oldMask) != 0 ||
      (l.sigFd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
    errMsg("cannot set up signal handling: %s", strerror(errno));
    free(l.cpus);
    return EXIT_LAUNCHER;
  }
  l.oldPipeHandler = signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill us */
  l.selfPid = getpid();

  int stdinIsTty = isatty(0);
  for (int i = 0; i < l.nranks; i++) {
    int rc = spawnRank(&l, i, stdinIsTty);
    if (rc != 0) {
      startStopping(&l, rc, SIGKILL); /* nothing useful has run yet */
      l.killed = 1;
      break;
    }
    /* a rank that fails while the others start stops the launch early */
    handleSignals(&l);
    checkDeadlines(&l);
    if (l.stopping) break;
  }

  superviseRanks(&l, pfds, owners);
  drainOutput(&l);
  if (l.stopping && !l.killed) signalAll(&l, SIGKILL, 0); /* leftovers in the groups */
  free(owners);
  free(pfds);
  free(l.ranks);
  free(l.cpus);
  close(l.sigFd);
  return l.stopping ? l.exitCode : 0;
}
