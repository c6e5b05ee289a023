// SPDX-License-Identifier: Apache-2.0
#include "multirank/recovery.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "multirank/harness.h"

namespace papt {

double CallUntilFailure(papcclComm_t comm, size_t count, double limitS, papcclResult_t* res,
                        double* startOut) {
  std::vector<float> buf(count, 1.0f);
  double callS = 0;
  *res = papcclSuccess;
  const double start = NowS();
  while (*res == papcclSuccess && NowS() - start < limitS) {
    const double t0 = NowS();
    *res = papcclAllReduce(buf.data(), buf.data(), count, papcclFloat32, papcclSum, comm, nullptr);
    callS = NowS() - t0;
    *startOut = t0;
  }
  return callS;
}

void ExpectShape(papcclComm_t comm, int rank, int n, const std::string& what) {
  ASSERT_NE(nullptr, comm) << what;
  int cn = -1, cr = -1;
  EXPECT_EQ(papcclSuccess, papcclCommCount(comm, &cn));
  EXPECT_EQ(papcclSuccess, papcclCommUserRank(comm, &cr));
  EXPECT_EQ(n, cn) << what;
  EXPECT_EQ(rank, cr) << what;
}

namespace {
struct IdPage {
  std::atomic<int> ready[SharedIds::kSlots];
  papcclUniqueId id[SharedIds::kSlots];
};
static_assert(sizeof(IdPage) <= 4096, "one page");
}  // namespace

SharedIds::SharedIds() {
  page_ = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page_ == MAP_FAILED) {
    ADD_FAILURE() << "mmap of the shared id page failed";
    page_ = nullptr;
    return;
  }
  new (page_) IdPage();
}

SharedIds::~SharedIds() {
  if (page_) munmap(page_, 4096);
}

void SharedIds::Put(int slot, const papcclUniqueId& id) {
  auto* p = static_cast<IdPage*>(page_);
  p->id[slot] = id;
  p->ready[slot].store(1, std::memory_order_release);
}

bool SharedIds::Get(int slot, papcclUniqueId* id, double timeoutS) const {
  auto* p = static_cast<IdPage*>(page_);
  const double end = NowS() + timeoutS;
  while (p->ready[slot].load(std::memory_order_acquire) == 0) {
    if (NowS() > end) return false;
    usleep(1000);
  }
  *id = p->id[slot];
  return true;
}

}  // namespace papt
