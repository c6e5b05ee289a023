/* SPDX-License-Identifier: Apache-2.0 */
/* Parameter registry: each value read from the environment once, non-defaults logged. */
#include "param.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "fault.h"
#include "log.h"

static pthread_mutex_t paramLock = PTHREAD_MUTEX_INITIALIZER;

int papParamParseInt(const char* s, int64_t lo, int64_t hi, int64_t* valueOut) {
  char* end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0') return -1;
  *valueOut = v;
  return v < lo || v > hi ? -2 : 0;
}

static int64_t readInt(const char* env, int64_t def, int64_t lo, int64_t hi) {
  const char* s = getenv(env);
  if (s == NULL || *s == '\0') return def;
  int64_t v = 0;
  int rc = papParamParseInt(s, lo, hi, &v);
  if (rc == -1) {
    PAP_WARN("invalid value '%.64s' for %s, using the default %lld", s, env, (long long)def);
    return def;
  }
  if (rc == -2) {
    PAP_WARN("%s=%lld is out of range [%lld, %lld], using the default %lld", env, (long long)v,
             (long long)lo, (long long)hi, (long long)def);
    return def;
  }
  PAP_INFO(PAP_LOG_ENV, "%s set to %lld", env, (long long)v);
  return v;
}

static const char* readStr(const char* env, const char* def) {
  const char* s = getenv(env);
  if (s == NULL || *s == '\0') return def;
  PAP_INFO(PAP_LOG_ENV, "%s set to %s", env, s);
  return s;
}

#define PAP_PARAM_DEF_INT(getter, env, def, lo, hi, doc) \
  static int getter##Valid; \
  static int64_t getter##Value; \
  int64_t papParam##getter(void) { \
    if (__atomic_load_n(&getter##Valid, __ATOMIC_ACQUIRE)) return getter##Value; \
    pthread_mutex_lock(&paramLock); \
    if (!getter##Valid) { \
      getter##Value = readInt(env, def, lo, hi); \
      __atomic_store_n(&getter##Valid, 1, __ATOMIC_RELEASE); \
    } \
    pthread_mutex_unlock(&paramLock); \
    return getter##Value; \
  }
#define PAP_PARAM_DEF_STR(getter, env, def, doc) \
  static int getter##Valid; \
  static const char* getter##Value; \
  const char* papParam##getter(void) { \
    if (__atomic_load_n(&getter##Valid, __ATOMIC_ACQUIRE)) return getter##Value; \
    pthread_mutex_lock(&paramLock); \
    if (!getter##Valid) { \
      getter##Value = readStr(env, def); \
      __atomic_store_n(&getter##Valid, 1, __ATOMIC_RELEASE); \
    } \
    pthread_mutex_unlock(&paramLock); \
    return getter##Value; \
  }
PAP_PARAM_INT_LIST(PAP_PARAM_DEF_INT)
PAP_PARAM_STR_LIST(PAP_PARAM_DEF_STR)

#define PAP_PARAM_RESET(getter, env, def, doc) \
  __atomic_store_n(&getter##Valid, 0, __ATOMIC_RELEASE);
#define PAP_PARAM_RESET_INT(getter, env, def, lo, hi, doc) PAP_PARAM_RESET(getter, env, def, doc)
static unsigned paramGeneration;

unsigned papParamGeneration(void) {
  return __atomic_load_n(&paramGeneration, __ATOMIC_ACQUIRE);
}

void papParamReset(void) {
  pthread_mutex_lock(&paramLock);
  __atomic_add_fetch(&paramGeneration, 1, __ATOMIC_ACQ_REL);
  PAP_PARAM_INT_LIST(PAP_PARAM_RESET_INT)
  PAP_PARAM_STR_LIST(PAP_PARAM_RESET)
  pthread_mutex_unlock(&paramLock);
  papFaultReset();
}

#define PAP_PARAM_INFO(getter, env, def, lo, hi, doc) {env, def, lo, hi, papParam##getter},
static const struct papParamIntInfo intInfo[] = {PAP_PARAM_INT_LIST(PAP_PARAM_INFO)};

int papParamIntCount(void) {
  return (int)(sizeof(intInfo) / sizeof(intInfo[0]));
}

const struct papParamIntInfo* papParamIntAt(int i) {
  return i >= 0 && i < papParamIntCount() ? &intInfo[i] : NULL;
}
