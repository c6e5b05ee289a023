/* SPDX-License-Identifier: Apache-2.0 */
/* Reference converters of the narrow float formats (fp16, bf16, fp8 e4m3 and e5m2) for the
 * tests and the perf checks: built from the format parameters alone (ldexp and a sorted
 * table of every finite value), not from bit tricks, so that they share nothing with the
 * library's converters. C11, callable from C++. */
#ifndef PAPCCL_TESTS_COMMON_NARROW_FLOAT_H_
#define PAPCCL_TESTS_COMMON_NARROW_FLOAT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct papTestNarrowFmt {
  const char* name;
  int id; /* index of the format's table (0..3) */
  int bits; /* 16 or 8 */
  int expBits;
  int manBits;
  int bias;
  int ieee; /* all-ones exponent = inf (mantissa 0) / NaN; otherwise only S.1..1 is NaN */
  int saturate; /* overflow (inf included) gives the largest finite value */
  uint32_t canonicalNan;
};

extern const struct papTestNarrowFmt papTestNarrowF16;
extern const struct papTestNarrowFmt papTestNarrowBf16;
extern const struct papTestNarrowFmt papTestNarrowE4m3;
extern const struct papTestNarrowFmt papTestNarrowE5m2;

/* The value of code (its sign bit included): a NaN, an infinity or a finite value. */
double papTestNarrowDecode(const struct papTestNarrowFmt* f, uint32_t code);

/* The code of v when v is exactly a finite value of the format (-0 keeps its sign): returns
 * 1 and sets *out; 0 when it is not (NaN, infinity, out of range or between two values). */
int papTestNarrowEncodeExact(const struct papTestNarrowFmt* f, double v, uint32_t* out);

/* v rounded to nearest, ties to the even code; NaN gives the canonical NaN; overflow gives
 * the largest finite value (saturating formats) or infinity where the rounding says so.
 * Thread-safe (the format's table is built once, on first use). */
uint32_t papTestNarrowEncode(const struct papTestNarrowFmt* f, double v);

/* The largest finite positive code. */
uint32_t papTestNarrowMaxCode(const struct papTestNarrowFmt* f);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PAPCCL_TESTS_COMMON_NARROW_FLOAT_H_ */
