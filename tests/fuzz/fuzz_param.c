/* SPDX-License-Identifier: Apache-2.0 */
/* PAPCCL_* environment values. Byte 0 picks the kind, byte 1 the variable within it:
 *   0  integer parameter (byte 1 mod the count), read through its cached getter after
 *      papParamReset and checked against papParamParseInt with its range;
 *   1  string parameter (byte 1 mod the count);
 *   2  PAPCCL_DEBUG_SUBSYS;  3  PAPCCL_FAULT;
 *   4  papParamParseInt alone, with a range made from byte 1 (possibly crossed).
 * The rest of the input, cut at its first NUL, is the value. The environment is restored
 * after each input. */
#include <stdio.h>
#include <string.h>

#include "fault.h"
#include "fuzz_common.h"
#include "log.h"
#include "param.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzQuietLog();
  return 0;
}

#define FUZZ_STR_PARAM(getter, env, def, doc) {env, papParam##getter},
static const struct {
  const char* env;
  const char* (*get)(void);
} strParams[] = {PAP_PARAM_STR_LIST(FUZZ_STR_PARAM)};
#define N_STR ((int)(sizeof(strParams) / sizeof(strParams[0])))

/* putenv of a buffer of ours: setenv would keep a copy of every distinct value for good. */
static char envBuf[64 + 8192];

static void setVar(const char* name, const char* value) {
  snprintf(envBuf, sizeof(envBuf), "%s=%s", name, value);
  putenv(envBuf);
}

static void intParam(int i, const char* value) {
  const struct papParamIntInfo* info = papParamIntAt(i);
  FUZZ_ASSERT(info != NULL);
  setVar(info->env, value);
  papParamReset();
  int64_t got = info->get();
  FUZZ_ASSERT(got == info->get()); /* cached */
  int64_t v = 0;
  int rc = papParamParseInt(value, info->min, info->max, &v);
  if (value[0] != '\0' && rc == 0) {
    FUZZ_ASSERT(got == v);
  } else {
    FUZZ_ASSERT(got == info->def);
  }
  FUZZ_ASSERT(got >= info->min && got <= info->max);
  unsetenv(info->env);
  papParamReset();
}

static void strParam(int i, const char* value) {
  setVar(strParams[i].env, value);
  papParamReset();
  const char* got = strParams[i].get();
  if (value[0] != '\0') FUZZ_ASSERT(got != NULL && strcmp(got, value) == 0);
  unsetenv(strParams[i].env);
  papParamReset();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  int kind = data[0] % 5;
  uint8_t sel = data[1];
  size_t len = size - 2 < 8191 ? size - 2 : 8191; /* what envBuf holds */
  char* value = malloc(len + 1);
  if (value == NULL) return 0;
  memcpy(value, data + 2, len);
  value[len] = '\0';
  if (kind == 0) {
    intParam(sel % papParamIntCount(), value);
  } else if (kind == 1) {
    strParam(sel % N_STR, value);
  } else if (kind == 2) {
    unsigned mask = papLogParseSubsys(value);
    (void)mask;
  } else if (kind == 3) {
    int n = papFaultParseCount(value);
    FUZZ_ASSERT(n >= -1);
  } else {
    /* The bare parser, with a range of its own (lo <= hi, or crossed). */
    int64_t lo = (int64_t)(int8_t)sel * 1000;
    int64_t hi = lo + (sel & 0x0f) * 100 - 500;
    int64_t v = 12345;
    int rc = papParamParseInt(value, lo, hi, &v);
    FUZZ_ASSERT(rc == 0 || rc == -1 || rc == -2);
    if (rc == 0) FUZZ_ASSERT(v >= lo && v <= hi);
    if (rc == -1) FUZZ_ASSERT(v == 12345); /* nothing written */
  }
  free(value);
  return 0;
}
