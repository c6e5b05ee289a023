// SPDX-License-Identifier: Apache-2.0
// Multi-rank test harness, values: the type table, each rank's inputs (by design per op) and
// the bit-exact reference of every result.
#include <cmath>
#include <cstring>
#include <vector>

#include "common/narrow_float.h"
#include "multirank/harness.h"

namespace papt {

// ---- Types -----------------------------------------------------------------------------------

namespace {

struct TypeInfo {
  const char* name;
  size_t size;
  bool isFloat;
  bool isSigned;
  // sum design: per-rank values in [0, sumMax] (unsigned) or [-sumMax/2, sumMax - sumMax/2]
  int sumMax;
  // avg design for narrow floats: base in [-avgBase, avgBase]
  int avgBase;
};

const TypeInfo kTypes[papcclNumTypes] = {
    /* int8     */ {"int8", 1, false, true, 15, 0},
    /* uint8    */ {"uint8", 1, false, false, 31, 0},
    /* int32    */ {"int32", 4, false, true, 1000, 0},
    /* uint32   */ {"uint32", 4, false, false, 1000, 0},
    /* int64    */ {"int64", 8, false, true, 1000, 0},
    /* uint64   */ {"uint64", 8, false, false, 1000, 0},
    /* float16  */ {"float16", 2, true, true, 255, 200},
    /* float32  */ {"float32", 4, true, true, 1000, 0},
    /* float64  */ {"float64", 8, true, true, 1000, 0},
    /* bfloat16 */ {"bfloat16", 2, true, true, 31, 20},
    /* e4m3     */ {"float8e4m3", 1, true, true, 2, 2},
    /* e5m2     */ {"float8e5m2", 1, true, true, 1, 1},
};

const TypeInfo& Info(papcclDataType_t t) {
  return kTypes[(int)t];
}

// The reference converters of the narrow float types (tests/common/narrow_float.h).
const papTestNarrowFmt* NarrowFmt(papcclDataType_t t) {
  switch (t) {
  case papcclFloat16:
    return &papTestNarrowF16;
  case papcclBfloat16:
    return &papTestNarrowBf16;
  case papcclFloat8e4m3:
    return &papTestNarrowE4m3;
  case papcclFloat8e5m2:
    return &papTestNarrowE5m2;
  default:
    return nullptr;
  }
}

bool IsNarrow(papcclDataType_t t) {
  return NarrowFmt(t) != nullptr;
}

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Distinct (r, i) give distinct hashes for i < 2^32 (Mix is a bijection).
inline uint64_t Hash(uint32_t seed, int r, size_t i) {
  return Mix(((uint64_t)seed * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(uint32_t)r << 32) ^
             (uint64_t)i);
}

// h mapped onto [0, range) without a division (multiply-high).
inline uint64_t Below(uint64_t h, uint64_t range) {
  return (uint64_t)(((unsigned __int128)h * range) >> 64);
}

uint64_t WidthMask(size_t size) {
  return size >= 8 ? ~0ull : ((1ull << (8 * size)) - 1ull);
}

int64_t SignExtend(uint64_t bits, size_t size) {
  if (size >= 8) return (int64_t)bits;
  unsigned shift = (unsigned)(64 - 8 * size);
  return (int64_t)(bits << shift) >> shift;
}

// Input designs.
enum class Design {
  kRandom,
  kSum,
  kProd,
  kAvgNarrow
};

Design DesignOf(const Case& c) {
  if (!CollReduces(c.coll)) return Design::kRandom;
  switch (c.op) {
  case Op::kSum:
  case Op::kPreMulSum:
    return Design::kSum;
  case Op::kProd:
    return Design::kProd;
  case Op::kMax:
  case Op::kMin:
    return Design::kRandom;
  case Op::kAvg:
    return IsNarrow(c.type) ? Design::kAvgNarrow : Design::kSum;
  }
  return Design::kRandom;
}

// Encodings of the integers in [-kSmall, kSmall] for every floating type (the designs and
// most references stay in that range): a table lookup instead of an exact encode per element.
constexpr int64_t kSmall = 8192;
struct SmallTables {
  std::vector<uint64_t> bits[papcclNumTypes];
  std::vector<char> exact[papcclNumTypes];
};

const SmallTables& Small() {
  static const SmallTables* tables = [] {
    auto* st = new SmallTables;
    for (papcclDataType_t t : {papcclFloat16, papcclFloat32, papcclFloat64, papcclBfloat16,
                               papcclFloat8e4m3, papcclFloat8e5m2}) {
      st->bits[(int)t].resize(2 * kSmall + 1);
      st->exact[(int)t].resize(2 * kSmall + 1);
      for (int64_t v = -kSmall; v <= kSmall; v++) {
        uint64_t b = 0;
        st->exact[(int)t][v + kSmall] = EncodeExact(t, (double)v, &b);
        st->bits[(int)t][v + kSmall] = b;
      }
    }
    return st;
  }();
  return *tables;
}

// Encodes an exactly representable value; records a test-design error otherwise.
uint64_t EncodeOrFail(papcclDataType_t t, double v) {
  if (v == std::floor(v) && std::fabs(v) <= (double)kSmall && !(v == 0 && std::signbit(v))) {
    int64_t k = (int64_t)v + kSmall;
    if (Small().exact[(int)t][k]) return Small().bits[(int)t][k];
  } else {
    uint64_t bits = 0;
    if (EncodeExact(t, v, &bits)) return bits;
  }
  ADD_FAILURE() << "test design error: " << v << " is not exact in " << Info(t).name;
  return 0;
}

// Encodes a small exactly representable value (integers go through two's complement).
uint64_t EncodeSmall(papcclDataType_t t, int64_t v) {
  const TypeInfo& ti = Info(t);
  if (!ti.isFloat) return (uint64_t)v & WidthMask(ti.size);
  if (v >= -kSmall && v <= kSmall) {
    const SmallTables& st = Small();
    if (st.exact[(int)t][v + kSmall]) return st.bits[(int)t][v + kSmall];
  }
  return EncodeOrFail(t, (double)v);
}

// Random bits that decode to a finite, non-negative-zero-free value (max/min need a total
// order without NaN and without the +0/-0 tie).
uint64_t RandomOrdered(papcclDataType_t t, uint64_t h) {
  const TypeInfo& ti = Info(t);
  uint64_t mask = WidthMask(ti.size);
  if (!ti.isFloat) return h & mask;
  for (int k = 0;; k++) {
    uint64_t b = Mix(h + (uint64_t)k) & mask;
    double v = DecodeValue(t, b);
    if (std::isnan(v) || std::isinf(v)) continue;
    if (v == 0 && std::signbit(v)) continue;
    return b;
  }
}

}  // namespace

const std::vector<papcclDataType_t> kAllTypes = {
    papcclInt8,    papcclUint8,    papcclInt32,      papcclUint32,
    papcclInt64,   papcclUint64,   papcclFloat16,    papcclFloat32,
    papcclFloat64, papcclBfloat16, papcclFloat8e4m3, papcclFloat8e5m2};
const std::vector<Op> kAllOps = {Op::kSum, Op::kProd, Op::kMax, Op::kMin, Op::kAvg, Op::kPreMulSum};
const std::vector<Coll> kAllColls = {
    Coll::kAllReduce,     Coll::kBroadcast, Coll::kBcast,  Coll::kReduce,  Coll::kAllGather,
    Coll::kReduceScatter, Coll::kAlltoAll,  Coll::kGather, Coll::kScatter, Coll::kSendRecv};

const char* CollName(Coll c) {
  switch (c) {
  case Coll::kAllReduce:
    return "AllReduce";
  case Coll::kBroadcast:
    return "Broadcast";
  case Coll::kBcast:
    return "Bcast";
  case Coll::kReduce:
    return "Reduce";
  case Coll::kAllGather:
    return "AllGather";
  case Coll::kReduceScatter:
    return "ReduceScatter";
  case Coll::kAlltoAll:
    return "AlltoAll";
  case Coll::kGather:
    return "Gather";
  case Coll::kScatter:
    return "Scatter";
  case Coll::kSendRecv:
    return "SendRecv";
  }
  return "?";
}

const char* OpName(Op o) {
  switch (o) {
  case Op::kSum:
    return "sum";
  case Op::kProd:
    return "prod";
  case Op::kMax:
    return "max";
  case Op::kMin:
    return "min";
  case Op::kAvg:
    return "avg";
  case Op::kPreMulSum:
    return "premulsum";
  }
  return "?";
}

const char* TypeName(papcclDataType_t t) {
  if ((int)t < 0 || (int)t >= papcclNumTypes) return "invalid";
  return Info(t).name;
}

size_t TypeSize(papcclDataType_t t) {
  return Info(t).size;
}

bool CollReduces(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter;
}

bool CollHasRoot(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kBcast || c == Coll::kReduce || c == Coll::kGather ||
         c == Coll::kScatter;
}

std::string Case::Describe() const {
  std::ostringstream s;
  s << CollName(coll) << " " << TypeName(type);
  if (CollReduces(coll)) s << " " << OpName(op);
  s << " count=" << count << (inPlace ? " in-place" : " out-of-place");
  if (CollHasRoot(coll)) s << " root=" << root;
  s << " seed=" << seed;
  return s.str();
}

double DecodeValue(papcclDataType_t t, uint64_t bits) {
  const TypeInfo& ti = Info(t);
  if (!ti.isFloat) return ti.isSigned ? (double)SignExtend(bits, ti.size) : (double)bits;
  if (t == papcclFloat32) {
    uint32_t u = (uint32_t)bits;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  if (t == papcclFloat64) {
    double d;
    memcpy(&d, &bits, 8);
    return d;
  }
  // Narrow formats: a table per type, built once.
  using Tables = std::vector<std::vector<double>>;
  static const Tables* tables = [] {
    auto* tb = new Tables(papcclNumTypes);
    for (papcclDataType_t nt :
         {papcclFloat16, papcclBfloat16, papcclFloat8e4m3, papcclFloat8e5m2}) {
      std::vector<double>& v = (*tb)[(int)nt];
      v.resize(size_t(1) << (8 * Info(nt).size));
      for (size_t b = 0; b < v.size(); b++)
        v[b] = papTestNarrowDecode(NarrowFmt(nt), (uint32_t)b);
    }
    return tb;
  }();
  return (*tables)[(int)t][bits & WidthMask(ti.size)];
}

bool EncodeExact(papcclDataType_t t, double v, uint64_t* bits) {
  const TypeInfo& ti = Info(t);
  if (!ti.isFloat) return false;
  if (t == papcclFloat32) {
    float f = (float)v;
    if ((double)f != v && !(std::isnan(v) && std::isnan(f))) return false;
    uint32_t u;
    memcpy(&u, &f, 4);
    *bits = u;
    return true;
  }
  if (t == papcclFloat64) {
    memcpy(bits, &v, 8);
    return true;
  }
  uint32_t code = 0;
  if (!papTestNarrowEncodeExact(NarrowFmt(t), v, &code)) return false;
  *bits = code;
  return true;
}

uint64_t PreMulScalarBits(papcclDataType_t t) {
  return Info(t).isFloat ? EncodeSmall(t, 2) : EncodeSmall(t, 3);
}

uint64_t InputBits(const Case& c, int nranks, int r, size_t i) {
  const TypeInfo& ti = Info(c.type);
  uint64_t h = Hash(c.seed, r, i);
  switch (DesignOf(c)) {
  case Design::kRandom:
    if (!CollReduces(c.coll)) return h & WidthMask(ti.size);  // any bits: a pure copy
    return RandomOrdered(c.type, h);
  case Design::kSum: {
    int64_t m = ti.sumMax;
    int64_t v = (int64_t)Below(h, (uint64_t)(m + 1));
    if (ti.isSigned) v -= m / 2;
    return EncodeSmall(c.type, v);
  }
  case Design::kProd: {
    static const int64_t kSignedSet[] = {1, -1, 2, 3};
    static const int64_t kFloatSet[] = {1, -1, 2};
    static const int64_t kUnsignedSet[] = {1, 2, 3};
    int64_t v;
    if (ti.isFloat)
      v = kFloatSet[Below(h, 3)];
    else if (ti.isSigned)
      v = kSignedSet[Below(h, 4)];
    else
      v = kUnsignedSet[Below(h, 3)];
    return EncodeSmall(c.type, v);
  }
  case Design::kAvgNarrow: {
    // base(i) + d(r), with the d(r) summing to zero over the ranks: the average is base(i)
    // exactly and every partial sum is a small integer.
    int64_t b = ti.avgBase;
    int64_t base = (int64_t)Below(Hash(c.seed, -1, i), (uint64_t)(2 * b + 1)) - b;
    int64_t d = r < 2 * (nranks / 2) ? (r % 2 ? 1 : -1) : 0;
    return EncodeSmall(c.type, base + d);
  }
  }
  return 0;
}

uint64_t ReducedBits(const Case& c, int nranks, size_t idx) {
  const TypeInfo& ti = Info(c.type);
  if (ti.isFloat) {
    double scalar = c.op == Op::kPreMulSum ? DecodeValue(c.type, PreMulScalarBits(c.type)) : 1.0;
    double acc = 0;
    for (int q = 0; q < nranks; q++) {
      double x = DecodeValue(c.type, InputBits(c, nranks, q, idx));
      if (c.op == Op::kPreMulSum) x *= scalar;
      if (q == 0) {
        acc = x;
        continue;
      }
      switch (c.op) {
      case Op::kSum:
      case Op::kAvg:
      case Op::kPreMulSum:
        acc += x;
        break;
      case Op::kProd:
        acc *= x;
        break;
      case Op::kMax:
        acc = std::max(acc, x);
        break;
      case Op::kMin:
        acc = std::min(acc, x);
        break;
      }
    }
    if (c.op == Op::kAvg) {
      // The sum is exact; the library divides it once in the type.
      if (c.type == papcclFloat32)
        acc = (double)((float)acc / (float)nranks);
      else
        acc = acc / nranks;
    }
    if (c.type == papcclFloat32 || c.type == papcclFloat64) {
      uint64_t bits = 0;
      EncodeExact(c.type, acc, &bits);  // acc is a float or double value by construction
      return bits;
    }
    return EncodeOrFail(c.type, acc);
  }
  uint64_t mask = WidthMask(ti.size);
  if (c.op == Op::kAvg) {
    int64_t s = 0;
    uint64_t us = 0;
    for (int q = 0; q < nranks; q++) {
      uint64_t b = InputBits(c, nranks, q, idx);
      s += SignExtend(b, ti.size);
      us += b;
    }
    if (ti.isSigned) return (uint64_t)(s / nranks) & mask;
    return (us / (uint64_t)nranks) & mask;
  }
  uint64_t scalar = PreMulScalarBits(c.type);
  uint64_t acc = 0;
  for (int q = 0; q < nranks; q++) {
    uint64_t x = InputBits(c, nranks, q, idx);
    if (c.op == Op::kPreMulSum) x = (x * scalar) & mask;
    if (q == 0) {
      acc = x;
      continue;
    }
    switch (c.op) {
    case Op::kSum:
    case Op::kPreMulSum:
    case Op::kAvg:
      acc = (acc + x) & mask;
      break;
    case Op::kProd:
      acc = (acc * x) & mask;
      break;
    case Op::kMax:
      if (ti.isSigned)
        acc = SignExtend(x, ti.size) > SignExtend(acc, ti.size) ? x : acc;
      else
        acc = x > acc ? x : acc;
      break;
    case Op::kMin:
      if (ti.isSigned)
        acc = SignExtend(x, ti.size) < SignExtend(acc, ti.size) ? x : acc;
      else
        acc = x < acc ? x : acc;
      break;
    }
  }
  return acc & mask;
}

bool AvgIsApproximate(const Case& c, int nranks) {
  return CollReduces(c.coll) && c.op == Op::kAvg && Info(c.type).isFloat &&
         (nranks & (nranks - 1)) != 0;
}

bool CheckAvgApprox(const void* buf, const Case& c, int nranks, size_t firstIdx, size_t count,
                    const std::string& what) {
  const TypeInfo& ti = Info(c.type);
  // Unit roundoff 2^-p and the smallest subnormal of each floating type.
  double u, tiny;
  switch (c.type) {
  case papcclFloat16:
    u = std::ldexp(1.0, -11);
    tiny = std::ldexp(1.0, -24);
    break;
  case papcclBfloat16:
    u = std::ldexp(1.0, -8);
    tiny = std::ldexp(1.0, -133);
    break;
  case papcclFloat8e4m3:
    u = std::ldexp(1.0, -4);
    tiny = std::ldexp(1.0, -9);
    break;
  case papcclFloat8e5m2:
    u = std::ldexp(1.0, -3);
    tiny = std::ldexp(1.0, -16);
    break;
  case papcclFloat32:
    u = std::ldexp(1.0, -24);
    tiny = std::ldexp(1.0, -149);
    break;
  default:
    u = std::ldexp(1.0, -53);
    tiny = 0;
    break;
  }
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    double sum = 0, sumAbs = 0;
    for (int q = 0; q < nranks; q++) {
      double x = DecodeValue(c.type, InputBits(c, nranks, q, firstIdx + i));
      sum += x;
      sumAbs += std::fabs(x);
    }
    const double exact = sum / nranks;
    // sum(x_q * fl(1/n)) or fl(sum(x_q)) / n, summed in any order: the rounding of 1/n, of
    // each product and of each of the n-1 additions, each at most u relative to sum|x|/n.
    const double bound = (nranks + 2) * u * (sumAbs / nranks) + nranks * tiny;
    const double got = DecodeValue(c.type, GetElem(buf, c.type, i));
    if (std::fabs(got - exact) <= bound) continue;
    if (bad < 3) {
      char msg[200];
      snprintf(msg, sizeof(msg), "element %zu: average %.9g, got %.9g (0x%llx), allowed error %.3g",
               i, exact, got, (unsigned long long)GetElem(buf, c.type, i), bound);
      ADD_FAILURE() << what << ": " << msg << " [" << ti.name << " avg over " << nranks
                    << " ranks is rounded: compared within the bound]";
    }
    bad++;
  }
  if (bad > 3) ADD_FAILURE() << what << ": " << bad << " of " << count << " elements wrong";
  return bad == 0;
}

}  // namespace papt
