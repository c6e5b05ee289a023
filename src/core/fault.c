/* SPDX-License-Identifier: Apache-2.0 */
/* PAPCCL_FAULT: the test hook that kills, stalls or delays a rank at a chosen point
 * (grammar in fault.h). The parsed specs are cached with the string they came from; a
 * changed PAPCCL_FAULT (after papParamReset) is parsed again and its specs fire anew. */
#include "fault.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "param.h"
#include "socket.h"

#define FAULT_MAX_SPECS 8
#define FAULT_SPEC_MAX 512

enum faultAction {
  FAULT_KILL,
  FAULT_STALL,
  FAULT_DELAY
};

struct faultSpec {
  enum faultAction action;
  enum papFaultPoint point;
  int rank; /* -1: any */
  int64_t nth;
  int64_t ms; /* -1: not given */
  int64_t hits; /* matching hits so far (under faultLock) */
};

static const char* const pointNames[PAP_FAULT_NPOINTS] = {"bootstrap", "chunk", "commit", "hello"};
static const char* const actionNames[] = {"kill", "stall", "delay"};

/* Parses an integer in [lo, hi] from [s, end). */
static int parseNum(const char* s, const char* end, int64_t lo, int64_t hi, int64_t* out) {
  char buf[24];
  size_t len = (size_t)(end - s);
  if (len == 0 || len >= sizeof(buf)) return -1;
  memcpy(buf, s, len);
  buf[len] = '\0';
  char* e = NULL;
  errno = 0;
  long long v = strtoll(buf, &e, 10);
  if (errno != 0 || *e != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int nameIs(const char* s, const char* end, const char* name) {
  size_t len = strlen(name);
  return (size_t)(end - s) == len && memcmp(s, name, len) == 0;
}

/* One SPEC in [s, end); returns 0 or -1 with a WARN naming what is wrong. */
static int parseSpec(const char* s, const char* end, struct faultSpec* out) {
  const char* at = memchr(s, '@', (size_t)(end - s));
  if (at == NULL) {
    PAP_WARN("PAPCCL_FAULT: '%.*s' has no '@' (want ACTION@POINT[:rank=R][:nth=K][:ms=M])",
             (int)(end - s), s);
    return -1;
  }
  memset(out, 0, sizeof(*out));
  out->rank = -1;
  out->nth = 1;
  out->ms = -1;
  int found = 0;
  for (int a = 0; a < (int)(sizeof(actionNames) / sizeof(actionNames[0])); a++)
    if (nameIs(s, at, actionNames[a])) out->action = (enum faultAction)a, found = 1;
  if (!found) {
    PAP_WARN("PAPCCL_FAULT: unknown action '%.*s' (kill, stall or delay)", (int)(at - s), s);
    return -1;
  }
  const char* p = at + 1;
  const char* colon = memchr(p, ':', (size_t)(end - p));
  const char* pend = colon ? colon : end;
  found = 0;
  for (int i = 0; i < PAP_FAULT_NPOINTS; i++)
    if (nameIs(p, pend, pointNames[i])) out->point = (enum papFaultPoint)i, found = 1;
  if (!found) {
    PAP_WARN("PAPCCL_FAULT: unknown point '%.*s' (bootstrap, chunk, commit or hello)",
             (int)(pend - p), p);
    return -1;
  }
  while (colon != NULL) {
    const char* k = colon + 1;
    colon = memchr(k, ':', (size_t)(end - k));
    const char* kend = colon ? colon : end;
    const char* eq = memchr(k, '=', (size_t)(kend - k));
    int64_t v = 0;
    int ok = eq != NULL;
    if (ok && nameIs(k, eq, "rank")) {
      ok = parseNum(eq + 1, kend, 0, INT32_MAX, &v) == 0;
      out->rank = (int)v;
    } else if (ok && nameIs(k, eq, "nth")) {
      ok = parseNum(eq + 1, kend, 1, INT64_MAX, &v) == 0;
      out->nth = v;
    } else if (ok && nameIs(k, eq, "ms")) {
      ok = parseNum(eq + 1, kend, 0, 86400000, &v) == 0;
      out->ms = v;
    } else {
      ok = 0;
    }
    if (!ok) {
      PAP_WARN("PAPCCL_FAULT: bad option '%.*s' (rank=R, nth=K >= 1 or ms=M)", (int)(kend - k), k);
      return -1;
    }
  }
  return 0;
}

/* Parses the whole value; returns the number of specs, or -1. */
static int parseAll(const char* value, struct faultSpec* specs) {
  int n = 0;
  const char* s = value;
  size_t total = strnlen(value, FAULT_SPEC_MAX + 1);
  if (total > FAULT_SPEC_MAX) {
    PAP_WARN("PAPCCL_FAULT is longer than %d characters", FAULT_SPEC_MAX);
    return -1;
  }
  const char* stop = value + total;
  if (s == stop) return 0;
  for (;;) { /* every piece between commas is a spec: an empty one is an error */
    const char* comma = memchr(s, ',', (size_t)(stop - s));
    const char* end = comma ? comma : stop;
    if (n == FAULT_MAX_SPECS) {
      PAP_WARN("PAPCCL_FAULT has more than %d specs", FAULT_MAX_SPECS);
      return -1;
    }
    if (parseSpec(s, end, &specs[n]) != 0) return -1;
    n++;
    if (comma == NULL) return n;
    s = comma + 1;
  }
}

int papFaultParseCount(const char* spec) {
  struct faultSpec specs[FAULT_MAX_SPECS];
  if (spec == NULL) return 0;
  return parseAll(spec, specs);
}

#ifdef PAPCCL_FAULT_HOOK
static pthread_mutex_t faultLock = PTHREAD_MUTEX_INITIALIZER;
static char cachedValue[FAULT_SPEC_MAX + 1];
static int cachedValid; /* cachedValue/specs hold the parse of the current value */
static struct faultSpec specs[FAULT_MAX_SPECS];
static int nspecs;
#endif

void papFaultReset(void) {
#ifdef PAPCCL_FAULT_HOOK
  pthread_mutex_lock(&faultLock);
  cachedValid = 0;
  pthread_mutex_unlock(&faultLock);
#endif
}

int papFaultHookBuilt(void) {
#ifdef PAPCCL_FAULT_HOOK
  return 1;
#else
  return 0;
#endif
}

void papFaultCheckBuild(void) {
#ifndef PAPCCL_FAULT_HOOK
  static int warned;
  const char* value = papParamFault();
  if (value != NULL && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    PAP_WARN(
        "PAPCCL_FAULT=%.64s is ignored: this build has no fault-injection hook (meson "
        "option fault_hook)",
        value);
#endif
}

#ifdef PAPCCL_FAULT_HOOK

static void sleepMs(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void papFaultHit(enum papFaultPoint point, int rank, const volatile int* abortFlag) {
  const char* value = papParamFault();
  if (value == NULL) return;
  struct faultSpec fire;
  int fired = 0;
  pthread_mutex_lock(&faultLock);
  if (!cachedValid || strncmp(cachedValue, value, sizeof(cachedValue)) != 0) {
    int n = parseAll(value, specs);
    nspecs = n < 0 ? 0 : n;
    snprintf(cachedValue, sizeof(cachedValue), "%s", value);
    cachedValid = 1;
  }
  for (int i = 0; i < nspecs && !fired; i++) {
    struct faultSpec* f = &specs[i];
    if (f->point != point || (f->rank >= 0 && f->rank != rank)) continue;
    if (++f->hits == f->nth) fire = *f, fired = 1;
  }
  pthread_mutex_unlock(&faultLock);
  if (!fired) return;
  PAP_WARN("PAPCCL_FAULT: %s of rank %d at %s (hit %lld)", actionNames[fire.action], rank,
           pointNames[point], (long long)fire.nth);
  switch (fire.action) {
  case FAULT_KILL:
    kill(getpid(), SIGKILL);
    for (;;)
      pause(); /* SIGKILL cannot be caught: this is never reached */
  case FAULT_DELAY:
    sleepMs(fire.ms < 0 ? 100 : fire.ms);
    break;
  case FAULT_STALL:
    for (int64_t slept = 0; fire.ms < 0 || slept < fire.ms; slept += 10) {
      if (papAborted(abortFlag)) break;
      sleepMs(10);
    }
    break;
  }
}

#endif /* PAPCCL_FAULT_HOOK */
