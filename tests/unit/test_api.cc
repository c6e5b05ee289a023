// SPDX-License-Identifier: Apache-2.0
// API-edge tests that need no peers: version, ids, error strings, NULL communicators, group
// misuse, init argument checks, and the header's C++ and C99 views.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/warn_capture.h"
#include "internal/shim_comm.h"
#include "papccl.h"

extern "C" int papTestHeaderC99Probe(void);

namespace {

class Api : public papt::WarnTest {
 protected:
  // Expects exactly one WARN since the last Take, naming `what`, and the thread's last
  // error naming it too.
  void ExpectOneWarn(const std::string& what, const char* call) {
    auto w = Take();
    ASSERT_EQ(1u, w.size()) << call << ": expected one WARN naming '" << what << "'";
    EXPECT_NE(std::string::npos, w[0].find(what)) << call << ": WARN '" << w[0] << "'";
    const char* last = papcclGetLastError(nullptr);
    ASSERT_NE(nullptr, last);
    EXPECT_NE(nullptr, strstr(last, what.c_str())) << call << ": last error '" << last << "'";
  }
};

#define EXPECT_BAD_NOCOMM(code, what, call) \
  do { \
    EXPECT_EQ(code, (call)) << #call; \
    ExpectOneWarn(what, #call); \
  } while (0)

TEST_F(Api, Version) {
  int v = -1;
  ASSERT_EQ(papcclSuccess, papcclGetVersion(&v));
  EXPECT_EQ(PAPCCL_VERSION_CODE, v);
  EXPECT_EQ(PAPCCL_VERSION(PAPCCL_MAJOR, PAPCCL_MINOR, PAPCCL_PATCH), v);
  EXPECT_BAD_NOCOMM(papcclInvalidArgument, "version", papcclGetVersion(nullptr));
}

TEST_F(Api, GetUniqueIdNull) {
  EXPECT_BAD_NOCOMM(papcclInvalidArgument, "uniqueId", papcclGetUniqueId(nullptr));
}

TEST_F(Api, ErrorStrings) {
  std::set<std::string> seen;
  for (int c = 0; c < papcclNumResults; c++) {
    const char* s = papcclGetErrorString((papcclResult_t)c);
    ASSERT_NE(nullptr, s) << c;
    EXPECT_GT(strlen(s), 0u) << c;
    EXPECT_TRUE(seen.insert(s).second) << "code " << c << " shares its text: " << s;
  }
  for (int c : {-1, (int)papcclNumResults, 100, 1 << 30}) {
    const char* s = papcclGetErrorString((papcclResult_t)c);
    ASSERT_NE(nullptr, s) << c;
    EXPECT_GT(strlen(s), 0u) << c;
    EXPECT_EQ(0u, seen.count(s)) << "out-of-range code " << c << " reads as a valid one: " << s;
  }
}

TEST_F(Api, ResultAndEnumValuesAreNccls) {
  EXPECT_EQ(0, papcclSuccess);
  EXPECT_EQ(1, papcclUnhandledCudaError);
  EXPECT_EQ(2, papcclSystemError);
  EXPECT_EQ(3, papcclInternalError);
  EXPECT_EQ(4, papcclInvalidArgument);
  EXPECT_EQ(5, papcclInvalidUsage);
  EXPECT_EQ(6, papcclRemoteError);
  EXPECT_EQ(7, papcclInProgress);
  EXPECT_EQ(12, papcclNumTypes);
  EXPECT_EQ(10, papcclFloat8e4m3);
  EXPECT_EQ(11, papcclFloat8e5m2);
  EXPECT_EQ(9, papcclBfloat16);
  EXPECT_EQ(4, papcclAvg);
  EXPECT_EQ(5, papcclNumOps);
  EXPECT_EQ(128u, sizeof(papcclUniqueId));
  EXPECT_EQ(0xcafebeefu, (unsigned)PAPCCL_CONFIG_MAGIC);
}

TEST_F(Api, HeaderCompilesAsC99AndCpp) {
  // This file includes papccl.h as C++; test_header_c99.c is compiled as C99 (see meson).
  EXPECT_EQ(0, papTestHeaderC99Probe());
  papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(sizeof(papcclConfig_t), cfg.size);
  EXPECT_EQ(PAPCCL_CONFIG_UNDEF_INT, cfg.blocking);
  EXPECT_EQ(nullptr, cfg.commName);
}

// Every call that takes a communicator rejects NULL with papcclInvalidArgument and a WARN.
TEST_F(Api, NullCommunicator) {
  const papcclResult_t A = papcclInvalidArgument;
  float b[8] = {0};
  int x = 0;
  papcclResult_t async;
  papcclRedOp_t op;
  float two = 2;
  papcclComm_t child = nullptr;
  papcclComm_t c = nullptr;
  EXPECT_BAD_NOCOMM(A, "comm", papcclAllReduce(b, b, 8, papcclFloat32, papcclSum, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclBroadcast(b, b, 8, papcclFloat32, 0, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclBcast(b, 8, papcclFloat32, 0, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclReduce(b, b, 8, papcclFloat32, papcclSum, 0, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclAllGather(b, b, 1, papcclFloat32, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclReduceScatter(b, b, 1, papcclFloat32, papcclSum, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclAlltoAll(b, b, 1, papcclFloat32, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclGather(b, b, 1, papcclFloat32, 0, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclScatter(b, b, 1, papcclFloat32, 0, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclSend(b, 8, papcclFloat32, 0, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclRecv(b, 8, papcclFloat32, 0, c, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclCommCount(c, &x));
  EXPECT_BAD_NOCOMM(A, "comm", papcclCommCuDevice(c, &x));
  EXPECT_BAD_NOCOMM(A, "comm", papcclCommUserRank(c, &x));
  EXPECT_BAD_NOCOMM(A, "comm", papcclCommGetAsyncError(c, &async));
  EXPECT_BAD_NOCOMM(A, "comm", papcclCommSplit(c, 0, 0, &child, nullptr));
  EXPECT_BAD_NOCOMM(A, "comm", papcclCommFinalize(c));
  EXPECT_BAD_NOCOMM(
      A, "comm",
      papcclRedOpCreatePreMulSum(&op, &two, papcclFloat32, papcclScalarHostImmediate, c));
  EXPECT_BAD_NOCOMM(A, "comm", papcclRedOpDestroy((papcclRedOp_t)papcclNumOps, c));
  // A NULL communicator inside a group is rejected at the call too; the group stays usable.
  ASSERT_EQ(papcclSuccess, papcclGroupStart());
  EXPECT_BAD_NOCOMM(A, "comm", papcclAllReduce(b, b, 8, papcclFloat32, papcclSum, c, nullptr));
  EXPECT_EQ(papcclSuccess, papcclGroupEnd());
}

// NCCL: ncclCommDestroy(NULL) and ncclCommAbort(NULL) are no-ops that return ncclSuccess.
TEST_F(Api, DestroyAndAbortOfNullAreNoOpsAsInNccl) {
  EXPECT_EQ(papcclSuccess, papcclCommAbort(nullptr));
  EXPECT_EQ(papcclSuccess, papcclCommDestroy(nullptr));
  Take();  // whether a WARN accompanies the no-op is not specified
}

TEST_F(Api, GroupEndWithoutStart) {
  EXPECT_BAD_NOCOMM(papcclInvalidUsage, "papcclGroupEnd", papcclGroupEnd());
  ASSERT_EQ(papcclSuccess, papcclGroupStart());
  ASSERT_EQ(papcclSuccess, papcclGroupStart());
  EXPECT_EQ(papcclSuccess, papcclGroupEnd());
  EXPECT_EQ(papcclSuccess, papcclGroupEnd());
  EXPECT_BAD_NOCOMM(papcclInvalidUsage, "papcclGroupEnd", papcclGroupEnd());
}

// Init argument checks that need no rendezvous (no valid id is made: nothing waits for peers).
TEST_F(Api, InitArgumentsWithoutPeers) {
  papcclUniqueId zero;
  memset(&zero, 0, sizeof(zero));
  papcclComm_t comm = nullptr;
  EXPECT_BAD_NOCOMM(papcclInvalidArgument, "comm", papcclCommInitRank(nullptr, 1, zero, 0));
  EXPECT_BAD_NOCOMM(papcclInvalidArgument, "unique id", papcclCommInitRank(&comm, 1, zero, 0));
  EXPECT_EQ(nullptr, comm);
  std::vector<papcclComm_t> comms(2, nullptr);
  const int devs[2] = {0, -2};
  EXPECT_BAD_NOCOMM(papcclInvalidArgument, "comms", papcclCommInitAll(nullptr, 2, nullptr));
  EXPECT_BAD_NOCOMM(papcclInvalidArgument, "ndev", papcclCommInitAll(comms.data(), 0, nullptr));
  EXPECT_BAD_NOCOMM(papcclInvalidArgument, "ndev", papcclCommInitAll(comms.data(), -1, nullptr));
  EXPECT_BAD_NOCOMM(papcclInvalidArgument, "devlist", papcclCommInitAll(comms.data(), 2, devs));
}

TEST_F(Api, LastErrorOfCleanThreadIsEmpty) {
  // A fresh thread has no last error: "" (never NULL).
  std::string text = "unset";
  std::thread t([&] { text = papcclGetLastError(nullptr); });
  t.join();
  EXPECT_EQ("", text);
}

// Every integer PAPCCL_* parameter: a malformed or out-of-range value gives one WARN naming
// the variable and the default; the bounds themselves are accepted silently.
TEST_F(Api, IntegerParametersRejectBadValues) {
  const int n = papTestParamIntCount();
  ASSERT_GT(n, 20);
  for (int i = 0; i < n; i++) {
    const char* env = nullptr;
    int64_t def = 0, lo = 0, hi = 0;
    ASSERT_TRUE(papTestParamIntAt(i, &env, &def, &lo, &hi));
    ASSERT_LE(lo, def) << env;
    ASSERT_LE(def, hi) << env;
    const char* old = getenv(env);
    std::string saved = old ? old : "";
    auto check = [&](const std::string& value, bool bad, int64_t want) {
      setenv(env, value.c_str(), 1);
      papTestCommParamReset();
      EXPECT_EQ(want, papTestParamIntGet(i)) << env << "=" << value;
      auto w = Take();
      if (bad) {
        ASSERT_EQ(1u, w.size()) << env << "=" << value << ": expected one WARN";
        EXPECT_NE(std::string::npos, w[0].find(env)) << w[0];
      } else {
        EXPECT_TRUE(w.empty()) << env << "=" << value << ": " << (w.empty() ? "" : w[0]);
      }
    };
    check("", false, def);  // empty means unset
    check("junk", true, def);
    check("12abc", true, def);
    check("99999999999999999999999", true, def);  // does not fit in 64 bits
    check(std::to_string(lo), false, lo);
    check(std::to_string(hi), false, hi);
    check(std::to_string(lo - 1), true, def);
    check(std::to_string(hi + 1), true, def);
    if (old)
      setenv(env, saved.c_str(), 1);
    else
      unsetenv(env);
  }
  papTestCommParamReset();
}

}  // namespace
