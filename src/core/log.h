/* SPDX-License-Identifier: Apache-2.0 */
/* Logging: PAPCCL_DEBUG levels, PAPCCL_DEBUG_SUBSYS masks, per-comm last-error text. */
#ifndef PAPCCL_CORE_LOG_H_
#define PAPCCL_CORE_LOG_H_

#include <stdarg.h>
#include <stddef.h>

#include "papccl.h"

enum papLogLevel {
  PAP_LOG_NONE = 0,
  PAP_LOG_VERSION = 1,
  PAP_LOG_WARN = 2,
  PAP_LOG_INFO = 3,
  PAP_LOG_TRACE = 4
};

enum papLogSubsys {
  PAP_LOG_INIT = 1 << 0,
  PAP_LOG_BOOTSTRAP = 1 << 1,
  PAP_LOG_COLL = 1 << 2,
  PAP_LOG_PAP = 1 << 3,
  PAP_LOG_PROXY = 1 << 4,
  PAP_LOG_NET = 1 << 5,
  PAP_LOG_SHM = 1 << 6,
  PAP_LOG_UCX = 1 << 7,
  PAP_LOG_IB = 1 << 8,
  PAP_LOG_REG = 1 << 9,
  PAP_LOG_ALLOC = 1 << 10,
  PAP_LOG_ENV = 1 << 11,
  PAP_LOG_ALL = ~0
};

/* Read once from the environment (thread-safe). */
extern int papLogLevelCached;
extern unsigned papLogMaskCached;
void papLogInit(void);
/* The subsystem mask PAPCCL_DEBUG_SUBSYS=s asks for (a comma list, '^' inverts). */
unsigned papLogParseSubsys(const char* s);

/* Thread-local rank shown in log lines, and the buffer that receives the last WARN text
 * (a comm's lastError); both set by the API edge for the duration of a call. */
void papLogSetContext(int rank, char* lastErrorBuf, size_t lastErrorLen);
void papLogGetContext(int* rankOut, char** bufOut, size_t* lenOut);

/* The last WARN text of this thread (for papcclGetLastError(NULL)). */
const char* papLogThreadLastError(void);
/* The text of a result code (papcclGetErrorString's). */
const char* papResultString(papcclResult_t result);

void papLogPrintf(int level, unsigned subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* A test hook: when set, every WARN is also passed to it (tests fail on unexpected WARNs). */
typedef void (*papLogHookFn)(const char* msg, void* arg);
void papLogSetWarnHook(papLogHookFn fn, void* arg);

#define PAP_WARN(...) papLogPrintf(PAP_LOG_WARN, PAP_LOG_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define PAP_INFO(subsys, ...) \
  do { \
    if (papLogLevelCached < 0) papLogInit(); \
    if (papLogLevelCached >= PAP_LOG_INFO && (papLogMaskCached & (subsys))) \
      papLogPrintf(PAP_LOG_INFO, (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#ifdef PAP_ENABLE_TRACE
#define PAP_TRACE(subsys, ...) \
  do { \
    if (papLogLevelCached < 0) papLogInit(); \
    if (papLogLevelCached >= PAP_LOG_TRACE && (papLogMaskCached & (subsys))) \
      papLogPrintf(PAP_LOG_TRACE, (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#else
#define PAP_TRACE(...) \
  do { \
  } while (0)
#endif

#endif /* PAPCCL_CORE_LOG_H_ */
