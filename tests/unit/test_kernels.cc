// SPDX-License-Identifier: Apache-2.0
// Host reduction kernels: every datatype x op against references computed here, narrow-float
// converters exhaustively, saturation and NaN rules, scale and avg division, aliasing, odd
// counts and unaligned pointers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/narrow_float.h"
#include "common/reduce_ref.h"
#include "common/warn_capture.h"
#include "sanitizer.h"
#include "tests/internal/shim_kernels.h"

namespace {

constexpr int kNumTypes = PAP_TEST_KERN_NUM_TYPES;
constexpr int kNumOps = 4;
const char* const kOpNames[kNumOps] = {"sum", "prod", "max", "min"};

// The references (tests/common/reduce_ref.h).
using namespace papkref;  // NOLINT(build/namespaces)

// Library converters behind one signature per format.
float LibDecode(int dt, uint32_t code) {
  switch (dt) {
  case PAP_TEST_KERN_FLOAT16:
    return papTestKernHalfToFloat(static_cast<uint16_t>(code));
  case PAP_TEST_KERN_BFLOAT16:
    return papTestKernBf16ToFloat(static_cast<uint16_t>(code));
  case PAP_TEST_KERN_E4M3:
    return papTestKernE4m3ToFloat(static_cast<uint8_t>(code));
  default:
    return papTestKernE5m2ToFloat(static_cast<uint8_t>(code));
  }
}

uint32_t LibEncode(int dt, float f) {
  switch (dt) {
  case PAP_TEST_KERN_FLOAT16:
    return papTestKernFloatToHalf(f);
  case PAP_TEST_KERN_BFLOAT16:
    return papTestKernFloatToBf16(f);
  case PAP_TEST_KERN_E4M3:
    return papTestKernFloatToE4m3(f);
  default:
    return papTestKernFloatToE5m2(f);
  }
}

const int kNarrowTypes[] = {PAP_TEST_KERN_FLOAT16, PAP_TEST_KERN_BFLOAT16, PAP_TEST_KERN_E4M3,
                            PAP_TEST_KERN_E5M2};

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
  return buf;
}

// ---- Test data ---------------------------------------------------------------------------------

// Random elements: raw bit patterns (every NaN, inf, subnormal and extreme included), with every
// fourth float a moderate value so sums and products are not all overflow or NaN.
void FillRandom(int dt, void* buf, size_t count, std::mt19937_64& rng) {
  const TypeInfo& t = Info(dt);
  std::uniform_real_distribution<double> moderate(-100.0, 100.0);
  for (size_t i = 0; i < count; i++) {
    uint64_t bits = rng();
    if (i % 4 == 3) {
      if (t.kind == Kind::kFloat32) bits = BitsOf(static_cast<float>(moderate(rng)));
      if (t.kind == Kind::kFloat64) bits = BitsOf(moderate(rng));
      if (t.kind == Kind::kNarrow) {
        float v = static_cast<float>(moderate(rng) / (dt == PAP_TEST_KERN_E4M3 ? 8 : 1));
        bits = LibEncode(dt, v);
      }
    }
    SetBits(buf, i, t.size, bits);
  }
}

// ---- Warnings ----------------------------------------------------------------------------------

// Records every WARN while a test runs; tests that expect none check that none came.
class KernelTest : public papt::WarnTest {
 protected:
  void SetUp() override {
#if PAPT_TSAN
    // Single-threaded arithmetic over millions of elements: nothing for ThreadSanitizer to
    // check, and four minutes of its instrumented loads and stores. The other builds run it.
    GTEST_SKIP() << "host reduction kernels are single-threaded: not run under ThreadSanitizer";
#endif
    papt::WarnTest::SetUp();
  }
  void TearDown() override {
    const std::vector<std::string> warns = Take();
    EXPECT_EQ(warns.size(), expectedWarns_) << (warns.empty() ? "" : warns.back());
    papt::WarnTest::TearDown();
  }
  size_t expectedWarns_ = 0;
};

// ---- Layouts -----------------------------------------------------------------------------------

enum class Layout {
  kSeparate,
  kDstIsA,
  kDstIsB,
  kDstIsAB,
  kElemOffset,
  kByteOffset
};
const char* LayoutName(Layout l) {
  switch (l) {
  case Layout::kSeparate:
    return "separate";
  case Layout::kDstIsA:
    return "dst==a";
  case Layout::kDstIsB:
    return "dst==b";
  case Layout::kDstIsAB:
    return "dst==a==b";
  case Layout::kElemOffset:
    return "offset by one element";
  default:
    return "offset by one byte";
  }
}

constexpr size_t kGuard = 64;  // bytes of sentinel on each side of every buffer
constexpr unsigned char kSentinel = 0xa5;

// A buffer of count elements at byte offset `shift` from a 64-byte-aligned base, with sentinel
// bytes before and after.
class GuardedBuf {
 public:
  GuardedBuf(size_t bytes, size_t shift)
      : bytes_(bytes), raw_(bytes + 2 * kGuard + 64 + shift, kSentinel) {
    uintptr_t base = reinterpret_cast<uintptr_t>(raw_.data()) + kGuard;
    base = (base + 63) & ~uintptr_t{63};
    data_ = reinterpret_cast<unsigned char*>(base) + shift;
  }
  void* data() {
    return data_;
  }
  // The sentinel is intact outside [data, data + bytes).
  bool GuardsIntact() const {
    const unsigned char* begin = raw_.data();
    const unsigned char* end = raw_.data() + raw_.size();
    for (const unsigned char* p = begin; p < data_; p++)
      if (*p != kSentinel) return false;
    for (const unsigned char* p = data_ + bytes_; p < end; p++)
      if (*p != kSentinel) return false;
    return true;
  }

 private:
  size_t bytes_;
  std::vector<unsigned char> raw_;
  unsigned char* data_;
};

// Runs dst = a OP b for one layout and checks every element and the guards. Returns the number
// of mismatches (reporting the first few).
size_t RunReduceCase(int dt, int op, size_t count, Layout layout, uint64_t seed) {
  const TypeInfo& t = Info(dt);
  size_t bytes = count * t.size;
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> a(bytes + 1);
  std::vector<unsigned char> b(bytes + 1);
  FillRandom(dt, a.data(), count, rng);
  FillRandom(dt, b.data(), count, rng);
  if (layout == Layout::kDstIsAB) b = a;

  size_t shift = layout == Layout::kElemOffset ? t.size : layout == Layout::kByteOffset ? 1 : 0;
  GuardedBuf bufA(bytes, shift);
  GuardedBuf bufB(bytes, shift == 1 ? 3 : shift);  // misaligned differently from a
  GuardedBuf bufD(bytes, shift);
  if (bytes) {
    std::memcpy(bufA.data(), a.data(), bytes);
    std::memcpy(bufB.data(), b.data(), bytes);
  }
  void* pa = bufA.data();
  void* pb = bufB.data();
  void* pd = bufD.data();
  switch (layout) {
  case Layout::kDstIsA:
    pd = pa;
    break;
  case Layout::kDstIsB:
    pd = pb;
    break;
  case Layout::kDstIsAB:
    pd = pa;
    pb = pa;
    break;
  default:
    break;
  }
  papTestKernReduce(pd, pa, pb, count, dt, op);

  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    uint64_t x = GetBits(a.data(), i, t.size);
    uint64_t y = GetBits(b.data(), i, t.size);
    Expect e = RefReduce(dt, op, x, y);
    uint64_t got = GetBits(pd, i, t.size);
    if (!Matches(dt, e, got)) {
      if (bad < 5) {
        ADD_FAILURE() << t.name << " " << kOpNames[op] << " " << LayoutName(layout) << " count "
                      << count << " element " << i << ": " << Hex(x) << " op " << Hex(y) << " gave "
                      << Hex(got) << ", expected " << Hex(e.bits) << (e.nan ? " (NaN)" : "");
      }
      bad++;
    }
  }
  EXPECT_TRUE(bufA.GuardsIntact() && bufB.GuardsIntact() && bufD.GuardsIntact())
      << t.name << " " << kOpNames[op] << " " << LayoutName(layout) << " count " << count
      << ": wrote outside the buffer";
  return bad;
}

// ---- Lists and sizes -----------------------------------------------------------------------------

TEST_F(KernelTest, ListsCoverEveryTypeAndOp) {
  int types[32];
  int n = papTestKernListedTypes(types, 32);
  ASSERT_EQ(n, PAP_TEST_KERN_NUM_TYPES);
  std::vector<int> sorted(types, types + n);
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < n; i++)
    EXPECT_EQ(sorted[i], i);
  int ops[8];
  ASSERT_EQ(papTestKernListedOps(ops, 8), kNumOps);
  for (int i = 0; i < kNumOps; i++)
    EXPECT_EQ(ops[i], i);
}

TEST_F(KernelTest, TypeSizes) {
  for (const TypeInfo& t : kTypes)
    EXPECT_EQ(papTestKernTypeSize(t.dt), t.size) << t.name;
  EXPECT_EQ(papTestKernTypeSize(-1), 0u);
  EXPECT_EQ(papTestKernTypeSize(PAP_TEST_KERN_NUM_TYPES), 0u);
  EXPECT_EQ(papTestKernTypeSize(1000), 0u);
}

// ---- Converters ----------------------------------------------------------------------------------

TEST_F(KernelTest, DecodeExhaustive) {
  for (int dt : kNarrowTypes) {
    const RefCodec& c = *CodecFor(dt);
    size_t bad = 0;
    for (uint32_t code = 0; code < c.codes(); code++) {
      double want = c.Decode(code);
      float got = LibDecode(dt, code);
      bool ok = std::isnan(want)
                    ? std::isnan(got)
                    : (static_cast<double>(got) == want && std::signbit(got) == std::signbit(want));
      if (!ok && bad++ < 5)
        ADD_FAILURE() << c.fmt().name << " decode " << Hex(code) << " gave " << got << ", expected "
                      << want;
    }
    EXPECT_EQ(bad, 0u) << c.fmt().name;
  }
}

TEST_F(KernelTest, RoundTripExhaustive) {
  for (int dt : kNarrowTypes) {
    const RefCodec& c = *CodecFor(dt);
    size_t bad = 0;
    for (uint32_t code = 0; code < c.codes(); code++) {
      uint32_t want = code;
      double v = c.Decode(code);
      if (std::isnan(v)) want = c.fmt().canonicalNan;
      // e5m2 inf saturates on the way back, as NVIDIA's __NV_SATFINITE conversion does.
      if (std::isinf(v) && c.fmt().saturate) want = c.maxCode() | (code & c.signBit());
      uint32_t got = LibEncode(dt, LibDecode(dt, code));
      if (got != want && bad++ < 5)
        ADD_FAILURE() << c.fmt().name << " round trip of " << Hex(code) << " gave " << Hex(got)
                      << ", expected " << Hex(want);
    }
    EXPECT_EQ(bad, 0u) << c.fmt().name;
  }
}

// Every rounding decision: each representable value, each midpoint between neighbours and the
// floats just either side of it, both signs, plus random float bit patterns.
TEST_F(KernelTest, EncodeMatchesReference) {
  std::mt19937_64 rng(12345);
  for (int dt : kNarrowTypes) {
    const RefCodec& c = *CodecFor(dt);
    std::vector<float> probes;
    for (uint32_t code = 0; code <= c.maxCode(); code++) {
      double lo = c.Decode(code);
      // Above the largest finite value the next step is the one the format would have.
      double hi = code < c.maxCode() ? c.Decode(code + 1) : lo + (lo - c.Decode(code - 1));
      probes.push_back(static_cast<float>(lo));
      probes.push_back(-static_cast<float>(lo));
      if ((lo + hi) / 2 > std::numeric_limits<float>::max()) continue;  // bf16's top: no float
      float mid = static_cast<float>((lo + hi) / 2);  // exact: at most p+1 bits
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      for (float f : {mid, std::nextafter(mid, 0.0f),
                      std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
        probes.push_back(f);
        probes.push_back(-f);
      }
    }
    for (int i = 0; i < 1000000; i++) {
      uint32_t u = static_cast<uint32_t>(rng());
      float f;
      std::memcpy(&f, &u, 4);
      probes.push_back(f);
    }
    for (float f : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::denorm_min(), 0.0f}) {
      probes.push_back(f);
      probes.push_back(-f);
    }
    size_t bad = 0;
    for (float f : probes) {
      uint32_t want = c.Encode(f);
      uint32_t got = LibEncode(dt, f);
      if (got != want && bad++ < 5)
        ADD_FAILURE() << c.fmt().name << " encode of " << f << " (" << Hex(BitsOf(f)) << ") gave "
                      << Hex(got) << ", expected " << Hex(want);
    }
    EXPECT_EQ(bad, 0u) << c.fmt().name;
  }
}

// The same facts written out by hand, so a shared mistake in the reference model cannot hide.
TEST_F(KernelTest, EncodeKnownValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // fp16: 65504 is the largest finite; 65520 is the tie with 2^16 and goes to inf.
  EXPECT_EQ(papTestKernFloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(papTestKernFloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(papTestKernFloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(papTestKernFloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(papTestKernFloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(papTestKernFloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(papTestKernFloatToHalf(-inf), 0xfc00);
  EXPECT_EQ(papTestKernFloatToHalf(nan), 0x7fff);
  EXPECT_EQ(papTestKernFloatToHalf(-nan), 0x7fff);
  EXPECT_EQ(papTestKernFloatToHalf(5.9604644775390625e-8f), 0x0001);  // 2^-24
  EXPECT_EQ(papTestKernFloatToHalf(2.98023223876953125e-8f), 0x0000);  // 2^-25: tie to even 0
  EXPECT_EQ(papTestKernFloatToHalf(8.94069671630859375e-8f), 0x0002);  // 1.5 * 2^-24: tie to 2
  EXPECT_EQ(papTestKernFloatToHalf(-1e-10f), 0x8000);
  EXPECT_EQ(papTestKernFloatToHalf(1.0009765625f), 0x3c01);  // 1 + 2^-10
  EXPECT_EQ(papTestKernFloatToHalf(1.00048828125f), 0x3c00);  // 1 + 2^-11: tie to even
  EXPECT_EQ(papTestKernFloatToHalf(1.00146484375f), 0x3c02);  // 1 + 3*2^-11: tie to even
  EXPECT_EQ(papTestKernFloatToHalf(6.097555160522461e-05f), 0x03ff);  // largest subnormal
  EXPECT_EQ(papTestKernHalfToFloat(0x0001), 5.9604644775390625e-8f);
  EXPECT_EQ(papTestKernHalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(papTestKernHalfToFloat(0xfc00), -inf);
  // bf16
  EXPECT_EQ(papTestKernFloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(papTestKernFloatToBf16(1.00390625f), 0x3f80);  // 1 + 2^-8: tie to even
  EXPECT_EQ(papTestKernFloatToBf16(1.01171875f), 0x3f82);  // 1 + 3*2^-8: tie to even
  EXPECT_EQ(papTestKernFloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(papTestKernFloatToBf16(-inf), 0xff80);
  EXPECT_EQ(papTestKernFloatToBf16(nan), 0x7fff);
  EXPECT_EQ(papTestKernBf16ToFloat(0x0001), std::ldexp(1.0f, -133));
  // e4m3: largest finite 448 (0x7e); saturation for anything larger, inf included.
  EXPECT_EQ(papTestKernFloatToE4m3(1.0f), 0x38);
  EXPECT_EQ(papTestKernFloatToE4m3(448.0f), 0x7e);
  EXPECT_EQ(papTestKernFloatToE4m3(464.0f), 0x7e);
  EXPECT_EQ(papTestKernFloatToE4m3(1e9f), 0x7e);
  EXPECT_EQ(papTestKernFloatToE4m3(inf), 0x7e);
  EXPECT_EQ(papTestKernFloatToE4m3(-inf), 0xfe);
  EXPECT_EQ(papTestKernFloatToE4m3(nan), 0x7f);
  EXPECT_EQ(papTestKernFloatToE4m3(0.001953125f), 0x01);  // 2^-9, smallest subnormal
  EXPECT_EQ(papTestKernFloatToE4m3(0.0009765625f), 0x00);  // 2^-10: tie to even 0
  EXPECT_EQ(papTestKernFloatToE4m3(0.0029296875f), 0x02);  // 1.5 * 2^-9: tie to 2
  EXPECT_EQ(papTestKernFloatToE4m3(1.0625f), 0x38);  // 1 + 2^-4: tie to even
  EXPECT_EQ(papTestKernFloatToE4m3(1.1875f), 0x3a);  // 1 + 3*2^-4: tie to even
  EXPECT_EQ(papTestKernE4m3ToFloat(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(papTestKernE4m3ToFloat(0xff)));
  EXPECT_EQ(papTestKernE4m3ToFloat(0x78), 256.0f);  // S.1111.000 is finite in e4m3
  // e5m2: largest finite 57344 (0x7b); saturation, inf included.
  EXPECT_EQ(papTestKernFloatToE5m2(1.0f), 0x3c);
  EXPECT_EQ(papTestKernFloatToE5m2(57344.0f), 0x7b);
  EXPECT_EQ(papTestKernFloatToE5m2(61440.0f), 0x7b);
  EXPECT_EQ(papTestKernFloatToE5m2(1e9f), 0x7b);
  EXPECT_EQ(papTestKernFloatToE5m2(inf), 0x7b);
  EXPECT_EQ(papTestKernFloatToE5m2(-inf), 0xfb);
  EXPECT_EQ(papTestKernFloatToE5m2(nan), 0x7f);
  EXPECT_EQ(papTestKernFloatToE5m2(1.125f), 0x3c);  // 1 + 2^-3: tie to even
  EXPECT_EQ(papTestKernFloatToE5m2(1.375f), 0x3e);  // 1 + 3*2^-3: tie to even
  EXPECT_EQ(papTestKernE5m2ToFloat(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(papTestKernE5m2ToFloat(0x7c), inf);
  EXPECT_TRUE(std::isnan(papTestKernE5m2ToFloat(0x7d)));
}

// ---- Reductions: every type x op against the reference ---------------------------------------

class ReduceTest : public KernelTest, public ::testing::WithParamInterface<std::tuple<int, int>> {};

TEST_P(ReduceTest, MatchesReferenceInEveryLayout) {
  int dt = std::get<0>(GetParam());
  int op = std::get<1>(GetParam());
  const size_t counts[] = {0, 1, 7, 15, 16, 63, 64, 65, 129, 1000};  // below 16: the small loop
  const Layout layouts[] = {Layout::kSeparate, Layout::kDstIsA,     Layout::kDstIsB,
                            Layout::kDstIsAB,  Layout::kElemOffset, Layout::kByteOffset};
  uint64_t seed = 1000 * static_cast<uint64_t>(dt) + 10 * static_cast<uint64_t>(op);
  for (Layout l : layouts) {
    if (l == Layout::kByteOffset && Info(dt).size == 1) continue;  // no such thing
    for (size_t count : counts)
      EXPECT_EQ(RunReduceCase(dt, op, count, l, seed++), 0u);
  }
  // A large odd count through the common layouts (in-place is what collectives use).
  EXPECT_EQ(RunReduceCase(dt, op, 1000003, Layout::kSeparate, seed++), 0u);
  EXPECT_EQ(RunReduceCase(dt, op, 1000003, Layout::kDstIsA, seed++), 0u);
}

std::string ReduceName(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return std::string(Info(std::get<0>(info.param)).name) + "_" + kOpNames[std::get<1>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(AllTypesOps, ReduceTest,
                         ::testing::Combine(::testing::Range(0, kNumTypes),
                                            ::testing::Range(0, kNumOps)),
                         ReduceName);

// ---- Narrow types: one operand over every bit pattern ----------------------------------------

// Operands worth pairing with everything: zeros, ones, extremes, subnormals, inf, NaN and a
// spread of random patterns.
std::vector<uint32_t> InterestingCodes(const RefCodec& c, std::mt19937_64& rng) {
  std::vector<uint32_t> v = {0, 1, 2, c.maxCode(), c.maxCode() - 1, c.fmt().canonicalNan};
  v.push_back(c.Encode(1.0));
  v.push_back(c.Encode(1.5));
  v.push_back(c.Encode(3.0));
  v.push_back(c.Encode(0.1));
  v.push_back(c.Encode(std::ldexp(1.0, 1 - c.fmt().bias)));  // smallest normal
  v.push_back((1u << c.fmt().manBits) - 1);  // largest subnormal
  if (c.fmt().ieee) v.push_back(((1u << c.fmt().expBits) - 1) << c.fmt().manBits);  // inf
  size_t n = v.size();
  for (size_t i = 0; i < n; i++)
    v.push_back(v[i] | c.signBit());
  for (int i = 0; i < 16; i++)
    v.push_back(static_cast<uint32_t>(rng() % c.codes()));
  return v;
}

TEST_F(KernelTest, NarrowReduceExhaustive) {
  std::mt19937_64 rng(777);
  for (int dt : kNarrowTypes) {
    const RefCodec& c = *CodecFor(dt);
    size_t size = Info(dt).size;
    uint32_t n = c.codes();
    std::vector<unsigned char> a(n * size);
    std::vector<unsigned char> b(n * size);
    std::vector<unsigned char> d(n * size);
    for (uint32_t i = 0; i < n; i++)
      SetBits(a.data(), i, size, i);
    // fp8: every pair; 16-bit types: every pattern against the interesting ones.
    std::vector<uint32_t> others;
    if (size == 1) {
      for (uint32_t i = 0; i < n; i++)
        others.push_back(i);
    } else {
      others = InterestingCodes(c, rng);
    }
    for (int op = 0; op < kNumOps; op++) {
      size_t bad = 0;
      for (uint32_t y : others) {
        for (uint32_t i = 0; i < n; i++)
          SetBits(b.data(), i, size, y);
        papTestKernReduce(d.data(), a.data(), b.data(), n, dt, op);
        for (uint32_t i = 0; i < n; i++) {
          Expect e = RefReduce(dt, op, i, y);
          uint64_t got = GetBits(d.data(), i, size);
          if (!Matches(dt, e, got) && bad++ < 5)
            ADD_FAILURE() << c.fmt().name << " " << Hex(i) << " " << kOpNames[op] << " " << Hex(y)
                          << " gave " << Hex(got) << ", expected " << Hex(e.bits);
        }
      }
      EXPECT_EQ(bad, 0u) << c.fmt().name << " " << kOpNames[op];
    }
  }
}

TEST_F(KernelTest, NarrowScaleAndDivideExhaustive) {
  std::mt19937_64 rng(4242);
  for (int dt : kNarrowTypes) {
    const RefCodec& c = *CodecFor(dt);
    size_t size = Info(dt).size;
    uint32_t n = c.codes();
    std::vector<unsigned char> a(n * size);
    std::vector<unsigned char> d(n * size);
    for (uint32_t i = 0; i < n; i++)
      SetBits(a.data(), i, size, i);
    size_t bad = 0;
    for (uint32_t s : InterestingCodes(c, rng)) {
      uint64_t scalar = s;  // little endian: the low bytes are the element
      papTestKernScale(d.data(), a.data(), n, dt, &scalar);
      for (uint32_t i = 0; i < n; i++) {
        Expect e = RefScale(dt, i, s);
        uint64_t got = GetBits(d.data(), i, size);
        if (!Matches(dt, e, got) && bad++ < 5)
          ADD_FAILURE() << c.fmt().name << " scale " << Hex(i) << " by " << Hex(s) << " gave "
                        << Hex(got) << ", expected " << Hex(e.bits);
      }
    }
    for (int k : {1, 2, 3, 5, 7, 8, 10, 1000, 65536}) {
      papTestKernDivide(d.data(), a.data(), n, dt, k);
      for (uint32_t i = 0; i < n; i++) {
        Expect e = RefDivide(dt, i, k);
        uint64_t got = GetBits(d.data(), i, size);
        if (!Matches(dt, e, got) && bad++ < 5)
          ADD_FAILURE() << c.fmt().name << " " << Hex(i) << " / " << k << " gave " << Hex(got)
                        << ", expected " << Hex(e.bits);
      }
    }
    EXPECT_EQ(bad, 0u) << c.fmt().name;
  }
}

// ---- Scale and divide, every type ------------------------------------------------------------

class UnaryTest : public KernelTest, public ::testing::WithParamInterface<int> {};

TEST_P(UnaryTest, ScaleAndDivideMatchReference) {
  int dt = GetParam();
  const TypeInfo& t = Info(dt);
  std::mt19937_64 rng(99 + static_cast<uint64_t>(dt));
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{65}, size_t{1000003}}) {
    for (int inPlace = 0; inPlace < 2; inPlace++) {
      for (size_t shift : {size_t{0}, t.size, size_t{1}}) {
        if (shift == 1 && t.size == 1) continue;
        if (count == 1000003 && shift != 0) continue;
        size_t bytes = count * t.size;
        std::vector<unsigned char> src(bytes + 1);
        FillRandom(dt, src.data(), count, rng);
        uint64_t scalar = 0;
        FillRandom(dt, &scalar, 1, rng);
        if (t.kind == Kind::kFloat32) scalar = BitsOf(1.75f);
        if (t.kind == Kind::kFloat64) scalar = BitsOf(-0.3);
        int divisor = static_cast<int>(rng() % 9) + 1;

        for (int which = 0; which < 2; which++) {  // 0: scale, 1: divide
          GuardedBuf bs(bytes, shift);
          GuardedBuf bd(bytes, shift);
          if (bytes) std::memcpy(bs.data(), src.data(), bytes);
          void* out = inPlace ? bs.data() : bd.data();
          if (which == 0)
            papTestKernScale(out, bs.data(), count, dt, &scalar);
          else
            papTestKernDivide(out, bs.data(), count, dt, divisor);
          size_t bad = 0;
          for (size_t i = 0; i < count; i++) {
            uint64_t x = GetBits(src.data(), i, t.size);
            Expect e =
                which == 0 ? RefScale(dt, x, Truncate(scalar, t.size)) : RefDivide(dt, x, divisor);
            uint64_t got = GetBits(out, i, t.size);
            if (!Matches(dt, e, got) && bad++ < 5)
              ADD_FAILURE() << t.name << (which ? " divide " : " scale ") << Hex(x) << " by "
                            << (which ? Hex(static_cast<uint64_t>(divisor)) : Hex(scalar))
                            << " gave " << Hex(got) << ", expected " << Hex(e.bits) << " (count "
                            << count << ", shift " << shift << ", in place " << inPlace << ")";
          }
          EXPECT_EQ(bad, 0u);
          EXPECT_TRUE(bs.GuardsIntact() && bd.GuardsIntact()) << t.name;
        }
      }
    }
  }
}

std::string UnaryName(const ::testing::TestParamInfo<int>& info) {
  return Info(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, UnaryTest, ::testing::Range(0, kNumTypes), UnaryName);

// ---- Hand-written cases ------------------------------------------------------------------------

template <typename T>
T Reduce1(int dt, int op, T a, T b) {
  T d;
  papTestKernReduce(&d, &a, &b, 1, dt, op);
  return d;
}

template <typename T>
T Divide1(int dt, T a, int n) {
  T d;
  papTestKernDivide(&d, &a, 1, dt, n);
  return d;
}

template <typename T>
T Scale1(int dt, T a, T s) {
  T d;
  papTestKernScale(&d, &a, 1, dt, &s);
  return d;
}

TEST_F(KernelTest, IntegerWrapAround) {
  EXPECT_EQ(Reduce1<int8_t>(PAP_TEST_KERN_INT8, PAP_TEST_KERN_SUM, 127, 1), -128);
  EXPECT_EQ(Reduce1<int8_t>(PAP_TEST_KERN_INT8, PAP_TEST_KERN_PROD, -128, -1), -128);
  EXPECT_EQ(Reduce1<int8_t>(PAP_TEST_KERN_INT8, PAP_TEST_KERN_PROD, 16, 16), 0);
  EXPECT_EQ(Reduce1<uint8_t>(PAP_TEST_KERN_UINT8, PAP_TEST_KERN_SUM, 200, 100), 44);
  EXPECT_EQ(Reduce1<uint8_t>(PAP_TEST_KERN_UINT8, PAP_TEST_KERN_PROD, 255, 255), 1);
  EXPECT_EQ(Reduce1<int32_t>(PAP_TEST_KERN_INT32, PAP_TEST_KERN_SUM, INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(Reduce1<int32_t>(PAP_TEST_KERN_INT32, PAP_TEST_KERN_PROD, INT32_MAX, 2), -2);
  EXPECT_EQ(Reduce1<uint32_t>(PAP_TEST_KERN_UINT32, PAP_TEST_KERN_SUM, UINT32_MAX, 2), 1u);
  EXPECT_EQ(Reduce1<int64_t>(PAP_TEST_KERN_INT64, PAP_TEST_KERN_SUM, INT64_MIN, -1), INT64_MAX);
  EXPECT_EQ(Reduce1<int64_t>(PAP_TEST_KERN_INT64, PAP_TEST_KERN_PROD, INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(Reduce1<uint64_t>(PAP_TEST_KERN_UINT64, PAP_TEST_KERN_SUM, UINT64_MAX, 1), 0u);
  EXPECT_EQ(Reduce1<uint64_t>(PAP_TEST_KERN_UINT64, PAP_TEST_KERN_PROD, uint64_t{1} << 32,
                              uint64_t{1} << 32),
            0u);
  EXPECT_EQ(Reduce1<int8_t>(PAP_TEST_KERN_INT8, PAP_TEST_KERN_MAX, -1, 1), 1);
  EXPECT_EQ(Reduce1<uint8_t>(PAP_TEST_KERN_UINT8, PAP_TEST_KERN_MAX, 255, 1), 255);
  EXPECT_EQ(Reduce1<int64_t>(PAP_TEST_KERN_INT64, PAP_TEST_KERN_MIN, INT64_MIN, 0), INT64_MIN);
  EXPECT_EQ(Reduce1<uint64_t>(PAP_TEST_KERN_UINT64, PAP_TEST_KERN_MIN, UINT64_MAX, 0), 0u);
  EXPECT_EQ(Scale1<int8_t>(PAP_TEST_KERN_INT8, 100, 3), 44);
  EXPECT_EQ(Scale1<int32_t>(PAP_TEST_KERN_INT32, -5, -7), 35);
}

TEST_F(KernelTest, IntegerDivideTruncatesTowardZero) {
  EXPECT_EQ(Divide1<int8_t>(PAP_TEST_KERN_INT8, -7, 2), -3);
  EXPECT_EQ(Divide1<int8_t>(PAP_TEST_KERN_INT8, 7, 2), 3);
  EXPECT_EQ(Divide1<int8_t>(PAP_TEST_KERN_INT8, -128, 3), -42);
  EXPECT_EQ(Divide1<int8_t>(PAP_TEST_KERN_INT8, -128, 200), 0);  // n does not fit the type
  EXPECT_EQ(Divide1<uint8_t>(PAP_TEST_KERN_UINT8, 255, 200), 1);
  EXPECT_EQ(Divide1<int32_t>(PAP_TEST_KERN_INT32, -7, 2), -3);
  EXPECT_EQ(Divide1<int32_t>(PAP_TEST_KERN_INT32, INT32_MIN, 1), INT32_MIN);
  EXPECT_EQ(Divide1<uint32_t>(PAP_TEST_KERN_UINT32, 7, 2), 3u);
  EXPECT_EQ(Divide1<uint32_t>(PAP_TEST_KERN_UINT32, UINT32_MAX, 2), 0x7fffffffu);
  EXPECT_EQ(Divide1<int64_t>(PAP_TEST_KERN_INT64, -7, 2), -3);
  EXPECT_EQ(Divide1<int64_t>(PAP_TEST_KERN_INT64, INT64_MIN, 2), INT64_MIN / 2);
  EXPECT_EQ(Divide1<uint64_t>(PAP_TEST_KERN_UINT64, UINT64_MAX, 3), UINT64_MAX / 3);
  EXPECT_EQ(Divide1<float>(PAP_TEST_KERN_FLOAT32, -7.0f, 2), -3.5f);
  EXPECT_EQ(Divide1<double>(PAP_TEST_KERN_FLOAT64, 1.0, 3), 1.0 / 3.0);
  EXPECT_EQ(Divide1<uint16_t>(PAP_TEST_KERN_FLOAT16, 0xc700, 2), 0xc300);  // -7 / 2 = -3.5
  EXPECT_EQ(Divide1<uint16_t>(PAP_TEST_KERN_BFLOAT16, 0x3f80, 3), 0x3eab);  // 1/3 rounded
}

TEST_F(KernelTest, FloatSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Reduce1<float>(PAP_TEST_KERN_FLOAT32, PAP_TEST_KERN_MAX, nan, 1.0f), 1.0f);
  EXPECT_EQ(Reduce1<float>(PAP_TEST_KERN_FLOAT32, PAP_TEST_KERN_MAX, 1.0f, nan), 1.0f);
  EXPECT_EQ(Reduce1<float>(PAP_TEST_KERN_FLOAT32, PAP_TEST_KERN_MIN, nan, -inf), -inf);
  EXPECT_TRUE(std::isnan(Reduce1<float>(PAP_TEST_KERN_FLOAT32, PAP_TEST_KERN_MAX, nan, nan)));
  EXPECT_TRUE(std::isnan(Reduce1<float>(PAP_TEST_KERN_FLOAT32, PAP_TEST_KERN_SUM, inf, -inf)));
  EXPECT_EQ(Reduce1<double>(PAP_TEST_KERN_FLOAT64, PAP_TEST_KERN_MIN, 2.0, std::nan("")), 2.0);
  // fp16 overflow gives inf; fp8 saturates; a NaN in max/min is ignored.
  EXPECT_EQ(Reduce1<uint16_t>(PAP_TEST_KERN_FLOAT16, PAP_TEST_KERN_SUM, 0x7bff, 0x7bff), 0x7c00);
  EXPECT_EQ(Reduce1<uint16_t>(PAP_TEST_KERN_FLOAT16, PAP_TEST_KERN_SUM, 0x3c00, 0x7e00), 0x7fff);
  EXPECT_EQ(Reduce1<uint16_t>(PAP_TEST_KERN_FLOAT16, PAP_TEST_KERN_MAX, 0x7e00, 0x3c00), 0x3c00);
  EXPECT_EQ(Reduce1<uint16_t>(PAP_TEST_KERN_BFLOAT16, PAP_TEST_KERN_PROD, 0x7f7f, 0x4000), 0x7f80);
  EXPECT_EQ(Reduce1<uint8_t>(PAP_TEST_KERN_E4M3, PAP_TEST_KERN_SUM, 0x7e, 0x7e), 0x7e);
  EXPECT_EQ(Reduce1<uint8_t>(PAP_TEST_KERN_E4M3, PAP_TEST_KERN_PROD, 0xfe, 0x7e), 0xfe);
  EXPECT_EQ(Reduce1<uint8_t>(PAP_TEST_KERN_E4M3, PAP_TEST_KERN_SUM, 0x7f, 0x38), 0x7f);
  EXPECT_EQ(Reduce1<uint8_t>(PAP_TEST_KERN_E5M2, PAP_TEST_KERN_SUM, 0x7b, 0x7b), 0x7b);
  EXPECT_EQ(Reduce1<uint8_t>(PAP_TEST_KERN_E5M2, PAP_TEST_KERN_SUM, 0x7c, 0x3c), 0x7b);  // inf+1
  EXPECT_EQ(Reduce1<uint8_t>(PAP_TEST_KERN_E5M2, PAP_TEST_KERN_SUM, 0x7c, 0xfc), 0x7f);  // NaN
  EXPECT_EQ(Reduce1<uint8_t>(PAP_TEST_KERN_E5M2, PAP_TEST_KERN_MIN, 0x7e, 0xbc), 0xbc);
  // Exact halfway sums tie to even: 1 + 2^-11 (0x1000) gives 1.0, (1 + 2^-10) + 2^-11 gives
  // 1 + 2^-9.
  EXPECT_EQ(Reduce1<uint16_t>(PAP_TEST_KERN_FLOAT16, PAP_TEST_KERN_SUM, 0x3c00, 0x1000), 0x3c00);
  EXPECT_EQ(Reduce1<uint16_t>(PAP_TEST_KERN_FLOAT16, PAP_TEST_KERN_SUM, 0x3c01, 0x1000), 0x3c02);
}

TEST_F(KernelTest, InvalidArgumentsWarnAndLeaveDstAlone) {
  int32_t a[4] = {1, 2, 3, 4};
  int32_t d[4] = {9, 9, 9, 9};
  papTestKernReduce(d, a, a, 4, PAP_TEST_KERN_NUM_TYPES, PAP_TEST_KERN_SUM);
  papTestKernReduce(d, a, a, 4, -1, PAP_TEST_KERN_SUM);
  papTestKernReduce(d, a, a, 4, PAP_TEST_KERN_INT32, 4);  // avg is not an element-wise kind
  papTestKernReduce(d, a, a, 4, PAP_TEST_KERN_INT32, -1);
  papTestKernScale(d, a, 4, 99, a);
  papTestKernScale(d, a, 4, PAP_TEST_KERN_INT32, nullptr);
  papTestKernDivide(d, a, 4, PAP_TEST_KERN_INT32, 0);
  papTestKernDivide(d, a, 4, PAP_TEST_KERN_INT32, -2);
  for (int32_t v : d)
    EXPECT_EQ(v, 9);
  expectedWarns_ = 8;
}

TEST_F(KernelTest, ZeroCountTouchesNothing) {
  for (const TypeInfo& t : kTypes) {
    for (int op = 0; op < kNumOps; op++)
      papTestKernReduce(nullptr, nullptr, nullptr, 0, t.dt, op);
    uint64_t scalar = 0;
    papTestKernScale(nullptr, nullptr, 0, t.dt, &scalar);
    papTestKernDivide(nullptr, nullptr, 0, t.dt, 3);
  }
}

}  // namespace
