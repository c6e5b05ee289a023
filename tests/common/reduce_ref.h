// SPDX-License-Identifier: Apache-2.0
// Independent references of the element-wise reductions (sum, prod, max, min, and the avg
// division) for every datatype, on raw bit patterns: integers in 128-bit arithmetic, floats in
// double rounded once to the type (the narrow formats with tests/common/narrow_float.h), so
// they share nothing with the library's functors (kernels/reduce_ops.h). Used by the unit
// suite (the host loops) and the GPU suites (the kernels, on a GPU and on the stand-in).
#ifndef PAPCCL_TESTS_COMMON_REDUCE_REF_H_
#define PAPCCL_TESTS_COMMON_REDUCE_REF_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "narrow_float.h"
#include "tests/internal/shim_kernels.h"

namespace papkref {

// ---- Reference model of the narrow formats ---------------------------------------------------
// tests/common/narrow_float.h: built from the format parameters alone (ldexp and a sorted table
// of every finite value), not from bit tricks, so that it shares nothing with the library's
// converters.

using NarrowFmt = papTestNarrowFmt;

class RefCodec {
 public:
  explicit RefCodec(const NarrowFmt& f)
      : f_(f), signBit_(1u << (f.bits - 1)), maxCode_(papTestNarrowMaxCode(&f)) {}

  uint32_t codes() const {
    return 1u << f_.bits;
  }
  uint32_t signBit() const {
    return signBit_;
  }
  uint32_t maxCode() const {
    return maxCode_;
  }
  const NarrowFmt& fmt() const {
    return f_;
  }

  bool IsNan(uint32_t code) const {
    return std::isnan(Decode(code));
  }

  double Decode(uint32_t code) const {
    return papTestNarrowDecode(&f_, code);
  }

  // Round x to nearest, ties to the even code; NaN gives the canonical NaN.
  uint32_t Encode(double x) const {
    return papTestNarrowEncode(&f_, x);
  }

 private:
  const NarrowFmt& f_;
  uint32_t signBit_;
  uint32_t maxCode_;
};

// The codec of a narrow datatype; nullptr for the others.
inline const RefCodec* CodecFor(int dt) {
  static const RefCodec f16(papTestNarrowF16), bf16(papTestNarrowBf16), e4m3(papTestNarrowE4m3),
      e5m2(papTestNarrowE5m2);
  switch (dt) {
  case PAP_TEST_KERN_FLOAT16:
    return &f16;
  case PAP_TEST_KERN_BFLOAT16:
    return &bf16;
  case PAP_TEST_KERN_E4M3:
    return &e4m3;
  case PAP_TEST_KERN_E5M2:
    return &e5m2;
  default:
    return nullptr;
  }
}

// ---- Datatypes ---------------------------------------------------------------------------------

enum class Kind {
  kSigned,
  kUnsigned,
  kFloat32,
  kFloat64,
  kNarrow
};

struct TypeInfo {
  int dt;
  const char* name;
  size_t size;
  Kind kind;
};

inline const TypeInfo kTypes[PAP_TEST_KERN_NUM_TYPES] = {
    {PAP_TEST_KERN_INT8, "int8", 1, Kind::kSigned},
    {PAP_TEST_KERN_UINT8, "uint8", 1, Kind::kUnsigned},
    {PAP_TEST_KERN_INT32, "int32", 4, Kind::kSigned},
    {PAP_TEST_KERN_UINT32, "uint32", 4, Kind::kUnsigned},
    {PAP_TEST_KERN_INT64, "int64", 8, Kind::kSigned},
    {PAP_TEST_KERN_UINT64, "uint64", 8, Kind::kUnsigned},
    {PAP_TEST_KERN_FLOAT16, "fp16", 2, Kind::kNarrow},
    {PAP_TEST_KERN_FLOAT32, "fp32", 4, Kind::kFloat32},
    {PAP_TEST_KERN_FLOAT64, "fp64", 8, Kind::kFloat64},
    {PAP_TEST_KERN_BFLOAT16, "bf16", 2, Kind::kNarrow},
    {PAP_TEST_KERN_E4M3, "e4m3", 1, Kind::kNarrow},
    {PAP_TEST_KERN_E5M2, "e5m2", 1, Kind::kNarrow},
};

inline const TypeInfo& Info(int dt) {
  return kTypes[dt];
}

// Raw element access: every element is at most 8 bytes, handled as its bit pattern.
inline uint64_t GetBits(const void* buf, size_t i, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, static_cast<const char*>(buf) + i * size, size);  // little endian
  return v;
}

inline void SetBits(void* buf, size_t i, size_t size, uint64_t v) {
  std::memcpy(static_cast<char*>(buf) + i * size, &v, size);
}

inline int64_t SignExtend(uint64_t bits, size_t size) {
  if (size == 8) return static_cast<int64_t>(bits);
  unsigned shift = static_cast<unsigned>(64 - 8 * size);
  return static_cast<int64_t>(bits << shift) >> shift;
}

inline uint64_t Truncate(unsigned __int128 v, size_t size) {
  uint64_t low = static_cast<uint64_t>(v);
  return size == 8 ? low : (low & ((uint64_t{1} << (8 * size)) - 1));
}

// Bit casts between a float or double and its bit pattern in the low bytes (little endian).
template <typename T>
T FromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}
template <typename T>
uint64_t BitsOf(T v) {
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(v));
  return u;
}
inline float F32(uint64_t bits) {
  return FromBits<float>(bits);
}
inline double F64(uint64_t bits) {
  return FromBits<double>(bits);
}

// fmax/fmin semantics: a NaN operand is ignored; NaN only when both are.
inline double RefMaxMin(double a, double b, int op) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return op == PAP_TEST_KERN_MAX ? std::max(a, b) : std::min(a, b);
}

// What one element of a result must be. `exact` compares bit patterns; otherwise `nan` says
// the result must be a NaN (narrow types: the canonical one), and `anyZeroSign` accepts +0 and
// -0 for a zero result (max/min of +0 and -0 may return either).
struct Expect {
  uint64_t bits;
  bool nan;
  bool anyZeroSign;
};

inline Expect RefReduce(int dt, int op, uint64_t a, uint64_t b) {
  const TypeInfo& t = Info(dt);
  switch (t.kind) {
  case Kind::kSigned: {
    __int128 x = SignExtend(a, t.size);
    __int128 y = SignExtend(b, t.size);
    __int128 r = op == PAP_TEST_KERN_SUM    ? x + y
                 : op == PAP_TEST_KERN_PROD ? x * y
                 : op == PAP_TEST_KERN_MAX  ? std::max(x, y)
                                            : std::min(x, y);
    return {Truncate(static_cast<unsigned __int128>(r), t.size), false, false};
  }
  case Kind::kUnsigned: {
    unsigned __int128 x = a;
    unsigned __int128 y = b;
    unsigned __int128 r = op == PAP_TEST_KERN_SUM    ? x + y
                          : op == PAP_TEST_KERN_PROD ? x * y
                          : op == PAP_TEST_KERN_MAX  ? std::max(x, y)
                                                     : std::min(x, y);
    return {Truncate(r, t.size), false, false};
  }
  case Kind::kFloat32: {
    // Sum and product in double, rounded once to float: the correctly rounded float result
    // (double holds the exact product, and 53 >= 2*24+2 makes the sum's double rounding
    // harmless).
    double x = F32(a);
    double y = F32(b);
    if (op == PAP_TEST_KERN_SUM || op == PAP_TEST_KERN_PROD) {
      float r = static_cast<float>(op == PAP_TEST_KERN_SUM ? x + y : x * y);
      return {BitsOf(r), std::isnan(r), false};
    }
    double r = RefMaxMin(x, y, op);
    return {BitsOf(static_cast<float>(r)), std::isnan(r), r == 0};
  }
  case Kind::kFloat64: {
    double x = F64(a);
    double y = F64(b);
    double r = op == PAP_TEST_KERN_SUM    ? x + y
               : op == PAP_TEST_KERN_PROD ? x * y
                                          : RefMaxMin(x, y, op);
    bool minmax = op == PAP_TEST_KERN_MAX || op == PAP_TEST_KERN_MIN;
    return {BitsOf(r), std::isnan(r), minmax && r == 0};
  }
  case Kind::kNarrow: {
    // Both operands and their exact sum/product fit a double (or round once there, harmlessly:
    // 53 >= 2p+2); the reference then rounds once to the format.
    const RefCodec& c = *CodecFor(dt);
    double x = c.Decode(static_cast<uint32_t>(a));
    double y = c.Decode(static_cast<uint32_t>(b));
    double r = op == PAP_TEST_KERN_SUM    ? x + y
               : op == PAP_TEST_KERN_PROD ? x * y
                                          : RefMaxMin(x, y, op);
    bool minmax = op == PAP_TEST_KERN_MAX || op == PAP_TEST_KERN_MIN;
    return {c.Encode(r), std::isnan(r), minmax && r == 0};
  }
  }
  return {0, false, false};
}

inline Expect RefScale(int dt, uint64_t a, uint64_t scalar) {
  return RefReduce(dt, PAP_TEST_KERN_PROD, a, scalar);
}

inline Expect RefDivide(int dt, uint64_t a, int n) {
  const TypeInfo& t = Info(dt);
  switch (t.kind) {
  case Kind::kSigned: {
    // Truncation toward zero, spelled out: |a| / n with the sign of a.
    int64_t x = SignExtend(a, t.size);
    unsigned __int128 mag = x < 0 ? static_cast<unsigned __int128>(-static_cast<__int128>(x))
                                  : static_cast<unsigned __int128>(x);
    __int128 q = static_cast<__int128>(mag / static_cast<unsigned>(n));
    if (x < 0) q = -q;
    return {Truncate(static_cast<unsigned __int128>(q), t.size), false, false};
  }
  case Kind::kUnsigned:
    return {a / static_cast<uint64_t>(n), false, false};
  case Kind::kFloat32: {
    float r = static_cast<float>(static_cast<double>(F32(a)) / n);
    return {BitsOf(r), std::isnan(r), false};
  }
  case Kind::kFloat64: {
    double r = F64(a) / n;
    return {BitsOf(r), std::isnan(r), false};
  }
  case Kind::kNarrow: {
    const RefCodec& c = *CodecFor(dt);
    double r = c.Decode(static_cast<uint32_t>(a)) / n;
    return {c.Encode(r), std::isnan(r), false};
  }
  }
  return {0, false, false};
}

inline bool ResultIsNan(int dt, uint64_t bits) {
  switch (Info(dt).kind) {
  case Kind::kFloat32:
    return std::isnan(F32(bits));
  case Kind::kFloat64:
    return std::isnan(F64(bits));
  case Kind::kNarrow:
    return CodecFor(dt)->IsNan(static_cast<uint32_t>(bits));
  default:
    return false;
  }
}

inline bool ResultIsZero(int dt, uint64_t bits) {
  switch (Info(dt).kind) {
  case Kind::kFloat32:
    return F32(bits) == 0;
  case Kind::kFloat64:
    return F64(bits) == 0;
  case Kind::kNarrow:
    return CodecFor(dt)->Decode(static_cast<uint32_t>(bits)) == 0;
  default:
    return bits == 0;
  }
}

inline bool Matches(int dt, const Expect& e, uint64_t got) {
  if (e.nan) {
    // Narrow types store the canonical NaN; fp32/fp64 keep whatever NaN the FPU made.
    if (Info(dt).kind == Kind::kNarrow) return got == CodecFor(dt)->fmt().canonicalNan;
    return ResultIsNan(dt, got);
  }
  if (e.anyZeroSign && ResultIsZero(dt, e.bits)) return ResultIsZero(dt, got);
  return got == e.bits;
}

}  // namespace papkref

#endif  // PAPCCL_TESTS_COMMON_REDUCE_REF_H_
