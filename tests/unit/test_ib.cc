// SPDX-License-Identifier: Apache-2.0
// ib transport tests that need no RDMA device: the listen-handle codec, the QP state machine,
// the wire format and credit rule, the registration cache (driven by recording callbacks),
// and, on a host without a device, that init fails cleanly and selection is unchanged.
#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/scoped_env.h"
#include "common/warn_capture.h"
#include "internal/shim_comm.h"
#include "internal/shim_ib.h"
#include "papccl.h"

namespace {

constexpr int kSuccess = 0;
constexpr int kSystemError = 2;
constexpr int kInternalError = 3;
constexpr int kInvalidArgument = 4;
constexpr int kInvalidUsage = 5;
constexpr size_t kPage = 4096;

class Ib : public papt::WarnTest {
 protected:
  void ExpectOneWarn(const std::string& what) {
    auto w = Take();
    ASSERT_EQ(1u, w.size()) << "expected one WARN naming '" << what << "'";
    EXPECT_NE(std::string::npos, w[0].find(what)) << w[0];
  }
};

// ---- Listen handle ---------------------------------------------------------------------

class IbHandle : public Ib {
 protected:
  void Fill(int rank, int nranks) {
    memset(&h_, 0, sizeof(h_));
    h_.rank = rank;
    h_.nranks = nranks;
    h_.linkLayer = 2;
    h_.mtu = 5;
    h_.lid = 0xbeef;
    h_.port = 2;
    for (int i = 0; i < 16; i++)
      h_.gid[i] = static_cast<uint8_t>(0xa0 + i);
    h_.boardAddr = 0x7f00dead0000ull;
    h_.boardRkey = 0x12345678;
    h_.bufSize = 16384;
    h_.nbufs = 8;
    std::mt19937 rng(static_cast<unsigned>(nranks));
    qpns_.assign(static_cast<size_t>(nranks), 0);
    for (auto& q : qpns_)
      q = rng() & 0xffffff;
    buf_.assign(papTestIbHandleBytes(), 0xcc);
  }
  int Encode() {
    const char* why = nullptr;
    return papTestIbHandleEncode(&h_, qpns_.data(), buf_.data(), buf_.size(), &why);
  }
  // Decodes buf_ and returns the reason of a rejection ("" on success).
  std::string DecodeWhy(int expectRank, int expectNranks, size_t bytes, int* resOut) {
    const char* why = nullptr;
    papTestIbHandle out;
    *resOut = papTestIbHandleDecode(buf_.data(), bytes, expectRank, expectNranks, &out, &why);
    return *resOut == kSuccess ? "" : (why ? why : "(no reason)");
  }
  void ExpectRejected(int expectRank, int expectNranks, size_t bytes, const std::string& what) {
    int res = kSuccess;
    std::string why = DecodeWhy(expectRank, expectNranks, bytes, &res);
    EXPECT_EQ(kInternalError, res) << what;
    EXPECT_NE(std::string::npos, why.find(what)) << "reason '" << why << "'";
  }
  papTestIbHandle h_;
  std::vector<uint32_t> qpns_;
  std::vector<unsigned char> buf_;
};

TEST_F(IbHandle, FitsTheOpsTableHandle) {
  EXPECT_EQ(4096u, papTestIbHandleBytes());
  int max = papTestIbMaxRanks();
  EXPECT_GE(max, 1024);
  EXPECT_LE(papTestIbHandleSize(max), papTestIbHandleBytes());
  EXPECT_GT(papTestIbHandleHdrBytes() + 3 * static_cast<size_t>(max + 1), papTestIbHandleBytes());
  EXPECT_EQ(0u, papTestIbHandleSize(max + 1));
  EXPECT_EQ(0u, papTestIbHandleSize(0));
  EXPECT_EQ(papTestIbHandleHdrBytes() + 3, papTestIbHandleSize(1));
}

TEST_F(IbHandle, RoundTrip) {
  for (int nranks : {1, 2, 7, 300, papTestIbMaxRanks()}) {
    int rank = nranks / 2;
    Fill(rank, nranks);
    ASSERT_EQ(kSuccess, Encode()) << nranks;
    papTestIbHandle out;
    const char* why = nullptr;
    ASSERT_EQ(kSuccess, papTestIbHandleDecode(buf_.data(), buf_.size(), rank, nranks, &out, &why))
        << nranks << ": " << (why ? why : "");
    EXPECT_EQ(rank, out.rank);
    EXPECT_EQ(nranks, out.nranks);
    EXPECT_EQ(h_.linkLayer, out.linkLayer);
    EXPECT_EQ(h_.mtu, out.mtu);
    EXPECT_EQ(h_.lid, out.lid);
    EXPECT_EQ(h_.port, out.port);
    EXPECT_EQ(0, memcmp(h_.gid, out.gid, 16));
    EXPECT_EQ(h_.boardAddr, out.boardAddr);
    EXPECT_EQ(h_.boardRkey, out.boardRkey);
    EXPECT_EQ(h_.bufSize, out.bufSize);
    EXPECT_EQ(h_.nbufs, out.nbufs);
    for (int p = 0; p < nranks; p++)
      ASSERT_EQ(qpns_[static_cast<size_t>(p)], papTestIbHandleQpn(buf_.data(), p)) << p;
    // The rest of the buffer is zeroed (no stale bytes go over the wire).
    size_t used = papTestIbHandleSize(nranks);
    for (size_t i = used; i < buf_.size(); i++)
      ASSERT_EQ(0, buf_[i]) << i;
    // Exactly the encoded bytes are enough.
    int res = -1;
    EXPECT_EQ("", DecodeWhy(rank, nranks, used, &res));
  }
}

TEST_F(IbHandle, RejectsBadMagic) {
  Fill(1, 4);
  ASSERT_EQ(kSuccess, Encode());
  buf_[0] ^= 1;
  ExpectRejected(1, 4, buf_.size(), "magic");
  std::vector<unsigned char> zeros(papTestIbHandleBytes(), 0);
  buf_ = zeros;
  ExpectRejected(1, 4, buf_.size(), "magic");
}

TEST_F(IbHandle, RejectsBadVersion) {
  Fill(1, 4);
  ASSERT_EQ(kSuccess, Encode());
  buf_[8] = 2;  // version field
  ExpectRejected(1, 4, buf_.size(), "version");
}

TEST_F(IbHandle, RejectsTruncated) {
  Fill(2, 40);
  ASSERT_EQ(kSuccess, Encode());
  ExpectRejected(2, 40, papTestIbHandleSize(40) - 1, "truncated");
  ExpectRejected(2, 40, papTestIbHandleHdrBytes() - 1, "truncated");
  ExpectRejected(2, 40, 0, "truncated");
}

TEST_F(IbHandle, RejectsWrongNranksAndRank) {
  Fill(2, 5);
  ASSERT_EQ(kSuccess, Encode());
  ExpectRejected(2, 6, buf_.size(), "nranks");
  ExpectRejected(2, 4, buf_.size(), "nranks");
  ExpectRejected(3, 5, buf_.size(), "rank");
}

TEST_F(IbHandle, RejectsCorruption) {
  Fill(0, 9);
  ASSERT_EQ(kSuccess, Encode());
  auto good = buf_;
  // One flipped bit anywhere in the encoded handle past the fields checked by name.
  for (size_t i : {size_t{20}, size_t{24}, size_t{39}, size_t{45}, size_t{50},
                   papTestIbHandleHdrBytes(), papTestIbHandleSize(9) - 1}) {
    buf_ = good;
    buf_[i] ^= 0x10;
    ExpectRejected(0, 9, buf_.size(), "checksum");
  }
  // A length field that disagrees with nranks.
  buf_ = good;
  buf_[52] ^= 3;
  ExpectRejected(0, 9, buf_.size(), "length");
}

TEST_F(IbHandle, EncodeRejectsWhatCannotBeSent) {
  const char* why = nullptr;
  Fill(0, 3);
  qpns_[1] = 0x1000000;  // wider than 24 bits
  EXPECT_EQ(kInternalError, Encode());
  Fill(0, 3);
  EXPECT_EQ(kInvalidArgument, papTestIbHandleEncode(&h_, qpns_.data(), buf_.data(),
                                                    papTestIbHandleSize(3) - 1, &why));
  Fill(3, 3);  // rank out of range
  EXPECT_EQ(kInvalidArgument, Encode());
  int tooMany = papTestIbMaxRanks() + 1;
  Fill(0, tooMany);
  EXPECT_EQ(kInvalidUsage, Encode());
  ASSERT_NE(nullptr, why);
}

// ---- Queue-pair state machine -----------------------------------------------------------

TEST_F(Ib, StateMachineForwardPath) {
  int s = PAP_TEST_IB_QP_RESET;
  s = papTestIbNextState(s, PAP_TEST_IB_EV_TO_INIT);
  EXPECT_EQ(PAP_TEST_IB_QP_INIT, s);
  s = papTestIbNextState(s, PAP_TEST_IB_EV_TO_RTR);
  EXPECT_EQ(PAP_TEST_IB_QP_RTR, s);
  s = papTestIbNextState(s, PAP_TEST_IB_EV_TO_RTS);
  EXPECT_EQ(PAP_TEST_IB_QP_RTS, s);
  s = papTestIbNextState(s, PAP_TEST_IB_EV_FAIL);
  EXPECT_EQ(PAP_TEST_IB_QP_ERROR, s);
  s = papTestIbNextState(s, PAP_TEST_IB_EV_TO_RESET);
  EXPECT_EQ(PAP_TEST_IB_QP_RESET, s);
}

TEST_F(Ib, StateMachineTable) {
  const int X = -1;
  // expected[state][event]: events TO_INIT, TO_RTR, TO_RTS, FAIL, TO_RESET.
  const int expected[PAP_TEST_IB_QP_NSTATES][PAP_TEST_IB_EV_NEVENTS] = {
      /* RESET */ {PAP_TEST_IB_QP_INIT, X, X, PAP_TEST_IB_QP_ERROR, PAP_TEST_IB_QP_RESET},
      /* INIT  */ {X, PAP_TEST_IB_QP_RTR, X, PAP_TEST_IB_QP_ERROR, PAP_TEST_IB_QP_RESET},
      /* RTR   */ {X, X, PAP_TEST_IB_QP_RTS, PAP_TEST_IB_QP_ERROR, PAP_TEST_IB_QP_RESET},
      /* RTS   */ {X, X, X, PAP_TEST_IB_QP_ERROR, PAP_TEST_IB_QP_RESET},
      /* ERROR */ {X, X, X, PAP_TEST_IB_QP_ERROR, PAP_TEST_IB_QP_RESET},
  };
  for (int s = 0; s < PAP_TEST_IB_QP_NSTATES; s++)
    for (int e = 0; e < PAP_TEST_IB_EV_NEVENTS; e++)
      EXPECT_EQ(expected[s][e], papTestIbNextState(s, e))
          << papTestIbStateName(s) << " by event " << e;
  for (int bad : {-1, static_cast<int>(PAP_TEST_IB_QP_NSTATES), 1000})
    for (int e = 0; e < PAP_TEST_IB_EV_NEVENTS; e++)
      EXPECT_EQ(X, papTestIbNextState(bad, e)) << bad;
  for (int bad : {-1, static_cast<int>(PAP_TEST_IB_EV_NEVENTS)})
    EXPECT_EQ(X, papTestIbNextState(PAP_TEST_IB_QP_RESET, bad)) << bad;
}

TEST_F(Ib, StateNames) {
  EXPECT_STREQ("RESET", papTestIbStateName(PAP_TEST_IB_QP_RESET));
  EXPECT_STREQ("INIT", papTestIbStateName(PAP_TEST_IB_QP_INIT));
  EXPECT_STREQ("RTR", papTestIbStateName(PAP_TEST_IB_QP_RTR));
  EXPECT_STREQ("RTS", papTestIbStateName(PAP_TEST_IB_QP_RTS));
  EXPECT_STREQ("ERROR", papTestIbStateName(PAP_TEST_IB_QP_ERROR));
  EXPECT_STREQ("?", papTestIbStateName(-1));
  EXPECT_STREQ("?", papTestIbStateName(PAP_TEST_IB_QP_NSTATES));
}

// ---- Wire format and credits -----------------------------------------------------------

TEST_F(Ib, ImmediateRoundTrip) {
  for (int kind = PAP_TEST_IB_MSG_EAGER_FIRST; kind <= PAP_TEST_IB_MSG_NOTIFY; kind++) {
    for (unsigned credits : {0u, 1u, 7u, 4095u, 0xffffu}) {
      uint32_t imm = papTestIbImmPack(kind, credits);
      EXPECT_EQ(kind, papTestIbImmKind(imm)) << kind << " " << credits;
      EXPECT_EQ(credits, papTestIbImmCredits(imm)) << kind << " " << credits;
    }
  }
  // Distinct kinds never share an immediate, whatever the credits.
  EXPECT_NE(papTestIbImmPack(PAP_TEST_IB_MSG_CTS, 0), papTestIbImmPack(PAP_TEST_IB_MSG_CREDIT, 0));
}

TEST_F(Ib, DataAndControlKinds) {
  EXPECT_TRUE(papTestIbMsgIsData(PAP_TEST_IB_MSG_EAGER_FIRST));
  EXPECT_TRUE(papTestIbMsgIsData(PAP_TEST_IB_MSG_EAGER_MORE));
  EXPECT_TRUE(papTestIbMsgIsData(PAP_TEST_IB_MSG_RTS));
  EXPECT_TRUE(papTestIbMsgIsData(PAP_TEST_IB_MSG_WRITE_DONE));
  EXPECT_FALSE(papTestIbMsgIsData(PAP_TEST_IB_MSG_CTS));
  EXPECT_FALSE(papTestIbMsgIsData(PAP_TEST_IB_MSG_CREDIT));
  EXPECT_FALSE(papTestIbMsgIsData(PAP_TEST_IB_MSG_NOTIFY));
  EXPECT_FALSE(papTestIbMsgIsData(0));
  EXPECT_FALSE(papTestIbMsgIsData(15));
}

TEST_F(Ib, CreditReturnRule) {
  EXPECT_FALSE(papTestIbShouldReturnCredits(0, 8, 8));  // nothing freed: nothing to return
  EXPECT_FALSE(papTestIbShouldReturnCredits(0, 100, 8));
  EXPECT_FALSE(papTestIbShouldReturnCredits(3, 3, 8));  // below the batch, sender not starved
  EXPECT_FALSE(papTestIbShouldReturnCredits(3, 7, 8));
  EXPECT_TRUE(papTestIbShouldReturnCredits(4, 4, 8));  // half the window
  EXPECT_TRUE(papTestIbShouldReturnCredits(1, 8, 8));  // the sender is out of credits
  EXPECT_TRUE(papTestIbShouldReturnCredits(1, 1, 1));
  EXPECT_TRUE(papTestIbShouldReturnCredits(1, 1, 2));
  EXPECT_TRUE(papTestIbShouldReturnCredits(1, 1, 3));  // a batch of one
  EXPECT_FALSE(papTestIbShouldReturnCredits(1, 3, 4));
  EXPECT_TRUE(papTestIbShouldReturnCredits(1, 4, 4));
}

// ---- Registration cache -----------------------------------------------------------------

// The register/deregister side of the cache: hands out numbered handles and records calls.
struct FakeReg {
  struct Reg {
    uintptr_t addr;
    size_t bytes;
    int access;
    int id;
  };
  std::vector<Reg> regs;
  std::vector<int> deregs;
  int next = 1;
  int failNext = 0;
  static int RegFn(void* arg, void* addr, size_t bytes, int access, void** mrOut) {
    auto* self = static_cast<FakeReg*>(arg);
    if (self->failNext) {
      self->failNext--;
      return kSystemError;
    }
    int id = self->next++;
    self->regs.push_back({reinterpret_cast<uintptr_t>(addr), bytes, access, id});
    *mrOut = reinterpret_cast<void*>(static_cast<uintptr_t>(id));
    return kSuccess;
  }
  static void DeregFn(void* arg, void* mr) {
    static_cast<FakeReg*>(arg)->deregs.push_back(static_cast<int>(reinterpret_cast<uintptr_t>(mr)));
  }
};

alignas(4096) char arena[32 * 4096];  // only its addresses are used

class IbMrCache : public Ib {
 protected:
  void Make(int cap) {
    int res = -1;
    cache_ = papTestIbMrCacheNew(cap, kPage, &FakeReg::RegFn, &FakeReg::DeregFn, &fake_, &res);
    ASSERT_EQ(kSuccess, res);
    ASSERT_NE(nullptr, cache_);
  }
  void TearDown() override {
    if (cache_) papTestIbMrCacheDestroy(cache_);
    Ib::TearDown();
  }
  void* Get(size_t off, size_t bytes, int access) {
    void* e = nullptr;
    EXPECT_EQ(kSuccess, papTestIbMrCacheGet(cache_, arena + off, bytes, access, &e));
    return e;
  }
  static int Id(void* e) {
    uintptr_t a;
    size_t b;
    int refs;
    void* mr;
    papTestIbMrEntryInfo(e, &a, &b, &refs, &mr);
    return static_cast<int>(reinterpret_cast<uintptr_t>(mr));
  }
  static int Refs(void* e) {
    uintptr_t a;
    size_t b;
    int refs;
    void* mr;
    papTestIbMrEntryInfo(e, &a, &b, &refs, &mr);
    return refs;
  }
  uint64_t Hits() {
    uint64_t h, m, e;
    papTestIbMrCacheStats(cache_, &h, &m, &e);
    return h;
  }
  FakeReg fake_;
  void* cache_ = nullptr;
};

TEST_F(IbMrCache, MissRegistersPageAlignedThenHits) {
  Make(8);
  void* a = Get(100, 200, 0);
  ASSERT_EQ(1u, fake_.regs.size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena), fake_.regs[0].addr);
  EXPECT_EQ(kPage, fake_.regs[0].bytes);
  EXPECT_EQ(0, fake_.regs[0].access);
  papTestIbMrCachePut(cache_, a);
  void* b = Get(300, 100, 0);  // same page: a hit
  EXPECT_EQ(a, b);
  EXPECT_EQ(1u, fake_.regs.size());
  EXPECT_EQ(1u, Hits());
  papTestIbMrCachePut(cache_, b);
  EXPECT_TRUE(fake_.deregs.empty());
  EXPECT_EQ(1, papTestIbMrCacheCount(cache_));
}

TEST_F(IbMrCache, RangeInsideACachedRegistrationReusesIt) {
  Make(8);
  void* big = Get(0, 3 * kPage, 1);
  ASSERT_EQ(1u, fake_.regs.size());
  void* inner = Get(kPage + 10, 100, 1);
  EXPECT_EQ(big, inner);
  EXPECT_EQ(2, Refs(big));
  void* tail = Get(2 * kPage, kPage, 1);  // exactly the last page
  EXPECT_EQ(big, tail);
  EXPECT_EQ(1u, fake_.regs.size());
  papTestIbMrCachePut(cache_, big);
  papTestIbMrCachePut(cache_, inner);
  papTestIbMrCachePut(cache_, tail);
  EXPECT_EQ(0, Refs(big));
}

TEST_F(IbMrCache, OverlapWithoutContainmentRegistersAgain) {
  Make(8);
  void* a = Get(0, kPage, 0);
  void* b = Get(kPage - 8, 16, 0);  // straddles into the next page
  EXPECT_NE(a, b);
  ASSERT_EQ(2u, fake_.regs.size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena), fake_.regs[1].addr);
  EXPECT_EQ(2 * kPage, fake_.regs[1].bytes);
  papTestIbMrCachePut(cache_, a);
  papTestIbMrCachePut(cache_, b);
}

TEST_F(IbMrCache, AccessMustBeCovered) {
  Make(8);
  void* ro = Get(0, 64, 0);
  void* rw = Get(0, 64, 3);  // a read-only registration cannot serve a write
  EXPECT_NE(ro, rw);
  EXPECT_EQ(2u, fake_.regs.size());
  void* w = Get(0, 64, 2);  // a subset of rw's access
  EXPECT_EQ(rw, w);
  void* any = Get(0, 64, 0);
  EXPECT_TRUE(any == rw || any == ro);
  EXPECT_EQ(2u, fake_.regs.size());
  for (void* e : {ro, rw, w, any})
    papTestIbMrCachePut(cache_, e);
}

TEST_F(IbMrCache, RefcountsAndCapZero) {
  Make(0);  // nothing kept: deregistered at the last Put
  void* a = Get(0, 10, 0);
  void* b = Get(0, 10, 0);
  EXPECT_EQ(a, b);
  EXPECT_EQ(2, Refs(a));
  papTestIbMrCachePut(cache_, a);
  EXPECT_TRUE(fake_.deregs.empty());
  EXPECT_EQ(1, Refs(a));
  papTestIbMrCachePut(cache_, b);
  ASSERT_EQ(1u, fake_.deregs.size());
  EXPECT_EQ(1, fake_.deregs[0]);
  EXPECT_EQ(0, papTestIbMrCacheCount(cache_));
}

TEST_F(IbMrCache, EvictsLeastRecentlyUsed) {
  Make(2);
  auto use = [&](size_t page) {
    void* e = Get(page * kPage, 8, 0);
    int id = Id(e);
    papTestIbMrCachePut(cache_, e);
    return id;
  };
  int a = use(0), b = use(2), c = use(4);
  ASSERT_EQ(1u, fake_.deregs.size());  // a was the oldest
  EXPECT_EQ(a, fake_.deregs[0]);
  EXPECT_EQ(b, use(2));  // touch b: c becomes the oldest
  int d = use(6);
  ASSERT_EQ(2u, fake_.deregs.size());
  EXPECT_EQ(c, fake_.deregs[1]);
  EXPECT_EQ(2, papTestIbMrCacheCount(cache_));
  EXPECT_EQ(4, d);
  uint64_t h, m, e;
  papTestIbMrCacheStats(cache_, &h, &m, &e);
  EXPECT_EQ(1u, h);
  EXPECT_EQ(4u, m);
  EXPECT_EQ(2u, e);
}

TEST_F(IbMrCache, InUseEntriesAreNeverEvicted) {
  Make(1);
  void* a = Get(0, 8, 0);
  void* b = Get(2 * kPage, 8, 0);
  EXPECT_EQ(2, papTestIbMrCacheCount(cache_));  // over the cap while both are in use
  EXPECT_TRUE(fake_.deregs.empty());
  papTestIbMrCachePut(cache_, b);  // b is idle now: the cap evicts it, not a
  ASSERT_EQ(1u, fake_.deregs.size());
  EXPECT_EQ(2, fake_.deregs[0]);
  papTestIbMrCachePut(cache_, a);  // back at the cap: kept
  EXPECT_EQ(1u, fake_.deregs.size());
  EXPECT_EQ(1, papTestIbMrCacheCount(cache_));
}

TEST_F(IbMrCache, InvalidateDefersInUseEntries) {
  Make(8);
  void* idle = Get(4 * kPage, 8, 0);
  papTestIbMrCachePut(cache_, idle);
  void* busy = Get(0, 2 * kPage, 0);
  EXPECT_EQ(1, papTestIbMrCacheInvalidate(cache_, arena + kPage, 1));
  EXPECT_TRUE(fake_.deregs.empty());  // in use: deferred
  void* again = Get(0, 8, 0);  // a stale registration is never handed out again
  EXPECT_NE(busy, again);
  EXPECT_EQ(3u, fake_.regs.size());
  papTestIbMrCachePut(cache_, busy);
  ASSERT_EQ(1u, fake_.deregs.size());
  EXPECT_EQ(2, fake_.deregs[0]);
  papTestIbMrCachePut(cache_, again);
  EXPECT_EQ(0, papTestIbMrCacheInvalidate(cache_, arena + 4 * kPage, kPage));  // idle: now
  ASSERT_EQ(2u, fake_.deregs.size());
  EXPECT_EQ(1, fake_.deregs[1]);
  EXPECT_EQ(1, papTestIbMrCacheCount(cache_));
}

TEST_F(IbMrCache, RegisterFailurePropagates) {
  Make(8);
  fake_.failNext = 1;
  void* e = nullptr;
  EXPECT_EQ(kSystemError, papTestIbMrCacheGet(cache_, arena, 8, 0, &e));
  EXPECT_EQ(nullptr, e);
  EXPECT_EQ(0, papTestIbMrCacheCount(cache_));
  EXPECT_TRUE(fake_.deregs.empty());
  void* ok = Get(0, 8, 0);  // nothing half-inserted: the next lookup registers afresh
  EXPECT_EQ(1u, fake_.regs.size());
  papTestIbMrCachePut(cache_, ok);
}

TEST_F(IbMrCache, DestroyDeregistersEverything) {
  Make(8);
  void* held = Get(0, 8, 0);
  void* idle = Get(2 * kPage, 8, 0);
  papTestIbMrCachePut(cache_, idle);
  (void)held;
  EXPECT_EQ(1, papTestIbMrCacheDestroy(cache_));
  cache_ = nullptr;
  EXPECT_EQ(2u, fake_.deregs.size());
}

TEST_F(IbMrCache, RejectsMisuse) {
  int res = -1;
  EXPECT_EQ(nullptr,
            papTestIbMrCacheNew(-1, kPage, &FakeReg::RegFn, &FakeReg::DeregFn, &fake_, &res));
  EXPECT_EQ(kInvalidArgument, res);
  ExpectOneWarn("registration cache");
  EXPECT_EQ(nullptr,
            papTestIbMrCacheNew(1, 3000, &FakeReg::RegFn, &FakeReg::DeregFn, &fake_, &res));
  EXPECT_EQ(kInvalidArgument, res);
  ExpectOneWarn("registration cache");
  Make(4);
  void* e = Get(0, 8, 0);
  papTestIbMrCachePut(cache_, e);
  papTestIbMrCachePut(cache_, e);  // once too often: refused, the entry stays
  ExpectOneWarn("released more often");
  EXPECT_EQ(1, papTestIbMrCacheCount(cache_));
  EXPECT_TRUE(fake_.deregs.empty());
  void* out = nullptr;
  EXPECT_EQ(kInvalidArgument, papTestIbMrCacheGet(cache_, nullptr, 8, 0, &out));
  ExpectOneWarn("NULL");
}

// ---- The backend on this host -----------------------------------------------------------

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (readdir(d) != nullptr)
    n++;
  closedir(d);
  return n;
}

using papt::ScopedEnv;

TEST_F(Ib, InitWithoutDeviceFailsCleanly) {
  if (papTestIbDeviceCount() > 0) GTEST_SKIP() << "this host has an RDMA device";
  int fds = OpenFds();
  for (int round = 0; round < 3; round++) {
    void* state = nullptr;
    int res = papTestIbInit(2, &state);
    EXPECT_TRUE(res == kSystemError || res == kInternalError) << res;
    EXPECT_EQ(nullptr, state);
    ExpectOneWarn("no RDMA device found");
    EXPECT_EQ(fds, OpenFds()) << "descriptors leaked by a failed init (round " << round << ")";
  }
}

// Forced ib where it cannot start: the init says why in one line, the comm falls back to
// the backend that reaches every peer (shm for one rank here; ucx across hosts, see
// Ucx.ForcedIbFallsBackToUcx), works, and leaves nothing open after destroy.
TEST_F(Ib, ForcedIbFallsBackCleanly) {
  if (papTestIbDeviceCount() > 0) GTEST_SKIP() << "this host has an RDMA device";
  ScopedEnv force("PAPCCL_TRANSPORT", "ib");
  papcclUniqueId id;
  ASSERT_EQ(papcclSuccess, papcclGetUniqueId(&id));
  int fds = OpenFds();
  papcclComm_t comm = nullptr;
  ASSERT_EQ(papcclSuccess, papcclCommInitRank(&comm, 1, id, 0));
  auto w = Take();
  ASSERT_EQ(2u, w.size()) << "expected the ib line and the fallback line";
  EXPECT_NE(std::string::npos, w[0].find("no RDMA device found")) << w[0];
  EXPECT_NE(std::string::npos, w[1].find("falling back to shm")) << w[1];
  float x = 3.0f;
  EXPECT_EQ(papcclSuccess, papcclAllReduce(&x, &x, 1, papcclFloat32, papcclSum, comm, nullptr));
  EXPECT_EQ(3.0f, x);
  EXPECT_EQ(papcclSuccess, papcclCommDestroy(comm));
  // The bootstrap root may take a moment to wind down; then nothing is left open.
  for (int i = 0; i < 200 && (papTestCommActiveRoots() > 0 || OpenFds() > fds); i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_LE(OpenFds(), fds);
}

TEST_F(Ib, SelectionWithoutForcingIsUnchanged) {
  ScopedEnv unset("PAPCCL_TRANSPORT", nullptr);
  const uint64_t sameHost[3] = {7, 7, 7};
  const uint64_t twoHosts[3] = {7, 7, 8};
  const char* local = papTestTransportSelect(3, sameHost);
  ASSERT_NE(nullptr, local);
  EXPECT_STREQ("shm", local);
  const char* remote = papTestTransportSelect(3, twoHosts);
  ASSERT_NE(nullptr, remote);
  EXPECT_STREQ(papTestUcxBuilt() ? "ucx" : "ib", remote);
  // And a real comm still comes up on shm, with no WARN.
  papcclUniqueId id;
  ASSERT_EQ(papcclSuccess, papcclGetUniqueId(&id));
  papcclComm_t comm = nullptr;
  ASSERT_EQ(papcclSuccess, papcclCommInitRank(&comm, 1, id, 0));
  EXPECT_EQ(papcclSuccess, papcclCommDestroy(comm));
}

TEST_F(Ib, ForcedSelectionPicksIb) {
  ScopedEnv force("PAPCCL_TRANSPORT", "ib");
  const uint64_t sameHost[2] = {7, 7};
  const uint64_t twoHosts[2] = {7, 8};
  const char* a = papTestTransportSelect(2, sameHost);
  const char* b = papTestTransportSelect(2, twoHosts);
  ASSERT_NE(nullptr, a);
  ASSERT_NE(nullptr, b);
  EXPECT_STREQ("ib", a);
  EXPECT_STREQ("ib", b);
}

}  // namespace
