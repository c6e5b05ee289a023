// SPDX-License-Identifier: Apache-2.0
// How the backend hands torch tensors to papccl's C API: argument checks whose errors name
// the op, the argument and the rank; a tensor's wire type (what papccl carries); reductions
// (ReduceOp -> papccl op, the bitwise ones folded locally); staging and copy-back helpers.
#pragma once

#include <papccl.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace papccl_torch {

// A failed papccl call, raised inside the worker and reported with the op's name.
struct CallError : std::runtime_error {
  papcclResult_t res;
  CallError(papcclResult_t r, const std::string& call) : std::runtime_error(call), res(r) {}
};

void call(papcclResult_t r, const char* what);

// The stream of the op the worker runs now (CUDA tensors), NULL for host buffers.
papcclStream_t opStream();
void setOpStream(papcclStream_t s);

// Where an argument check runs: its errors read "papccl OP on rank R: ...".
struct Where {
  const char* op;
  int rank;
};

// Throws c10::Error "papccl OP on rank R: what".
[[noreturn]] void badArg(const Where& w, const std::string& what);
inline void need(bool ok, const Where& w, const std::string& what) {
  if (!ok) badArg(w, what);
}

// What papccl carries for a tensor: a papccl type and a count. Data movement carries any
// dtype (as bytes where papccl has no type); a reduction needs a papccl type of the same
// arithmetic (complex as its real and imaginary parts).
struct Wire {
  papcclDataType_t type;
  int64_t count;
};
Wire moveWire(const at::Tensor& t);
Wire reduceWire(const at::Tensor& t);

// Every tensor an op touches: defined, dense, on a device this build takes.
void checkTensor(const Where& w, const at::Tensor& t, const char* what);
// Exactly one tensor in the list.
void checkOne(const Where& w, const std::vector<at::Tensor>& ts, const char* what);
// t is a valid tensor of ref's dtype and device.
void checkSame(const Where& w, const at::Tensor& ref, const at::Tensor& t, const char* what);
void checkRoot(const Where& w, int64_t root, int size, const char* what);

// A reduction as papccl runs it. Bitwise operations have no papccl counterpart (NCCL has
// none either): they gather every rank's input and fold it locally.
struct Reduction {
  c10d::ReduceOp::RedOpType kind;
  papcclRedOp_t op = papcclSum;
  bool bitwise = false;
  bool premul = false;
  double factor = 1.0;
};
Reduction reduction(const Where& w, const c10d::ReduceOp& rop, const at::Tensor& t);

// Runs fn(op) with red's papccl op, making and freeing a pre-multiplied sum around it.
void withOp(const Reduction& red, const at::Tensor& like, papcclComm_t comm,
            const std::function<void(papcclRedOp_t)>& fn);
// Folds the nranks rows of gathered (nranks x n) into out (n elements, any strides) with a
// bitwise op.
void bitwiseFold(c10d::ReduceOp::RedOpType kind, const at::Tensor& gathered, const at::Tensor& out,
                 int nranks);

// A contiguous buffer for a tensor: the tensor itself when it is contiguous, else a copy.
at::Tensor staged(const at::Tensor& t);
void copyBack(const at::Tensor& user, const at::Tensor& buf);
// Copies row r of flat (n elements each) into outs[r].
void copyRows(const at::Tensor& flat, const std::vector<at::Tensor>& outs, int64_t n);

// papcclAllGather of in into out (nranks x in), any dtype.
void allGather(papcclComm_t c, const at::Tensor& in, const at::Tensor& out);
// Sends ins[p] to every rank p and receives outs[p] from it (contiguous tensors, empty ones
// skipped) in one papccl group; this rank's own part is a copy.
void exchange(papcclComm_t c, int me, const std::vector<at::Tensor>& ins,
              const std::vector<at::Tensor>& outs);

}  // namespace papccl_torch
