/* SPDX-License-Identifier: Apache-2.0 */
/* Argument validation at the API edge: every failure names the call and the argument. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "enqueue.h"
#include "kernels.h"
#include "log.h"

papcclResult_t papArgCheckType(const char* fn, papcclDataType_t dtype) {
  if ((int)dtype < 0 || (int)dtype >= papcclNumTypes) {
    PAP_WARN("%s: invalid datatype %d (valid: 0..%d)", fn, (int)dtype, papcclNumTypes - 1);
    return papcclInvalidArgument;
  }
  return papcclSuccess;
}

papcclResult_t papArgCheckOp(struct papComm* comm, const char* fn, papcclRedOp_t op,
                             papcclDataType_t dtype, struct papOpDesc* d) {
  d->op = op;
  d->call.avg = 0;
  d->call.preMul = 0;
  switch ((int)op) {
  case papcclSum:
    d->call.red = PAP_RED_SUM;
    return papcclSuccess;
  case papcclProd:
    d->call.red = PAP_RED_PROD;
    return papcclSuccess;
  case papcclMax:
    d->call.red = PAP_RED_MAX;
    return papcclSuccess;
  case papcclMin:
    d->call.red = PAP_RED_MIN;
    return papcclSuccess;
  case papcclAvg:
    d->call.red = PAP_RED_SUM;
    if (dtype <= papcclUint64) {
      d->call.avg = 1; /* integers: sum, then divide (truncating), as NCCL */
      return papcclSuccess;
    }
    /* Floating types: each input is pre-multiplied by 1/nranks rounded to the type, then
     * summed, as NCCL does, so results match NCCL bit for bit. */
    d->call.preMul = 1;
    memset(d->call.scalar, 0, sizeof(d->call.scalar));
    {
      double inv = 1.0 / (double)comm->nranks;
      float invf = (float)inv;
      uint16_t h;
      uint8_t q;
      switch (dtype) {
      case papcclFloat16:
        h = papKernFloatToHalf(invf);
        memcpy(d->call.scalar, &h, sizeof(h));
        break;
      case papcclBfloat16:
        h = papKernFloatToBf16(invf);
        memcpy(d->call.scalar, &h, sizeof(h));
        break;
      case papcclFloat8e4m3:
        q = papKernFloatToE4m3(invf);
        memcpy(d->call.scalar, &q, sizeof(q));
        break;
      case papcclFloat8e5m2:
        q = papKernFloatToE5m2(invf);
        memcpy(d->call.scalar, &q, sizeof(q));
        break;
      case papcclFloat32:
        memcpy(d->call.scalar, &invf, sizeof(invf));
        break;
      default:
        memcpy(d->call.scalar, &inv, sizeof(inv));
        break;
      }
    }
    return papcclSuccess;
  default:
    break;
  }
  int idx = (int)op - papcclNumOps;
  if (idx < 0 || idx >= PAP_MAX_USER_OPS) {
    PAP_WARN("%s: invalid reduction op %d", fn, (int)op);
    return papcclInvalidArgument;
  }
  pthread_mutex_lock(&comm->userOpLock);
  struct papUserOp u = comm->userOps[idx];
  pthread_mutex_unlock(&comm->userOpLock);
  if (!u.inUse) {
    PAP_WARN("%s: reduction op %d was not created on this communicator or was destroyed", fn,
             (int)op);
    return papcclInvalidArgument;
  }
  if (u.dtype != dtype) {
    PAP_WARN("%s: reduction op %d was created for datatype %d, used with datatype %d", fn, (int)op,
             (int)u.dtype, (int)dtype);
    return papcclInvalidArgument;
  }
  d->call.red = PAP_RED_SUM;
  d->call.preMul = 1;
  memcpy(d->call.scalar, u.scalar, sizeof(d->call.scalar));
  return papcclSuccess;
}

/* No buffer can be larger than a 48-bit virtual address space (x86-64 and AArch64 user
 * space): a larger byte count is a bad count, not a buffer. */
#define PAP_MAX_BUFFER_BYTES ((size_t)1 << 48)

papcclResult_t papArgCheckCount(const char* fn, size_t count, papcclDataType_t dtype, size_t mult) {
  if (count == 0) return papcclSuccess;
  size_t esz = papKernTypeSize(dtype);
  size_t bytes;
  if (mult == 0) mult = 1;
  /* Overflow-checked multiplies: no division on the per-call path. */
  if (__builtin_mul_overflow(count, esz, &bytes) || __builtin_mul_overflow(bytes, mult, &bytes) ||
      bytes > PAP_MAX_BUFFER_BYTES) {
    PAP_WARN("%s: count %zu of %zu-byte elements (x%zu) exceeds the address space", fn, count, esz,
             mult);
    return papcclInvalidArgument;
  }
  return papcclSuccess;
}

papcclResult_t papArgCheckBuf(const char* fn, const char* what, const void* buf, size_t count,
                              papcclDataType_t dtype, size_t mult) {
  (void)dtype;
  (void)mult; /* the size was checked once, by papArgCheckCount, for every rank */
  if (count && buf == NULL) {
    PAP_WARN("%s: %s is NULL with count %zu", fn, what, count);
    return papcclInvalidArgument;
  }
  return papcclSuccess;
}

papcclResult_t papArgCheckRank(struct papComm* comm, const char* fn, const char* what, int r) {
  if (r < 0 || r >= comm->nranks) {
    PAP_WARN("%s: %s %d is out of range (communicator has %d ranks)", fn, what, r, comm->nranks);
    return papcclInvalidArgument;
  }
  return papcclSuccess;
}
