/* SPDX-License-Identifier: Apache-2.0 */
/* NCCL 2.32's parameter API (ncclParam*) over papccl's parameter registry (src/core/param.h),
 * and ncclSetEncryption. A handle is a pointer to a row of a static table: it lives as long as
 * the library, as NCCL's does. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dropin.h"
#include "log.h"
#include "param.h"

enum {
  PK_INT = 1,
  PK_STR = 2,
  PK_LOG = 3
};

struct ncclParamHandle {
  const char* key;
  int kind;
  int64_t (*getInt)(void);
  const char* (*getStr)(void);
  const char* logDefault; /* PK_LOG: read from the environment, as the logger does */
};

#define ROW_INT(getter, env, def, lo, hi, doc) {env, PK_INT, papParam##getter, NULL, NULL},
#define ROW_STR(getter, env, def, doc) {env, PK_STR, NULL, papParam##getter, NULL},
#define ROW_LOG(env, def, doc) {env, PK_LOG, NULL, NULL, def},
static struct ncclParamHandle rows[] = {PAP_PARAM_LOG_LIST(ROW_LOG) PAP_PARAM_INT_LIST(ROW_INT)
                                            PAP_PARAM_STR_LIST(ROW_STR)};
#undef ROW_INT
#undef ROW_STR
#undef ROW_LOG
#define NROWS ((int)(sizeof(rows) / sizeof(rows[0])))

/* A papccl name, or an NCCL name the drop-in honours (papNcclEnvNames). */
static struct ncclParamHandle* lookup(const char* key) {
  for (int i = 0; i < PAP_NCCL_ENV_NAMES; i++)
    if (strcmp(key, papNcclEnvNames[i][0]) == 0) key = papNcclEnvNames[i][1];
  for (int i = 0; i < NROWS; i++)
    if (strcmp(rows[i].key, key) == 0) return &rows[i];
  return NULL;
}

static ncclResult_t unknownKey(const char* fn, const char* key) {
  papLogSetContext(-1, NULL, 0);
  PAP_WARN("%s: no parameter named '%.64s' (papccl's names are in docs/PARAMETERS.md)", fn, key);
  return ncclInvalidArgument;
}

/* The value as text: a thread's own buffer for integers, the registry's string otherwise. */
static const char* valueText(const struct ncclParamHandle* h) {
  static __thread char num[32];
  if (h->kind == PK_INT) {
    snprintf(num, sizeof(num), "%" PRId64, h->getInt());
    return num;
  }
  const char* v = h->kind == PK_STR ? h->getStr() : getenv(h->key);
  if (h->kind == PK_LOG && (v == NULL || *v == '\0')) v = h->logDefault;
  return v ? v : "";
}

NCCL_EXPORT ncclResult_t pncclParamBind(ncclParamHandle_t* out, const char* key) {
  const char* fn = "ncclParamBind";
  if (out == NULL) return papNcclBadArg(fn, "out is NULL");
  if (key == NULL) return papNcclBadArg(fn, "key is NULL");
  struct ncclParamHandle* h = lookup(key);
  if (h == NULL) return unknownKey(fn, key);
  *out = h;
  return ncclSuccess;
}
NCCL_ALIAS(ncclParamBind);

static ncclResult_t checkHandle(const char* fn, ncclParamHandle_t h, const void* out) {
  if (h == NULL || h < rows || h >= rows + NROWS) return papNcclBadArg(fn, "not a bound handle");
  if (out == NULL) return papNcclBadArg(fn, "out is NULL");
  return ncclSuccess;
}

/* The integer value of h within [lo, hi], or an error naming why not. */
static ncclResult_t intIn(const char* fn, ncclParamHandle_t h, const void* out, int64_t lo,
                          int64_t hi, int64_t* v) {
  ncclResult_t res = checkHandle(fn, h, out);
  if (res != ncclSuccess) return res;
  papLogSetContext(-1, NULL, 0);
  if (h->kind != PK_INT) {
    PAP_WARN("%s: %s is a string parameter: read it with ncclParamGetStr", fn, h->key);
    return ncclInvalidArgument;
  }
  *v = h->getInt();
  if (*v < lo || *v > hi) {
    PAP_WARN("%s: %s = %" PRId64 " does not fit the type asked for", fn, h->key, *v);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

#define GET_INT(suffix, type, lo, hi) \
  NCCL_EXPORT ncclResult_t pncclParamGet##suffix(ncclParamHandle_t h, type* out) { \
    int64_t v = 0; \
    ncclResult_t res = intIn("ncclParamGet" #suffix, h, out, lo, hi, &v); \
    if (res == ncclSuccess) *out = (type)v; \
    return res; \
  } \
  NCCL_ALIAS(ncclParamGet##suffix);
GET_INT(I8, int8_t, INT8_MIN, INT8_MAX)
GET_INT(I16, int16_t, INT16_MIN, INT16_MAX)
GET_INT(I32, int32_t, INT32_MIN, INT32_MAX)
GET_INT(I64, int64_t, INT64_MIN, INT64_MAX)
GET_INT(U8, uint8_t, 0, UINT8_MAX)
GET_INT(U16, uint16_t, 0, UINT16_MAX)
GET_INT(U32, uint32_t, 0, UINT32_MAX)
GET_INT(U64, uint64_t, 0, INT64_MAX) /* the registry's integers are int64_t */
#undef GET_INT

NCCL_EXPORT ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char** out) {
  ncclResult_t res = checkHandle("ncclParamGetStr", h, out);
  if (res == ncclSuccess) *out = valueText(h);
  return res;
}
NCCL_ALIAS(ncclParamGetStr);

NCCL_EXPORT ncclResult_t pncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len) {
  const char* fn = "ncclParamGet";
  ncclResult_t res = checkHandle(fn, h, out);
  if (res != ncclSuccess) return res;
  if (len == NULL) return papNcclBadArg(fn, "len is NULL");
  int64_t v = 0;
  const void* src = &v;
  size_t n = sizeof(v);
  if (h->kind == PK_INT) {
    v = h->getInt();
  } else {
    src = valueText(h);
    n = strlen(src) + 1;
  }
  *len = (int)n;
  if (maxLen < 0 || (size_t)maxLen < n) {
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("%s: %s needs %zu bytes, maxLen is %d", fn, h->key, n, maxLen);
    return ncclInvalidArgument;
  }
  memcpy(out, src, n);
  return ncclSuccess;
}
NCCL_ALIAS(ncclParamGet);

NCCL_EXPORT ncclResult_t pncclParamGetParameter(const char* key, const char** value,
                                                int* valueLen) {
  const char* fn = "ncclParamGetParameter";
  if (key == NULL || value == NULL || valueLen == NULL)
    return papNcclBadArg(fn, "key, value and valueLen must not be NULL");
  struct ncclParamHandle* h = lookup(key);
  if (h == NULL) return unknownKey(fn, key);
  *value = valueText(h);
  *valueLen = (int)strlen(*value);
  return ncclSuccess;
}
NCCL_ALIAS(ncclParamGetParameter);

NCCL_EXPORT ncclResult_t pncclParamGetAllParameterKeys(const char*** table, int* tableLen) {
  static const char* keys[NROWS];
  if (table == NULL || tableLen == NULL)
    return papNcclBadArg("ncclParamGetAllParameterKeys", "table and tableLen must not be NULL");
  for (int i = 0; i < NROWS; i++) /* the same pointers every time: no race to fear */
    keys[i] = rows[i].key;
  *table = keys;
  *tableLen = NROWS;
  return ncclSuccess;
}
NCCL_ALIAS(ncclParamGetAllParameterKeys);

NCCL_EXPORT void pncclParamDumpAll(void) {
  papLogSetContext(-1, NULL, 0);
  for (int i = 0; i < NROWS; i++)
    PAP_INFO(PAP_LOG_ENV, "%s=%s", rows[i].key, valueText(&rows[i]));
}
NCCL_ALIAS(ncclParamDumpAll);

/* ---- Encryption ------------------------------------------------------------------------- */

NCCL_EXPORT ncclResult_t pncclSetEncryption(const ncclEncryptionConfig_t* config) {
  const char* fn = "ncclSetEncryption";
  if (config == NULL) return papNcclBadArg(fn, "config is NULL");
  if (config->magic != NCCL_API_MAGIC ||
      config->size < offsetof(ncclEncryptionConfig_t, mode) + sizeof(int))
    return papNcclBadArg(fn, "config was not made with NCCL_ENCRYPTION_CONFIG_INITIALIZER");
  if (config->mode == NCCL_ENCRYPTION_MODE_NONE) return ncclSuccess;
  if (config->mode == NCCL_ENCRYPTION_MODE_PSK)
    return papNcclNotImplemented(NULL, fn, "encrypting the bootstrap sockets (TLS with a PSK)");
  return papNcclBadArg(fn, "mode is neither NCCL_ENCRYPTION_MODE_NONE nor _PSK");
}
NCCL_ALIAS(ncclSetEncryption);
