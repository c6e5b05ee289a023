// SPDX-License-Identifier: Apache-2.0
// Bootstrap tests: ranks as threads and as processes, the split path, PAPCCL_COMM_ID,
// hostile clients of the root and of a rank's listener, missing ranks, aborts.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/scoped_env.h"
#include "common/warn_capture.h"
#include "tests/internal/free_port.h"
#include "tests/internal/shim_bootstrap.h"

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 4;
constexpr int kInvalidUsage = 5;
constexpr int kRemoteError = 6;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void SleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

struct Id {
  unsigned char b[PAP_TEST_BS_ID_BYTES];
};

struct Addr {
  unsigned char b[PAP_TEST_BS_ADDR_BYTES];
};

struct Key {
  unsigned char b[PAP_TEST_BS_KEY_BYTES];
};

// Every test captures WARNs: one that the test did not allow fails it. The root threads it
// started must be gone at the end (a rendezvous that completes or fails frees its root).
class BootstrapTest : public papt::WarnTest {
 protected:
  void SetUp() override {
    rootsBefore_ = papTestBsActiveRoots();
    papt::WarnTest::SetUp();
  }
  void TearDown() override {
    auto t0 = Clock::now();
    while (papTestBsActiveRoots() > rootsBefore_ && SecondsSince(t0) < 15)
      SleepMs(10);
    EXPECT_LE(papTestBsActiveRoots(), rootsBefore_)
        << "a bootstrap root thread outlived its rendezvous";
    papt::WarnTest::TearDown();
    for (const auto& m : warns_.Messages()) {
      bool allowed = false;
      for (const auto& a : allowed_)
        allowed = allowed || m.find(a) != std::string::npos;
      EXPECT_TRUE(allowed) << "unexpected WARN: " << m;
    }
  }
  void AllowWarn(const std::string& sub) {
    allowed_.push_back(sub);
  }

  // Takes every WARN of the test, from any thread; TearDown checks them against allowed_.
  papt::ExpectWarn warns_;
  std::vector<std::string> allowed_;
  int rootsBefore_ = 0;
};

class BootstrapRanks : public BootstrapTest, public ::testing::WithParamInterface<int> {};

uint8_t Pattern(int rank, size_t i, uint32_t salt) {
  uint32_t x = (uint32_t)rank * 2654435761u ^ (uint32_t)i * 40503u ^ salt;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return (uint8_t)x;
}

// Allgathers of several sizes (0, 1, odd, 1 MiB) with checked contents, then a barrier.
// Returns 0, or a code naming the failing call (process ranks exit with it).
int RankWorkload(void* bs, int rank, int nranks) {
  const size_t sizes[] = {0, 1, 13, 4096 + 7, 1 << 20};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    size_t size = sizes[k];
    uint32_t salt = (uint32_t)k * 7919u;
    std::vector<uint8_t> buf(nranks * size + 1, 0);
    for (size_t i = 0; i < size; i++)
      buf[rank * size + i] = Pattern(rank, i, salt);
    if (papTestBsAllGather(bs, buf.data(), size) != kSuccess) return 10 + (int)k;
    for (int r = 0; r < nranks; r++) {
      for (size_t i = 0; i < size; i++) {
        if (buf[r * size + i] != Pattern(r, i, salt)) return 20 + (int)k;
      }
    }
  }
  if (papTestBsBarrier(bs) != kSuccess) return 30;
  if (papTestBsBarrier(bs) != kSuccess) return 31;
  return 0;
}

std::vector<int> RunThreads(int n, const std::function<int(int)>& fn) {
  std::vector<int> rcs(n, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++)
    threads.emplace_back([&, r] { rcs[r] = fn(r); });
  for (auto& t : threads)
    t.join();
  return rcs;
}

// Forks n ranks; each runs fn(rank) and _exits with its result. Stragglers past timeoutS
// are killed and reported as -1.
std::vector<int> RunProcs(int n, const std::function<int(int)>& fn, double timeoutS) {
  std::vector<pid_t> pids(n, -1);
  std::vector<int> rcs(n, -1);
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < n; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      papTestBsSetWarnHook(nullptr, nullptr);
      int rc = fn(r);
      _exit(rc < 0 || rc > 250 ? 250 : rc);
    }
    pids[r] = pid;
  }
  auto t0 = Clock::now();
  int left = 0;
  for (pid_t p : pids)
    left += p > 0;
  while (left > 0 && SecondsSince(t0) < timeoutS) {
    for (int r = 0; r < n; r++) {
      int status = 0;
      if (pids[r] <= 0 || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      rcs[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      pids[r] = -1;
      left--;
    }
    SleepMs(10);
  }
  for (int r = 0; r < n; r++) {
    if (pids[r] <= 0) continue;
    kill(pids[r], SIGKILL);
    waitpid(pids[r], nullptr, 0);
  }
  return rcs;
}

// Init, check that every rank got the same communicator key (copied to keyOut when given),
// run the workload, destroy.
int InitAndRun(const Id& id, int rank, int nranks, unsigned char* keyOut = nullptr) {
  void* bs = nullptr;
  if (papTestBsInit(id.b, rank, nranks, nullptr, 60, &bs) != kSuccess) return 1;
  std::vector<unsigned char> keys(nranks * PAP_TEST_BS_KEY_BYTES);
  unsigned char* mine = &keys[rank * PAP_TEST_BS_KEY_BYTES];
  papTestBsKey(bs, mine);
  if (keyOut != nullptr) memcpy(keyOut, mine, PAP_TEST_BS_KEY_BYTES);
  int rc = papTestBsAllGather(bs, keys.data(), PAP_TEST_BS_KEY_BYTES) == kSuccess ? 0 : 2;
  for (int r = 0; rc == 0 && r < nranks; r++) {
    if (memcmp(&keys[r * PAP_TEST_BS_KEY_BYTES], mine, PAP_TEST_BS_KEY_BYTES) != 0) rc = 3;
  }
  if (rc == 0) rc = RankWorkload(bs, rank, nranks);
  papTestBsDestroy(bs);
  return rc;
}

// Split path: colors rank % 2, child keys derived from the parent's, child addresses swapped
// through the parent's allgather, then the child ring runs the workload.
int SplitAndRun(void* parent, int rank, int nranks) {
  struct Entry {
    int color;
    Addr addr;
  };
  int color = rank % 2;
  int subRank = rank / 2;
  int subN = (nranks - color + 1) / 2;
  unsigned char key[PAP_TEST_BS_KEY_BYTES];
  papTestBsKey(parent, key);
  key[0] ^= (unsigned char)(0x40 + color);
  void* child = nullptr;
  if (papTestBsCreate(subRank, subN, key, nullptr, 60, &child) != kSuccess) return 40;
  std::vector<Entry> all(nranks);
  memset(all.data(), 0, all.size() * sizeof(Entry));
  all[rank].color = color;
  papTestBsGetAddr(child, all[rank].addr.b);
  int rc = 0;
  if (papTestBsAllGather(parent, all.data(), sizeof(Entry)) != kSuccess) rc = 41;
  std::vector<Addr> addrs;
  for (int r = 0; rc == 0 && r < nranks; r++) {
    if (all[r].color == color) addrs.push_back(all[r].addr);
  }
  if (rc == 0 && (int)addrs.size() != subN) rc = 42;
  if (rc == 0 && papTestBsConnect(child, addrs.data()) != kSuccess) rc = 43;
  if (rc == 0) rc = RankWorkload(child, subRank, subN);
  if (rc == 0 && papTestBsBarrier(parent) != kSuccess) rc = 44;
  papTestBsDestroy(child);
  return rc;
}

using papt::ScopedEnv;

// A raw TCP client of a bootstrap address (root or rank listener).
int ConnectTo(const unsigned char* addr) {
  sockaddr_storage ss{};
  unsigned len = papTestBsAddrToSockaddr(addr, &ss);
  if (len == 0) return -1;
  int fd = socket(ss.ss_family, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (connect(fd, (sockaddr*)&ss, len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void SendBytes(int fd, const void* buf, size_t len) {
  ASSERT_EQ(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

// ---- Ids and arguments -----------------------------------------------------------------

TEST_F(BootstrapTest, UniqueIdIsCheckedAndOneRankCompletes) {
  AllowWarn("not a papccl unique id");
  AllowWarn("unique id version");
  AllowWarn("invalid arguments");
  Id zero{};
  EXPECT_EQ(papTestBsCheckId(zero.b), kInvalidArgument);
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  EXPECT_EQ(papTestBsCheckId(id.b), kSuccess);
  Id badMagic = id;
  badMagic.b[0] ^= 1;
  EXPECT_EQ(papTestBsCheckId(badMagic.b), kInvalidArgument);
  Id badVersion = id;
  badVersion.b[8] ^= 0xff;
  EXPECT_EQ(papTestBsCheckId(badVersion.b), kInvalidArgument);
  void* bs = nullptr;
  EXPECT_EQ(papTestBsInit(badMagic.b, 0, 1, nullptr, 5, &bs), kInvalidArgument);
  EXPECT_EQ(papTestBsInit(id.b, 1, 1, nullptr, 5, &bs), kInvalidArgument);
  EXPECT_EQ(papTestBsInit(id.b, 0, 0, nullptr, 5, &bs), kInvalidArgument);
  EXPECT_EQ(papTestBsInit(id.b, -1, 2, nullptr, 5, &bs), kInvalidArgument);
  // The root serves exactly one rendezvous: a one-rank communicator consumes it.
  EXPECT_EQ(InitAndRun(id, 0, 1), 0);
}

TEST_F(BootstrapTest, SplitArgumentsAndOrder) {
  AllowWarn("invalid arguments");
  AllowWarn("collective before the ring was connected");
  AllowWarn("Connect called twice");
  AllowWarn("but this rank listens on");
  unsigned char key[PAP_TEST_BS_KEY_BYTES] = {1, 2, 3};
  void* bs = nullptr;
  EXPECT_EQ(papTestBsCreate(2, 2, key, nullptr, 5, &bs), kInvalidArgument);
  EXPECT_EQ(papTestBsCreate(0, 0, key, nullptr, 5, &bs), kInvalidArgument);
  ASSERT_EQ(papTestBsCreate(0, 1, key, nullptr, 5, &bs), kSuccess);
  uint8_t byte = 7;
  EXPECT_EQ(papTestBsAllGather(bs, &byte, 1), kInvalidUsage);
  Addr mine;
  papTestBsGetAddr(bs, mine.b);
  Addr other = mine;
  other.b[3] ^= 1;  // another port
  EXPECT_EQ(papTestBsConnect(bs, other.b), kInvalidArgument);
  ASSERT_EQ(papTestBsConnect(bs, mine.b), kSuccess);
  EXPECT_EQ(papTestBsConnect(bs, mine.b), kInvalidUsage);
  EXPECT_EQ(papTestBsAllGather(bs, &byte, 1), kSuccess);
  EXPECT_EQ(byte, 7);
  EXPECT_EQ(papTestBsBarrier(bs), kSuccess);
  papTestBsDestroy(bs);
  papTestBsDestroy(nullptr);
}

// ---- Ranks as threads and as processes -------------------------------------------------

TEST_P(BootstrapRanks, ThreadsInitAllGatherBarrier) {
  int n = GetParam();
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  std::vector<Key> keys(n);
  auto rcs = RunThreads(n, [&](int r) { return InitAndRun(id, r, n, keys[r].b); });
  for (int r = 0; r < n; r++)
    EXPECT_EQ(rcs[r], 0) << "rank " << r;
  // The id's random key is the communicator key.
  Addr root;
  Key idKey;
  ASSERT_EQ(papTestBsIdInfo(id.b, root.b, idKey.b), kSuccess);
  EXPECT_EQ(memcmp(keys[0].b, idKey.b, sizeof(Key)), 0);
}

TEST_P(BootstrapRanks, ProcessesInitAllGatherBarrier) {
  int n = GetParam();
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  auto rcs = RunProcs(
      n, [&](int r) { return InitAndRun(id, r, n); }, 60);
  for (int r = 0; r < n; r++)
    EXPECT_EQ(rcs[r], 0) << "rank " << r;
}

TEST_P(BootstrapRanks, ThreadsSplit) {
  int n = GetParam();
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  auto rcs = RunThreads(n, [&](int r) {
    void* parent = nullptr;
    if (papTestBsInit(id.b, r, n, nullptr, 60, &parent) != kSuccess) return 1;
    int rc = SplitAndRun(parent, r, n);
    papTestBsDestroy(parent);
    return rc;
  });
  for (int r = 0; r < n; r++)
    EXPECT_EQ(rcs[r], 0) << "rank " << r;
}

TEST_P(BootstrapRanks, ProcessesSplit) {
  int n = GetParam();
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  auto rcs = RunProcs(
      n,
      [&](int r) {
        void* parent = nullptr;
        if (papTestBsInit(id.b, r, n, nullptr, 60, &parent) != kSuccess) return 1;
        int rc = SplitAndRun(parent, r, n);
        papTestBsDestroy(parent);
        return rc;
      },
      60);
  for (int r = 0; r < n; r++)
    EXPECT_EQ(rcs[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, BootstrapRanks, ::testing::Values(1, 2, 3, 8),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "N" + std::to_string(i.param);
                         });

// ---- PAPCCL_COMM_ID and PAPCCL_SOCKET_IFNAME --------------------------------------------

// Every rank computes the id itself; rank 0 arrives late and serves the root.
TEST_F(BootstrapTest, CommIdThreads) {
  int port = papTestFreeFixedPort();
  ASSERT_GT(port, 0);
  ScopedEnv env("PAPCCL_COMM_ID", "127.0.0.1:" + std::to_string(port));
  const int n = 3;
  std::vector<Id> ids(n);
  std::vector<Key> keys[2] = {std::vector<Key>(n), std::vector<Key>(n)};
  auto rcs = RunThreads(n, [&](int r) {
    if (papTestBsGetUniqueId(ids[r].b) != kSuccess) return 1;
    if (r == 0) SleepMs(300);
    return InitAndRun(ids[r], r, n, keys[0][r].b);
  });
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(rcs[r], 0) << "rank " << r;
    EXPECT_EQ(memcmp(ids[r].b, ids[0].b, sizeof(Id)), 0) << "rank " << r;
  }
  // The port is free again for the next communicator, which gets a key of its own.
  rcs = RunThreads(2, [&](int r) { return InitAndRun(ids[0], r, 2, keys[1][r].b); });
  for (int r = 0; r < 2; r++)
    EXPECT_EQ(rcs[r], 0) << "rank " << r;
  Addr root;
  Key idKey;
  ASSERT_EQ(papTestBsIdInfo(ids[0].b, root.b, idKey.b), kSuccess);
  EXPECT_NE(memcmp(keys[0][0].b, keys[1][0].b, sizeof(Key)), 0);
  EXPECT_NE(memcmp(keys[0][0].b, idKey.b, sizeof(Key)), 0);
}

TEST_F(BootstrapTest, CommIdProcesses) {
  int port = papTestFreeFixedPort();
  ASSERT_GT(port, 0);
  ScopedEnv env("PAPCCL_COMM_ID", "127.0.0.1:" + std::to_string(port));
  const int n = 4;
  auto rcs = RunProcs(
      n,
      [&](int r) {
        Id id;
        if (papTestBsGetUniqueId(id.b) != kSuccess) return 1;
        if (r == 0) SleepMs(300);
        return InitAndRun(id, r, n);
      },
      60);
  for (int r = 0; r < n; r++)
    EXPECT_EQ(rcs[r], 0) << "rank " << r;
}

// Rank 0 retries binding the PAPCCL_COMM_ID port while someone holds it for a moment, and
// fails with a WARN (not a hang) when it stays taken.
TEST_F(BootstrapTest, CommIdPortBusy) {
  AllowWarn("Address already in use");
  int port = papTestFreeFixedPort();
  ASSERT_GT(port, 0);
  ScopedEnv env("PAPCCL_COMM_ID", "127.0.0.1:" + std::to_string(port));
  auto holdPort = [&]() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // past TIME_WAIT
    EXPECT_EQ(bind(fd, (sockaddr*)&a, sizeof(a)), 0);
    EXPECT_EQ(listen(fd, 1), 0);  // a listener blocks even SO_REUSEADDR binds
    return fd;
  };
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  int blocker = holdPort();
  std::thread release([&] {
    SleepMs(300);
    close(blocker);
  });
  auto t0 = Clock::now();
  EXPECT_EQ(InitAndRun(id, 0, 1), 0);
  EXPECT_GE(SecondsSince(t0), 0.25);  // it waited for the port
  release.join();
  EXPECT_EQ(warns_.Count("Address already in use"), 0);

  blocker = holdPort();
  t0 = Clock::now();
  void* bs = nullptr;
  EXPECT_EQ(papTestBsInit(id.b, 0, 1, nullptr, 2, &bs), 2 /* papcclSystemError */);
  EXPECT_LT(SecondsSince(t0), 6.0);
  EXPECT_EQ(warns_.Count("Address already in use"), 1);
  close(blocker);
}

TEST_F(BootstrapTest, CommIdInvalid) {
  AllowWarn("cannot parse");
  ScopedEnv env("PAPCCL_COMM_ID", "no-port-here");
  Id id;
  EXPECT_EQ(papTestBsGetUniqueId(id.b), kInvalidArgument);
  EXPECT_EQ(warns_.Count("cannot parse"), 1);
}

TEST_F(BootstrapTest, SocketIfnameLoopback) {
  ScopedEnv env("PAPCCL_SOCKET_IFNAME", "=lo");
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  Addr root;
  unsigned char key[PAP_TEST_BS_KEY_BYTES];
  ASSERT_EQ(papTestBsIdInfo(id.b, root.b, key), kSuccess);
  sockaddr_storage ss{};
  ASSERT_EQ(papTestBsAddrToSockaddr(root.b, &ss), sizeof(sockaddr_in));
  EXPECT_EQ(ntohl(((sockaddr_in*)&ss)->sin_addr.s_addr), INADDR_LOOPBACK);
  auto rcs = RunThreads(2, [&](int r) { return InitAndRun(id, r, 2); });
  for (int r = 0; r < 2; r++)
    EXPECT_EQ(rcs[r], 0) << "rank " << r;
}

TEST_F(BootstrapTest, SocketIfnameNoMatch) {
  AllowWarn("matches no interface");
  ScopedEnv env("PAPCCL_SOCKET_IFNAME", "=papccl-no-such-if");
  Id id;
  EXPECT_EQ(papTestBsGetUniqueId(id.b), kInvalidArgument);
}

// ---- Hostile clients --------------------------------------------------------------------

// Garbage, a wrong key, truncated and silent clients are dropped with a WARN each; the root
// keeps serving and the real ranks complete.
TEST_F(BootstrapTest, RootSurvivesGarbageClients) {
  AllowWarn("bootstrap root");
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  Addr root;
  unsigned char key[PAP_TEST_BS_KEY_BYTES];
  ASSERT_EQ(papTestBsIdInfo(id.b, root.b, key), kSuccess);
  unsigned char buf[128];
  std::vector<int> fds;
  auto client = [&]() {
    int fd = ConnectTo(root.b);
    EXPECT_GE(fd, 0);
    fds.push_back(fd);
    return fd;
  };

  std::mt19937 rng(12345);
  for (auto& b : buf)
    b = (unsigned char)rng();
  SendBytes(client(), buf, 64);  // random bytes
  unsigned char wrongKey[PAP_TEST_BS_KEY_BYTES];
  memcpy(wrongKey, key, sizeof(key));
  wrongKey[5] ^= 0x5a;
  SendBytes(client(), buf, papTestBsPackRootHello(buf, wrongKey, 0, 3, root.b));
  memcpy(wrongKey, key, sizeof(key));
  wrongKey[PAP_TEST_BS_KEY_BYTES - 1] ^= 0x01;  // only the last bit of the last byte differs
  SendBytes(client(), buf, papTestBsPackRootHello(buf, wrongKey, 0, 3, root.b));
  size_t helloLen = papTestBsPackRootHello(buf, key, 0, 3, root.b);
  int fd = client();
  SendBytes(fd, buf, 10);  // truncated header, then gone
  close(fd);
  fds.pop_back();
  SendBytes(client(), buf, 10);  // truncated header, then silent
  client();  // silent
  SendBytes(client(), buf, papTestBsPackHdr(buf, PAP_TEST_BS_MSG_ROOT_HELLO, 1ull << 40, key));
  SendBytes(client(), buf, papTestBsPackHdr(buf, PAP_TEST_BS_MSG_ALLGATHER, 40, key));
  SendBytes(client(), buf, papTestBsPackRootHello(buf, key, 7, 3, root.b));
  EXPECT_GT(helloLen, 10u);

  EXPECT_TRUE(warns_.WaitFor("bad magic", 1, 10));
  EXPECT_TRUE(warns_.WaitFor("wrong communicator key", 2, 10));
  EXPECT_TRUE(warns_.WaitFor("closed the connection after 10 of", 1, 10));
  EXPECT_TRUE(warns_.WaitFor("(absurd)", 1, 10));
  EXPECT_TRUE(warns_.WaitFor("message type 4, expected 1", 1, 10));
  EXPECT_TRUE(warns_.WaitFor("rank 7 out of range for 3 ranks", 1, 10));
  EXPECT_TRUE(warns_.WaitFor("no complete hello within 2 s", 2, 10));
  EXPECT_EQ(warns_.Count("dropping connection from"), 9);

  const int n = 3;
  auto rcs = RunThreads(n, [&](int r) { return InitAndRun(id, r, n); });
  for (int r = 0; r < n; r++)
    EXPECT_EQ(rcs[r], 0) << "rank " << r;
  for (int f : fds)
    close(f);
}

// A second hello for a joined rank and a disagreeing nranks are refused; when a joined rank
// leaves, the root gives up and exits (TearDown checks that it did).
TEST_F(BootstrapTest, RootRefusesDuplicatesAndGivesUpWhenARankLeaves) {
  AllowWarn("bootstrap root");
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  Addr root;
  unsigned char key[PAP_TEST_BS_KEY_BYTES];
  ASSERT_EQ(papTestBsIdInfo(id.b, root.b, key), kSuccess);
  unsigned char buf[128];
  size_t len = papTestBsPackRootHello(buf, key, 0, 2, root.b);
  int fd1 = ConnectTo(root.b);
  int fd2 = ConnectTo(root.b);
  ASSERT_GE(fd1, 0);
  ASSERT_GE(fd2, 0);
  SendBytes(fd1, buf, len);
  SendBytes(fd2, buf, len);
  EXPECT_TRUE(warns_.WaitFor("rank 0 already joined from", 1, 10));
  int fd3 = ConnectTo(root.b);
  ASSERT_GE(fd3, 0);
  SendBytes(fd3, buf, papTestBsPackRootHello(buf, key, 1, 3, root.b));
  EXPECT_TRUE(warns_.WaitFor("nranks 3 disagrees with 2", 1, 10));
  int fd4 = ConnectTo(root.b);
  ASSERT_GE(fd4, 0);
  SendBytes(fd4, buf, papTestBsPackRootHello(buf, key, 0, 0, root.b));
  EXPECT_TRUE(warns_.WaitFor("nranks 0 out of range", 1, 10));
  close(fd1);
  close(fd2);
  EXPECT_TRUE(warns_.WaitFor("closed its connection with 1 of 2 ranks joined; giving up", 1, 10));
  close(fd3);
  close(fd4);
}

// Strangers on a rank's listener are dropped with a WARN; the ring still connects.
TEST_F(BootstrapTest, RankListenerDropsStrangers) {
  AllowWarn("dropping connection from");
  unsigned char key[PAP_TEST_BS_KEY_BYTES] = {9, 8, 7, 6};
  void* bs[2] = {nullptr, nullptr};
  Addr addrs[2];
  for (int r = 0; r < 2; r++) {
    ASSERT_EQ(papTestBsCreate(r, 2, key, nullptr, 30, &bs[r]), kSuccess);
    papTestBsGetAddr(bs[r], addrs[r].b);
  }
  unsigned char buf[128];
  std::mt19937 rng(777);
  for (auto& b : buf)
    b = (unsigned char)rng();
  int garbage = ConnectTo(addrs[0].b);
  ASSERT_GE(garbage, 0);
  SendBytes(garbage, buf, 48);
  unsigned char wrongKey[PAP_TEST_BS_KEY_BYTES] = {1};
  int wrong = ConnectTo(addrs[0].b);
  ASSERT_GE(wrong, 0);
  size_t len = papTestBsPackHdr(buf, PAP_TEST_BS_MSG_RING_HELLO, 8, wrongKey);
  memset(buf + len, 0, 8);
  SendBytes(wrong, buf, len + 8);
  int silent = ConnectTo(addrs[0].b);
  ASSERT_GE(silent, 0);
  auto rcs = RunThreads(2, [&](int r) {
    if (papTestBsConnect(bs[r], addrs) != kSuccess) return 1;
    return RankWorkload(bs[r], r, 2);
  });
  for (int r = 0; r < 2; r++)
    EXPECT_EQ(rcs[r], 0) << "rank " << r;
  EXPECT_EQ(warns_.Count("bootstrap rank 0: dropping connection from"), 3);
  EXPECT_EQ(warns_.Count("bad magic"), 1);
  EXPECT_EQ(warns_.Count("wrong communicator key"), 1);
  for (int r = 0; r < 2; r++)
    papTestBsDestroy(bs[r]);
  close(garbage);
  close(wrong);
  close(silent);
}

// ---- Failures: missing ranks, aborts, vanished peers, mismatched calls ------------------

TEST_F(BootstrapTest, MissingRankTimesOut) {
  AllowWarn("timeout while");
  AllowWarn("giving up");
  // The root gives up as soon as the first rank times out, so the other may see it close.
  AllowWarn("connection closed by peer while rank");
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  auto t0 = Clock::now();
  auto rcs = RunThreads(2, [&](int r) {
    void* bs = nullptr;
    int rc = papTestBsInit(id.b, r, 3, nullptr, 2, &bs);
    papTestBsDestroy(bs);
    return rc;
  });
  double s = SecondsSince(t0);
  for (int r = 0; r < 2; r++)
    EXPECT_EQ(rcs[r], kRemoteError) << "rank " << r;
  EXPECT_GE(s, 1.5);
  EXPECT_LT(s, 8.0);
  EXPECT_EQ(warns_.Count("waiting for the address table from the bootstrap root"), 2);
  EXPECT_TRUE(warns_.WaitFor("giving up", 1, 10));
}

TEST_F(BootstrapTest, AbortStopsInitAndAllGather) {
  AllowWarn("aborted while");
  AllowWarn("giving up");
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  volatile int abortFlag = 0;
  std::thread setter([&] {
    SleepMs(300);
    __atomic_store_n(&abortFlag, 1, __ATOMIC_RELEASE);
  });
  auto t0 = Clock::now();
  void* bs = nullptr;
  EXPECT_EQ(papTestBsInit(id.b, 0, 2, &abortFlag, 60, &bs), kRemoteError);
  EXPECT_LT(SecondsSince(t0), 5.0);
  setter.join();
  EXPECT_GE(warns_.Count("aborted while rank 0 of 2"), 1);

  // Now in a collective: rank 1 never joins the allgather.
  Id id2;
  ASSERT_EQ(papTestBsGetUniqueId(id2.b), kSuccess);
  volatile int flag2 = 0;
  std::atomic<bool> rank0Done{false};
  auto rcs = RunThreads(2, [&](int r) {
    void* b = nullptr;
    if (papTestBsInit(id2.b, r, 2, &flag2, 60, &b) != kSuccess) return 1;
    int rc = 0;
    if (r == 0) {
      uint64_t data[2] = {1, 0};
      rc = papTestBsAllGather(b, data, sizeof(uint64_t));
      rank0Done = true;
    } else {
      SleepMs(300);
      __atomic_store_n(&flag2, 1, __ATOMIC_RELEASE);
      while (!rank0Done)
        SleepMs(5);
    }
    papTestBsDestroy(b);
    return rc;
  });
  EXPECT_EQ(rcs[0], kRemoteError);
  EXPECT_EQ(rcs[1], 0);
  EXPECT_GE(warns_.Count("aborted while rank 0 waiting for allgather"), 1);
}

TEST_F(BootstrapTest, SplitPeerNeverConnects) {
  AllowWarn("timeout while waiting for rank 1 (prev)");
  unsigned char key[PAP_TEST_BS_KEY_BYTES] = {4, 4, 4};
  void* bs[2] = {nullptr, nullptr};
  Addr addrs[2];
  for (int r = 0; r < 2; r++) {
    ASSERT_EQ(papTestBsCreate(r, 2, key, nullptr, 2, &bs[r]), kSuccess);
    papTestBsGetAddr(bs[r], addrs[r].b);
  }
  auto t0 = Clock::now();
  EXPECT_EQ(papTestBsConnect(bs[0], addrs), kRemoteError);
  EXPECT_LT(SecondsSince(t0), 6.0);
  EXPECT_EQ(warns_.Count("timeout while waiting for rank 1 (prev)"), 1);
  for (int r = 0; r < 2; r++)
    papTestBsDestroy(bs[r]);
}

TEST_F(BootstrapTest, VanishedPeerFailsFast) {
  AllowWarn("while rank 0");
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  std::atomic<bool> rank1Gone{false};
  auto t0 = Clock::now();
  auto rcs = RunThreads(2, [&](int r) {
    void* b = nullptr;
    if (papTestBsInit(id.b, r, 2, nullptr, 60, &b) != kSuccess) return 1;
    if (r == 1) {
      papTestBsDestroy(b);
      rank1Gone = true;
      return 0;
    }
    while (!rank1Gone)
      SleepMs(5);
    std::vector<uint8_t> data(2 * 1024, 1);
    int rc = papTestBsAllGather(b, data.data(), 1024);
    papTestBsDestroy(b);
    return rc;
  });
  EXPECT_EQ(rcs[0], kRemoteError);
  EXPECT_EQ(rcs[1], 0);
  EXPECT_LT(SecondsSince(t0), 10.0);
}

TEST_F(BootstrapTest, MismatchedAllGatherSizesAreDetected) {
  AllowWarn("bad message from rank");
  Id id;
  ASSERT_EQ(papTestBsGetUniqueId(id.b), kSuccess);
  auto rcs = RunThreads(2, [&](int r) {
    void* b = nullptr;
    if (papTestBsInit(id.b, r, 2, nullptr, 10, &b) != kSuccess) return 1;
    std::vector<uint8_t> data(64, 0);
    int rc = papTestBsAllGather(b, data.data(), r == 0 ? 8 : 16);
    papTestBsDestroy(b);
    return rc;
  });
  for (int r = 0; r < 2; r++)
    EXPECT_EQ(rcs[r], kRemoteError) << "rank " << r;
  EXPECT_GE(warns_.Count("payload length"), 1);
}

}  // namespace
