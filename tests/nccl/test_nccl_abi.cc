// SPDX-License-Identifier: Apache-2.0
// papccl's nccl.h against NVIDIA's: every size, offset, enum value, macro and initializer
// field that is ABI must be equal. The facts come from two C objects, one compiled against
// each header (tests/nccl/abi_facts.c).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "abi_facts.h"

namespace {

// Unused where NVIDIA's nccl.h was not found (the comparison then skips).
[[maybe_unused]] std::map<std::string, long long> Facts(int (*fn)(ncclAbiFact*, int)) {
  ncclAbiFact facts[256];
  int n = fn(facts, 256);
  EXPECT_LE(n, 256);
  std::map<std::string, long long> m;
  for (int i = 0; i < n && i < 256; i++)
    m[facts[i].name] = facts[i].value;
  return m;
}

TEST(NcclAbi, SameFactsAsNvidiaHeader) {
#ifndef NCCL_ABI_HAVE_NVIDIA
  GTEST_SKIP() << "NVIDIA's nccl.h was not found at configure time (option nccl_ref_dir)";
#else
  auto nv = Facts(ncclAbiFactsNvidia);
  auto ours = Facts(ncclAbiFactsPapccl);
  ASSERT_GT(nv.size(), 100u);
  ASSERT_EQ(nv.size(), ours.size());
  for (const auto& [name, value] : nv) {
    auto it = ours.find(name);
    ASSERT_NE(it, ours.end()) << name;
    EXPECT_EQ(value, it->second) << name;
  }
  // Spot checks that the facts are what NCCL-COMPAT says (the comparison alone would pass
  // for two equally wrong headers).
  EXPECT_EQ(ours["sizeof(ncclConfig_t)"], 120);  // NCCL 2.31's layout, 2.28's plus 9 ints
  EXPECT_EQ(ours["offsetof(ncclConfig_t, nvlinkCentricSched)"], 76);
  EXPECT_EQ(ours["offsetof(ncclConfig_t, nvlsHostMode)"], 112);
  EXPECT_EQ(ours["sizeof(ncclCollConfig_t)"], 72);
  EXPECT_EQ(ours["offsetof(ncclCollConfig_t, userProfilerTag)"], 56);
  EXPECT_EQ(ours["coll.forceAlgSelection"], 1);
  EXPECT_EQ(ours["ncclTimeout"], 8);
  EXPECT_EQ(ours["sizeof(ncclUniqueId)"], 128);
  EXPECT_EQ(ours["config.magic"], 0xcafebeefLL);
  EXPECT_EQ(ours["ncclFloat8e5m2"], 11);
  EXPECT_EQ(ours["ncclMaxRedOp"], 0x7fffffffLL);
  EXPECT_EQ(ours["NCCL_VERSION(2, 8, 4)"], 2804);
#endif
}

TEST(NcclAbi, ClaimsTheVersionItImplements) {
  // 2.27.7: 2.28 would make clients include nccl_device.h (device API, not implemented).
  EXPECT_EQ(ncclAbiVersionPapccl(), 22707);
#ifdef NCCL_ABI_HAVE_NVIDIA
  EXPECT_GE(ncclAbiVersionNvidia(), 23200) << "the reference header is older than 2.32";
#endif
}

}  // namespace
