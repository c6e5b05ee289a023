// SPDX-License-Identifier: Apache-2.0
// The path decision (src/arrival/path.c, docs/ARCHITECTURE.md "An op's path"): a table of
// calls on made-up communicators (sizes, buffer kinds, comm shapes, batches, forced
// algorithms), each with the path and the reason papPathDecide gives, and whether the first
// arriver commits its plan.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "internal/shim_path.h"

namespace {

using papt::ScopedEnv;

// 4 ranks on one host, blocking, flat lines of 4 KiB, a shared board, no arenas.
papTestPathComm OneHost() {
  papTestPathComm c{};
  c.nranks = 4;
  c.blocking = 1;
  c.flatCap = 4096;
  return c;
}

// 4 ranks on 2 hosts x 2 over UCX: inner comms, a message board, no flat lines.
papTestPathComm TwoHosts() {
  papTestPathComm c{};
  c.nranks = 4;
  c.blocking = 1;
  c.hier = 1;
  c.msgBoard = 1;
  return c;
}

// One host whose ranks have 8 MiB device arenas (CUDA IPC), arenas from 64 KiB per rank.
papTestPathComm Arenas() {
  papTestPathComm c = OneHost();
  c.arenaBytes = 8 << 20;
  c.arenaMinBytes = 64 << 10;
  return c;
}

papTestPathCall Call(const char* coll, size_t bytes, papcclRedOp_t op = papcclSum,
                     papcclDataType_t t = papcclFloat32) {
  papTestPathCall k{};
  k.coll = coll;
  k.count = bytes / (t == papcclFloat64 ? 8 : 4);
  k.dtype = t;
  k.op = op;
  k.configAlgo = papcclPapAlgoNone;
  k.batchOps = 1;
  k.batchColls = 1;
  return k;
}

papTestPathCall Grouped(papTestPathCall k, int ops, int colls) {
  k.grouped = 1;
  k.batchOps = ops;
  k.batchColls = colls;
  return k;
}

papTestPathCall Config(papTestPathCall k, papcclPapAlgo_t a) {
  k.configAlgo = a;
  return k;
}

struct Row {
  const char* what;
  papTestPathComm comm;
  papTestPathCall call;
  int path;  // papcclPath_t
  int commit;
  const char* why;  // "path: reason" as the statistics and the diagnosis print it
};

void Check(const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    char why[128] = "";
    int commit = -1;
    int path = papTestPathDecide(&r.comm, &r.call, &commit, why, sizeof(why));
    EXPECT_EQ(r.path, path) << r.what << ": " << why;
    EXPECT_EQ(r.commit, commit) << r.what << ": " << why;
    EXPECT_STREQ(r.why, why) << r.what;
  }
}

const char* const kSelector = "board: the selector chooses from the arrivals";
const char* const kFlat = "flat: allreduce <= PAPCCL_FLAT_MAX_BYTES alone on one host";
const char* const kHier =
    "hier: several hosts, blocking ungrouped sum/prod/min/max allreduce >= "
    "PAPCCL_HIER_MIN_BYTES";
const char* const kArena = "arena: device arenas: the op is in the arenas' collectives and sizes";

TEST(Path, AutomaticChoices) {
  papTestPathComm nonBlocking = TwoHosts();
  nonBlocking.blocking = 0;
  papTestPathComm one = OneHost();
  one.nranks = 1;
  Check({
      {"send", OneHost(), Call("send", 64), papcclPathP2p, 0, "p2p: send or receive, no arrival"},
      {"recv", TwoHosts(), Call("recv", 64), papcclPathP2p, 0, "p2p: send or receive, no arrival"},
      {"1 KiB allreduce", OneHost(), Call("allreduce", 1024), papcclPathFlat, 0, kFlat},
      {"4 KiB allreduce (the limit)", OneHost(), Call("allreduce", 4096), papcclPathFlat, 0, kFlat},
      {"4 KiB + 4 allreduce", OneHost(), Call("allreduce", 4100), papcclPathBoard, 1, kSelector},
      {"1 KiB avg (float: pre-multiplied)", OneHost(), Call("allreduce", 1024, papcclAvg),
       papcclPathFlat, 0, kFlat},
      {"1 KiB allgather", OneHost(), Call("allgather", 1024), papcclPathBoard, 1, kSelector},
      {"1 KiB broadcast", OneHost(), Call("broadcast", 1024), papcclPathBoard, 1, kSelector},
      {"alltoall", OneHost(), Call("alltoall", 1024), papcclPathLocal, 0,
       "local: no arrival-aware plan for this collective"},
      {"gather", TwoHosts(), Call("gather", 1024), papcclPathLocal, 0,
       "local: no arrival-aware plan for this collective"},
      {"count 0", OneHost(), Call("allreduce", 0), papcclPathLocal, 0, "local: count 0"},
      {"one rank", one, Call("allreduce", 1 << 20), papcclPathLocal, 0, "local: one rank"},
      {"2 hosts x 2, 1 MiB sum", TwoHosts(), Call("allreduce", 1 << 20), papcclPathHier, 0, kHier},
      {"2 hosts x 2, 128 KiB max (PAPCCL_HIER_MIN_BYTES)", TwoHosts(),
       Call("allreduce", 131072, papcclMax), papcclPathHier, 0, kHier},
      {"2 hosts x 2, 128 KiB - 4: one flat plan", TwoHosts(), Call("allreduce", 131068),
       papcclPathBoard, 2, "board: the selector, every PAPCCL_PAP_PROBE-th call (message board)"},
      {"2 hosts x 2, 64 KiB: one flat plan", TwoHosts(), Call("allreduce", 65536), papcclPathBoard,
       2, "board: the selector, every PAPCCL_PAP_PROBE-th call (message board)"},
      {"2 hosts x 2, 8 B max: one flat plan", TwoHosts(), Call("allreduce", 8, papcclMax),
       papcclPathBoard, 2, "board: the selector, every PAPCCL_PAP_PROBE-th call (message board)"},
      {"2 hosts x 2, avg", TwoHosts(), Call("allreduce", 1 << 20, papcclAvg), papcclPathBoard, 2,
       "board: the selector, every PAPCCL_PAP_PROBE-th call (message board)"},
      {"2 hosts x 2, non-blocking", nonBlocking, Call("allreduce", 1 << 20), papcclPathBoard, 2,
       "board: the selector, every PAPCCL_PAP_PROBE-th call (message board)"},
      {"2 hosts x 2, reduce", TwoHosts(), Call("reduce", 1 << 20), papcclPathBoard, 2,
       "board: the selector, every PAPCCL_PAP_PROBE-th call (message board)"},
      {"arenas, 1 MiB allreduce", Arenas(), Call("allreduce", 1 << 20), papcclPathArena, 1, kArena},
      {"arenas, 1 MiB reducescatter", Arenas(), Call("reducescatter", 1 << 20), papcclPathArena, 1,
       kArena},
      {"arenas, 1 KiB allreduce (below their minimum)", Arenas(), Call("allreduce", 1024),
       papcclPathFlat, 0, kFlat},
      {"arenas, 1 MiB int32 avg (divides after)", Arenas(),
       Call("allreduce", 1 << 20, papcclAvg, papcclInt32), papcclPathBoard, 1, kSelector},
      {"arenas, 1 MiB alltoall", Arenas(), Call("alltoall", 1 << 20), papcclPathLocal, 0,
       "local: no arrival-aware plan for this collective"},
  });
}

TEST(Path, Batches) {
  Check({
      {"grouped alone: flat", OneHost(), Grouped(Call("allreduce", 1024), 1, 1), papcclPathFlat, 0,
       kFlat},
      {"grouped with a send on its comm", OneHost(), Grouped(Call("allreduce", 1024), 2, 1),
       papcclPathBoard, 1, kSelector},
      {"grouped with another collective", OneHost(), Grouped(Call("allreduce", 1 << 20), 2, 2),
       papcclPathLocal, 0, "local: batch with other collectives or comms"},
      {"2 hosts x 2, grouped alone", TwoHosts(), Grouped(Call("allreduce", 1 << 20), 1, 1),
       papcclPathBoard, 2, "board: the selector, every PAPCCL_PAP_PROBE-th call (message board)"},
      {"arenas, grouped with another collective", Arenas(),
       Grouped(Call("allreduce", 1 << 20), 2, 2), papcclPathArena, 0, kArena},
  });
}

TEST(Path, ForcedAndConfigured) {
  Check({
      {"config ring, 1 KiB", OneHost(), Config(Call("allreduce", 1024), papcclPapAlgoRing),
       papcclPathLocal, 0, "local: collConfig algo (classic)"},
      {"config ac2s, 1 MiB", OneHost(), Config(Call("allreduce", 1 << 20), papcclPapAlgoAc2s),
       papcclPathBoard, 1, "board: collConfig algo"},
      {"config pap, broadcast", OneHost(), Config(Call("broadcast", 1024), papcclPapAlgoPap),
       papcclPathBoard, 1, "board: collConfig algo"},
      {"config chain, 2 hosts x 2: the hierarchy first", TwoHosts(),
       Config(Call("allreduce", 1 << 20), papcclPapAlgoChain), papcclPathHier, 0, kHier},
  });
  {
    ScopedEnv algo("PAPCCL_ALGO", "ring");
    Check({
        {"PAPCCL_ALGO=ring, 1 KiB", OneHost(), Call("allreduce", 1024), papcclPathLocal, 0,
         "local: forced by PAPCCL_ALGO (classic)"},
        {"PAPCCL_ALGO=ring, config small wins", OneHost(),
         Config(Call("allreduce", 1024), papcclPapAlgoSmall), papcclPathBoard, 1,
         "board: collConfig algo"},
    });
  }
  {
    ScopedEnv algo("PAPCCL_ALGO", "ac2s");
    Check({{"PAPCCL_ALGO=ac2s, message board", TwoHosts(), Call("reduce", 1 << 20), papcclPathBoard,
            1, "board: forced by PAPCCL_ALGO"}});
  }
  {
    ScopedEnv det("PAPCCL_DETERMINISTIC", "1");
    Check({
        {"deterministic 1 KiB allreduce: no flat, no hierarchy", OneHost(), Call("allreduce", 1024),
         papcclPathBoard, 1, "board: deterministic allreduce: committed early set"},
        {"deterministic, 2 hosts x 2", TwoHosts(), Call("allreduce", 1 << 20), papcclPathBoard, 1,
         "board: deterministic allreduce: committed early set"},
        {"deterministic reduce", OneHost(), Call("reduce", 1 << 20), papcclPathLocal, 0,
         "local: deterministic: fixed rank order"},
        {"deterministic allgather", OneHost(), Call("allgather", 1 << 20), papcclPathBoard, 1,
         kSelector},
    });
  }
  {
    ScopedEnv pap("PAPCCL_PAP", "0");
    Check({
        {"PAPCCL_PAP=0, 1 MiB", OneHost(), Call("allreduce", 1 << 20), papcclPathLocal, 0,
         "local: PAPCCL_PAP=0"},
        {"PAPCCL_PAP=0, 1 KiB: still flat", OneHost(), Call("allreduce", 1024), papcclPathFlat, 0,
         kFlat},
    });
  }
}

}  // namespace
