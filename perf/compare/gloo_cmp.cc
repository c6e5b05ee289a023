// SPDX-License-Identifier: Apache-2.0
// Gloo in the comparison loop: Gloo's own allreduce algorithms (ring, ring_chunked,
// halving_doubling, bcube; PAPCMP_GLOO_ALGO picks one), TCP on loopback, rendezvous through a
// file store (PAPCMP_GLOO_STORE, a fresh directory per run). Ranks from papcclrun's variables.
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include "../rankenv.h"
}
#include "bench_loop.h"

namespace {

struct Gloo {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::string algo;
  std::string name;
  std::unique_ptr<gloo::Algorithm> op;  // built per buffer and count (prepare)
  size_t count = 0;
};

int prepare(void* p, float* buf, size_t count) {
  Gloo* g = static_cast<Gloo*>(p);
  std::vector<float*> ptrs{buf};
  g->count = count;
  try {
    if (g->algo == "ring_chunked")
      g->op.reset(new gloo::AllreduceRingChunked<float>(g->ctx, ptrs, (int)count));
    else if (g->algo == "halving_doubling")
      g->op.reset(new gloo::AllreduceHalvingDoubling<float>(g->ctx, ptrs, (int)count));
    else if (g->algo == "bcube")
      g->op.reset(new gloo::AllreduceBcube<float>(g->ctx, ptrs, (int)count));
    else
      g->op.reset(new gloo::AllreduceRing<float>(g->ctx, ptrs, (int)count));
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_cmp: %s\n", e.what());
    return 1;
  }
  return 0;
}

int ar32(void* p, float* buf, size_t count) {
  Gloo* g = static_cast<Gloo*>(p);
  (void)buf;
  if (!g->op || count != g->count) return 1;
  try {
    g->op->run();
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_cmp: %s\n", e.what());
    return 1;
  }
  return 0;
}

int ar64(void* p, double* buf, size_t count, int op) {
  Gloo* g = static_cast<Gloo*>(p);
  const gloo::ReductionFunction<double>* fn = op == 0   ? gloo::ReductionFunction<double>::max
                                              : op == 1 ? gloo::ReductionFunction<double>::min
                                                        : gloo::ReductionFunction<double>::sum;
  try {
    std::vector<double*> ptrs{buf};
    gloo::AllreduceRing<double>(g->ctx, ptrs, (int)count, fn).run();
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_cmp: %s\n", e.what());
    return 1;
  }
  return 0;
}

int barrier(void* p) {
  Gloo* g = static_cast<Gloo*>(p);
  try {
    gloo::BarrierAllToAll(g->ctx).run();
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_cmp: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, n = 1, local = 0;
  if (papRankEnvGet(&rank, &n, &local) != 0) {
    fprintf(stderr, "gloo_cmp: start it with papcclrun (no rank variables found)\n");
    return 2;
  }
  const char* dir = getenv("PAPCMP_GLOO_STORE");
  if (dir == nullptr || *dir == '\0') {
    fprintf(stderr, "gloo_cmp: set PAPCMP_GLOO_STORE to a fresh directory shared by the ranks\n");
    return 2;
  }
  Gloo g;
  const char* a = getenv("PAPCMP_GLOO_ALGO");
  g.algo = a && *a ? a : "ring";
  g.name = "gloo-" + g.algo;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    g.ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
    g.ctx->connectFullMesh(store, dev);
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_cmp: rendezvous failed: %s\n", e.what());
    return 1;
  }
  cmpLib lib = {g.name.c_str(), rank, n, &g, ar32, ar64, barrier, prepare};
  return cmpRun(&lib, argc, argv);
}
