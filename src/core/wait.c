/* SPDX-License-Identifier: Apache-2.0 */
#include "wait.h"

#include <sched.h>
#include <time.h>

#include "futex.h"
#include "log.h"
#include "param.h"

#define PAP_WAIT_HEALTH_NS 100000000ull /* peers' health, every 100 ms */
#define PAP_WAIT_FIRST_SLEEP_NS 2000
#define PAP_WAIT_YIELD_EVERY_NS 20000ull /* pausing polls still yield this often */
#define PAP_WAIT_EXPECT_MIN_NS 200000ull /* the margin around an expected event */
#define PAP_WAIT_EXPECT_MAX_NS 2000000ull

void papWaitInit(struct papWait* w, const char* what, const volatile int* abortFlag, int timed,
                 uint64_t spinNs, long maxSleepNs) {
  uint64_t now = papNowNs();
  w->what = what;
  w->describe = NULL;
  w->hint = "";
  w->abortFlag = abortFlag;
  w->deadline = timed ? now + (uint64_t)papParamTimeoutS() * 1000000000ull : 0;
  w->spinNs = spinNs;
  w->spinUntil = now + spinNs;
  w->pollFrom = w->pollUntil = 0;
  w->yield = 1;
  w->lastYield = now;
  w->nextHealth = now + PAP_WAIT_HEALTH_NS;
  w->sleepNs = PAP_WAIT_FIRST_SLEEP_NS;
  w->maxSleepNs = maxSleepNs > PAP_WAIT_FIRST_SLEEP_NS ? maxSleepNs : PAP_WAIT_FIRST_SLEEP_NS;
  w->abortRes = papcclInvalidUsage;
  w->timeoutRes = papcclRemoteError;
}

void papWaitDescribe(struct papWait* w, void (*describe)(const struct papWait*, char*, size_t),
                     char* buf, size_t len) {
  w->describe = describe;
  w->whatBuf = buf;
  w->whatLen = len;
  if (buf != NULL && len > 0) buf[0] = '\0';
  w->what = buf;
}

const char* papWaitWhat(struct papWait* w) {
  if (w->describe != NULL && w->whatBuf != NULL && w->whatLen > 0) {
    w->describe(w, w->whatBuf, w->whatLen);
    w->describe = NULL;
    w->what = w->whatBuf;
  }
  return w->what != NULL ? w->what : "a wait";
}

papcclResult_t papWaitCheck(struct papWait* w, uint64_t now) {
  if (papAborted(w->abortFlag)) {
    PAP_WARN("%s: cancelled, the communicator was aborted", papWaitWhat(w));
    return w->abortRes;
  }
  if (w->deadline != 0 && now >= w->deadline) {
    PAP_WARN("%s: timed out after %lld s (PAPCCL_TIMEOUT_S)%s", papWaitWhat(w),
             (long long)papParamTimeoutS(), w->hint);
    return w->timeoutRes;
  }
  return papcclSuccess;
}

int papWaitHealthDue(struct papWait* w, uint64_t now) {
  if (now < w->nextHealth) return 0;
  w->nextHealth = now + PAP_WAIT_HEALTH_NS;
  return 1;
}

void papWaitProgressed(struct papWait* w, uint64_t now) {
  w->spinUntil = now + w->spinNs;
  w->sleepNs = PAP_WAIT_FIRST_SLEEP_NS;
}

void papWaitExpect(struct papWait* w, uint64_t from, uint64_t at, uint64_t spreadNs) {
  w->pollFrom = w->pollUntil = 0;
  if (at <= from) return;
  uint64_t lead = (at - from) / 8;
  if (spreadNs > UINT64_MAX / 2) spreadNs = UINT64_MAX / 2;
  if (lead < 2 * spreadNs) lead = 2 * spreadNs;
  if (lead < PAP_WAIT_EXPECT_MIN_NS) lead = PAP_WAIT_EXPECT_MIN_NS;
  if (lead > PAP_WAIT_EXPECT_MAX_NS) lead = PAP_WAIT_EXPECT_MAX_NS;
  w->pollFrom = at > lead ? at - lead : 0;
  w->pollUntil = at + lead;
}

int papWaitSpin(struct papWait* w, uint64_t now) {
  if (now >= w->spinUntil && (now < w->pollFrom || now >= w->pollUntil)) return 0;
  if (!w->yield && now - w->lastYield >= PAP_WAIT_YIELD_EVERY_NS) {
    /* The scheduler may have put the peer we wait for on our CPU: let it run. */
    sched_yield();
    w->lastYield = now;
    return 1;
  }
  papWaitPoll(w);
  return 1;
}

void papWaitPoll(const struct papWait* w) {
  if (w->yield)
    sched_yield();
  else
    papCpuRelax();
}

void papWaitSleep(struct papWait* w) {
  struct timespec ts = {0, w->sleepNs};
  nanosleep(&ts, NULL);
  if (w->sleepNs < w->maxSleepNs) {
    w->sleepNs *= 2;
    if (w->sleepNs > w->maxSleepNs) w->sleepNs = w->maxSleepNs;
  }
}

int64_t papWaitSlice(const struct papWait* w, uint64_t now, int64_t want) {
  if (w->pollFrom > now && (int64_t)(w->pollFrom - now) < want) want = (int64_t)(w->pollFrom - now);
  if (w->deadline == 0) return want;
  if (now >= w->deadline) return 0;
  return (int64_t)(w->deadline - now) < want ? (int64_t)(w->deadline - now) : want;
}
