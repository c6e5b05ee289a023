// SPDX-License-Identifier: Apache-2.0
// What the recovery tests (shrink, grow) share: checked allreduces, a comm's shape, and ids
// handed from one rank to processes beside it.
#ifndef PAPCCL_TESTS_MP_RECOVERY_H_
#define PAPCCL_TESTS_MP_RECOVERY_H_

#include <cstddef>
#include <functional>
#include <string>

#include "papccl.h"

namespace papt {

// Allreduces of count floats on comm until one fails (a peer died), for at most limitS;
// returns how long the failing call took, its result in *res and its start in *startOut.
double CallUntilFailure(papcclComm_t comm, size_t count, double limitS, papcclResult_t* res,
                        double* startOut);

// Rank and size of comm.
void ExpectShape(papcclComm_t comm, int rank, int n, const std::string& what);

struct Rank;
// The loop of docs/FAULTS.md section 5, as processes: 4 ranks run checked allreduces, one is
// killed (SIGKILL), the survivors see it, shrink without it and grow back to 4 with a
// replacement that knows only the id one survivor hands it; twice, then checked allreduces
// again. The replacements are forked with the others at the start (no process forks once
// library threads run) and wait for their id. prepare runs first in every process (e.g. to
// enter its host). Prints each phase's time per survivor (test_grow.cc).
void RunGrowLoop(const std::string& what, const std::function<void(Rank&)>& prepare);

// Unique ids (and times) handed from a rank to the other ranks, threads or processes forked
// after it was made: a MAP_SHARED page. Slot k is written once.
class SharedIds {
 public:
  static constexpr int kSlots = 8;
  SharedIds();
  ~SharedIds();
  SharedIds(const SharedIds&) = delete;
  SharedIds& operator=(const SharedIds&) = delete;
  void Put(int slot, const papcclUniqueId& id);
  // Waits for slot (false after timeoutS).
  bool Get(int slot, papcclUniqueId* id, double timeoutS) const;

 private:
  void* page_;
};

}  // namespace papt

#endif  // PAPCCL_TESTS_MP_RECOVERY_H_
