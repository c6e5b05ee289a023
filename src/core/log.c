/* SPDX-License-Identifier: Apache-2.0 */
/* Logging implementation: levels, subsystem masks, file output, last-error capture. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int papLogLevelCached = -1;
unsigned papLogMaskCached = PAP_LOG_INIT | PAP_LOG_BOOTSTRAP | PAP_LOG_ENV;

static pthread_once_t logOnce = PTHREAD_ONCE_INIT;
static FILE* logFile;
static pthread_mutex_t logLock = PTHREAD_MUTEX_INITIALIZER;
static char logHost[64];
static papLogHookFn warnHook;
static void* warnHookArg;

static __thread int tlsRank = -1;
static __thread char* tlsErrBuf;
static __thread size_t tlsErrLen;
static __thread char tlsLastError[1024];

static const struct {
  const char* name;
  unsigned bit;
} subsysNames[] = {
    {"INIT", PAP_LOG_INIT},
    {"BOOTSTRAP", PAP_LOG_BOOTSTRAP},
    {"COLL", PAP_LOG_COLL},
    {"PAP", PAP_LOG_PAP},
    {"PROXY", PAP_LOG_PROXY},
    {"NET", PAP_LOG_NET},
    {"SHM", PAP_LOG_SHM},
    {"UCX", PAP_LOG_UCX},
    {"IB", PAP_LOG_IB},
    {"REG", PAP_LOG_REG},
    {"ALLOC", PAP_LOG_ALLOC},
    {"ENV", PAP_LOG_ENV},
    {"ALL", (unsigned)PAP_LOG_ALL},
};

unsigned papLogParseSubsys(const char* s) {
  int invert = 0;
  unsigned mask = 0;
  char buf[256];
  if (s[0] == '^') {
    invert = 1;
    s++;
  }
  snprintf(buf, sizeof(buf), "%s", s);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    for (size_t i = 0; i < sizeof(subsysNames) / sizeof(subsysNames[0]); i++) {
      if (strcasecmp(tok, subsysNames[i].name) == 0) mask |= subsysNames[i].bit;
    }
  }
  return invert ? ~mask : mask;
}

/* PAPCCL_DEBUG_FILE: %h -> host, %p -> pid. */
static void openLogFile(const char* pattern) {
  char path[512];
  size_t o = 0;
  for (const char* p = pattern; *p && o + 32 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'h') {
      o += (size_t)snprintf(path + o, sizeof(path) - o, "%s", logHost);
      p++;
    } else if (p[0] == '%' && p[1] == 'p') {
      o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
      p++;
    } else {
      path[o++] = *p;
    }
  }
  path[o] = '\0';
  FILE* f = fopen(path, "w");
  if (f) {
    setvbuf(f, NULL, _IOLBF, 0);
    logFile = f;
  } else {
    fprintf(stderr, "papccl: cannot open PAPCCL_DEBUG_FILE %s, logging to stderr\n", path);
  }
}

static void logInitOnce(void) {
  gethostname(logHost, sizeof(logHost) - 1);
  char* dot = strchr(logHost, '.');
  if (dot) *dot = '\0';
  const char* lvl = getenv("PAPCCL_DEBUG");
  int level = PAP_LOG_WARN; /* WARN is always useful: errors name their cause */
  if (lvl) {
    if (strcasecmp(lvl, "NONE") == 0)
      level = PAP_LOG_NONE;
    else if (strcasecmp(lvl, "VERSION") == 0)
      level = PAP_LOG_VERSION;
    else if (strcasecmp(lvl, "WARN") == 0)
      level = PAP_LOG_WARN;
    else if (strcasecmp(lvl, "INFO") == 0)
      level = PAP_LOG_INFO;
    else if (strcasecmp(lvl, "TRACE") == 0)
      level = PAP_LOG_TRACE;
  }
  const char* sub = getenv("PAPCCL_DEBUG_SUBSYS");
  if (sub) papLogMaskCached = papLogParseSubsys(sub);
  const char* file = getenv("PAPCCL_DEBUG_FILE");
  logFile = stderr;
  if (file && level > PAP_LOG_NONE) openLogFile(file);
  __atomic_store_n(&papLogLevelCached, level, __ATOMIC_RELEASE);
}

void papLogInit(void) {
  pthread_once(&logOnce, logInitOnce);
}

void papLogSetContext(int rank, char* buf, size_t len) {
  tlsRank = rank;
  tlsErrBuf = buf;
  tlsErrLen = len;
}

void papLogGetContext(int* rankOut, char** bufOut, size_t* lenOut) {
  *rankOut = tlsRank;
  *bufOut = tlsErrBuf;
  *lenOut = tlsErrLen;
}

#define PAP_RESULT_LIST(X) \
  X(papcclSuccess, "no error") \
  X(papcclUnhandledCudaError, "unhandled cuda error (run with PAPCCL_DEBUG=INFO for details)") \
  X(papcclSystemError, "unhandled system error (run with PAPCCL_DEBUG=INFO for details)") \
  X(papcclInternalError, "internal error - please report this issue to the papccl developers") \
  X(papcclInvalidArgument, "invalid argument (run with PAPCCL_DEBUG=WARN for details)") \
  X(papcclInvalidUsage, "invalid usage (run with PAPCCL_DEBUG=WARN for details)") \
  X(papcclRemoteError, "remote process exited or there was a network error") \
  X(papcclInProgress, "papccl operation in progress")

const char* papResultString(papcclResult_t result) {
#define PAP_RESULT_CASE(code, text) \
  case code: \
    return text;
  switch (result) {
    PAP_RESULT_LIST(PAP_RESULT_CASE)
  default:
    return "unknown result code";
  }
#undef PAP_RESULT_CASE
}

const char* papLogThreadLastError(void) {
  return tlsLastError;
}

void papLogSetWarnHook(papLogHookFn fn, void* arg) {
  pthread_mutex_lock(&logLock);
  warnHook = fn;
  warnHookArg = arg;
  pthread_mutex_unlock(&logLock);
}

void papLogPrintf(int level, unsigned subsys, const char* file, int line, const char* fmt, ...) {
  papLogInit();
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == PAP_LOG_WARN) {
    memcpy(tlsLastError, msg, sizeof(tlsLastError) - 1);
    tlsLastError[sizeof(tlsLastError) - 1] = 0;
    if (tlsErrBuf && tlsErrLen) snprintf(tlsErrBuf, tlsErrLen, "%s", msg);
  }
  (void)subsys;
  int print = level <= papLogLevelCached;
  pthread_mutex_lock(&logLock);
  if (level == PAP_LOG_WARN && warnHook) warnHook(msg, warnHookArg);
  if (print) {
    const char* base = strrchr(file, '/');
    base = base ? base + 1 : file;
    long tid = (long)syscall(SYS_gettid);
    const char* tag = level == PAP_LOG_WARN ? "WARN" : level == PAP_LOG_INFO ? "INFO" : "TRACE";
    if (tlsRank >= 0)
      fprintf(logFile, "%s:%d:%ld [%d] papccl %s %s (%s:%d)\n", logHost, (int)getpid(), tid,
              tlsRank, tag, msg, base, line);
    else
      fprintf(logFile, "%s:%d:%ld papccl %s %s (%s:%d)\n", logHost, (int)getpid(), tid, tag, msg,
              base, line);
  }
  pthread_mutex_unlock(&logLock);
}
