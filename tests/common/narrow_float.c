/* SPDX-License-Identifier: Apache-2.0 */
/* Reference converters of the narrow float formats (see narrow_float.h). */
#include "narrow_float.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>

const struct papTestNarrowFmt papTestNarrowF16 = {"fp16", 0, 16, 5, 10, 15, 1, 0, 0x7fff};
const struct papTestNarrowFmt papTestNarrowBf16 = {"bf16", 1, 16, 8, 7, 127, 1, 0, 0x7fff};
const struct papTestNarrowFmt papTestNarrowE4m3 = {"e4m3", 2, 8, 4, 3, 7, 0, 1, 0x7f};
const struct papTestNarrowFmt papTestNarrowE5m2 = {"e5m2", 3, 8, 5, 2, 15, 1, 1, 0x7f};

uint32_t papTestNarrowMaxCode(const struct papTestNarrowFmt* f) {
  uint32_t signBit = 1u << (f->bits - 1);
  uint32_t emax = (1u << f->expBits) - 1;
  return f->ieee ? (emax << f->manBits) - 1 : signBit - 2;
}

double papTestNarrowDecode(const struct papTestNarrowFmt* f, uint32_t code) {
  uint32_t signBit = 1u << (f->bits - 1);
  int neg = (code & signBit) != 0;
  uint32_t mag = code & (signBit - 1);
  uint32_t e = mag >> f->manBits;
  uint32_t m = mag & ((1u << f->manBits) - 1);
  uint32_t emax = (1u << f->expBits) - 1;
  double v;
  if (f->ieee && e == emax) {
    v = m ? NAN : INFINITY;
  } else if (!f->ieee && mag == signBit - 1) {
    v = NAN;
  } else if (e == 0) {
    v = ldexp((double)m, 1 - f->bias - f->manBits);
  } else {
    v = ldexp((double)((1u << f->manBits) | m), (int)e - f->bias - f->manBits);
  }
  return neg ? -v : v;
}

int papTestNarrowEncodeExact(const struct papTestNarrowFmt* f, double v, uint32_t* out) {
  if (isnan(v) || isinf(v)) return 0;
  uint32_t sign = signbit(v) ? 1u : 0u;
  double a = fabs(v);
  uint32_t e = 0, m = 0;
  uint32_t emax = (1u << f->expBits) - 1u;
  if (a != 0) {
    int ex = 0;
    frexp(a, &ex); /* a = g * 2^ex, g in [0.5, 1) */
    int biased = ex - 1 + f->bias;
    if (biased >= 1) {
      double frac = (ldexp(a, -(ex - 1)) - 1.0) * ldexp(1.0, f->manBits);
      if (frac != floor(frac)) return 0;
      e = (uint32_t)biased;
      m = (uint32_t)frac;
      if (!f->ieee) {
        if (e > emax || (e == emax && m == (1u << f->manBits) - 1u)) return 0;
      } else if (e >= emax) {
        return 0;
      }
    } else {
      double frac = ldexp(a, f->bias - 1 + f->manBits);
      if (frac != floor(frac) || frac >= ldexp(1.0, f->manBits)) return 0;
      m = (uint32_t)frac;
    }
  }
  *out = (sign << (f->expBits + f->manBits)) | (e << f->manBits) | m;
  return 1;
}

/* The value of each positive finite code, ascending (the codes are ordered as their values). */
#define PAP_NARROW_MAX_VALS 32768
static double gVals[4][PAP_NARROW_MAX_VALS];
static pthread_once_t gOnce[4] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                  PTHREAD_ONCE_INIT};

#define PAP_NARROW_INIT(ID, FMT) \
  static void initVals##ID(void) { \
    uint32_t maxCode = papTestNarrowMaxCode(&FMT); \
    for (uint32_t c = 0; c <= maxCode; c++) \
      gVals[ID][c] = papTestNarrowDecode(&FMT, c); \
  }
PAP_NARROW_INIT(0, papTestNarrowF16)
PAP_NARROW_INIT(1, papTestNarrowBf16)
PAP_NARROW_INIT(2, papTestNarrowE4m3)
PAP_NARROW_INIT(3, papTestNarrowE5m2)
static void (*const kInit[4])(void) = {initVals0, initVals1, initVals2, initVals3};

/* First index in vals[0..n) whose value is >= x (n when none). */
static size_t lowerBound(const double* vals, size_t n, double x) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (vals[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

uint32_t papTestNarrowEncode(const struct papTestNarrowFmt* f, double x) {
  if (isnan(x)) return f->canonicalNan;
  pthread_once(&gOnce[f->id], kInit[f->id]);
  const double* vals = gVals[f->id];
  uint32_t signBit = 1u << (f->bits - 1);
  uint32_t maxCode = papTestNarrowMaxCode(f);
  uint32_t infCode = f->ieee ? ((1u << f->expBits) - 1) << f->manBits : 0;
  uint32_t sign = signbit(x) ? signBit : 0;
  double ax = fabs(x);
  double maxv = vals[maxCode];
  uint32_t c;
  if (ax > maxv) {
    if (f->saturate) {
      c = maxCode;
    } else {
      /* As if the exponent range went on: the next value up would be 2^(emax+1), whose code
       * (inf) is even, while maxCode is odd, so the halfway point rounds up. */
      double next = maxv + (maxv - vals[maxCode - 1]);
      c = ax >= (maxv + next) / 2 ? infCode : maxCode;
    }
  } else {
    size_t hi = lowerBound(vals, (size_t)maxCode + 1, ax);
    if (vals[hi] == ax) {
      c = (uint32_t)hi;
    } else {
      size_t lo = hi - 1;
      /* Exact differences (Sterbenz: lo <= ax <= hi <= 2 lo, or lo == 0). */
      double dlo = ax - vals[lo];
      double dhi = vals[hi] - ax;
      if (dlo < dhi)
        c = (uint32_t)lo;
      else if (dhi < dlo)
        c = (uint32_t)hi;
      else
        c = (uint32_t)(lo % 2 == 0 ? lo : hi);
    }
  }
  return c | sign;
}
