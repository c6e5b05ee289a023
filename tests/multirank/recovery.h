// SPDX-License-Identifier: Apache-2.0
// What the recovery tests (shrink, grow) share: checked allreduces, a comm's shape, and ids
// handed from one rank to processes beside it.
#ifndef PAPCCL_TESTS_MP_RECOVERY_H_
#define PAPCCL_TESTS_MP_RECOVERY_H_

#include <string>

#include "papccl.h"

namespace papt {

// count allreduces of rank+1+i on comm (rank r of n), each checked; sizes alternate between
// a flat-sized, a medium and a large vector.
void CheckedAllReduces(papcclComm_t comm, int r, int n, int count, const std::string& what);

// Rank and size of comm.
void ExpectShape(papcclComm_t comm, int rank, int n, const std::string& what);

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
