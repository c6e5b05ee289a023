/* SPDX-License-Identifier: Apache-2.0 */
/* Error-propagation macros (the only macros allowed to hide a return or goto). */
#ifndef PAPCCL_CORE_CHECK_H_
#define PAPCCL_CORE_CHECK_H_

#include <errno.h>
#include <string.h>

#include "log.h"
#include "papccl.h"

/* Return the error of `call`, leaving an INFO breadcrumb. */
#define PAP_CHECK(call) \
  do { \
    papcclResult_t papRes_ = (call); \
    if (papRes_ != papcclSuccess && papRes_ != papcclInProgress) { \
      PAP_INFO(PAP_LOG_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)papRes_); \
      return papRes_; \
    } \
  } while (0)

#define PAP_CHECK_GOTO(call, res, label) \
  do { \
    (res) = (call); \
    if ((res) != papcclSuccess && (res) != papcclInProgress) { \
      PAP_INFO(PAP_LOG_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)(res)); \
      goto label; \
    } \
  } while (0)

/* A syscall returning -1 on failure; EINTR is retried. */
#define PAP_SYS_CHECK_GOTO(call, name, res, label) \
  do { \
    int papSysRet_; \
    do { \
      papSysRet_ = (int)(call); \
    } while (papSysRet_ == -1 && errno == EINTR); \
    if (papSysRet_ == -1) { \
      PAP_WARN("%s failed: %s", (name), strerror(errno)); \
      (res) = papcclSystemError; \
      goto label; \
    } \
  } while (0)

/* pthread functions return the error code instead of setting errno. */
#define PAP_PTHREAD_CHECK_GOTO(call, name, res, label) \
  do { \
    int papPtRet_ = (call); \
    if (papPtRet_ != 0) { \
      PAP_WARN("%s failed: %s", (name), strerror(papPtRet_)); \
      (res) = papcclSystemError; \
      goto label; \
    } \
  } while (0)

#ifdef PAP_DEBUG_ASSERTS
#define PAP_ASSERT(cond) \
  do { \
    if (!(cond)) PAP_WARN("internal invariant failed: %s", #cond); \
  } while (0)
#else
#define PAP_ASSERT(cond) \
  do { \
  } while (0)
#endif

#endif /* PAPCCL_CORE_CHECK_H_ */
