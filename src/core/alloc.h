/* SPDX-License-Identifier: Apache-2.0 */
/* Checked, zeroing allocation helpers. */
#ifndef PAPCCL_CORE_ALLOC_H_
#define PAPCCL_CORE_ALLOC_H_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "log.h"
#include "papccl.h"

static inline papcclResult_t papCallocBytes(void** out, size_t n, size_t elt, const char* what) {
  if (elt != 0 && n > SIZE_MAX / elt) {
    PAP_WARN("allocation of %zu x %zu bytes for %s overflows", n, elt, what);
    return papcclInvalidArgument;
  }
  void* p = calloc(n ? n : 1, elt ? elt : 1);
  if (p == NULL) {
    PAP_WARN("out of memory allocating %zu bytes for %s", n * elt, what);
    return papcclSystemError;
  }
  *out = p;
  return papcclSuccess;
}
/* papCalloc(&p, n): p = zeroed array of n *p. */
#define papCalloc(pp, n) papCallocBytes((void**)(pp), (n), sizeof(**(pp)), #pp)

/* 64-byte aligned, zeroed. */
static inline papcclResult_t papAlignedAlloc(void** out, size_t bytes, const char* what) {
  void* p = NULL;
  size_t sz = (bytes + 63) & ~(size_t)63;
  if (posix_memalign(&p, 64, sz ? sz : 64) != 0) {
    PAP_WARN("out of memory allocating %zu aligned bytes for %s", bytes, what);
    return papcclSystemError;
  }
  __builtin_memset(p, 0, sz ? sz : 64);
  *out = p;
  return papcclSuccess;
}

#endif /* PAPCCL_CORE_ALLOC_H_ */
