// SPDX-License-Identifier: Apache-2.0
// The backend's collectives and point-to-point operations: each checks its arguments (errors
// name the op, the argument and the rank), stages non-contiguous tensors, and queues an Op
// whose issue step calls papccl and whose finish step copies results back.
#include <algorithm>
#include <utility>

#include <torch/csrc/distributed/c10d/Utils.hpp>

#include "ProcessGroupPapccl.hpp"
#include "tensors.hpp"

namespace papccl_torch {
namespace {

// The issue step of a reduction into `out` (allreduce: in == out), bitwise ones excluded.
std::function<void(papcclComm_t)> reduceInto(const Reduction& red, at::Tensor in, at::Tensor out) {
  return [=](papcclComm_t c) {
    withOp(red, in, c, [&](papcclRedOp_t op) {
      Wire w = reduceWire(in);
      call(papcclAllReduce(in.data_ptr(), out.data_ptr(), w.count, w.type, op, c, opStream()),
           "papcclAllReduce");
    });
  };
}

std::vector<at::Tensor> flatParts(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> parts;
  for (const auto& t : ts)
    parts.push_back(t.reshape(-1));
  return parts;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  Where w{"broadcast", rank_};
  checkOne(w, tensors, "tensor");
  checkRoot(w, opts.rootRank, size_, "root");
  need(opts.rootTensor == 0, w, "rootTensor must be 0");
  at::Tensor t = tensors[0], buf = staged(t);
  int root = (int)opts.rootRank;
  return enqueue(
      c10d::OpType::BROADCAST, "broadcast", tensors,
      [=](papcclComm_t c) {
        Wire wb = moveWire(buf);
        call(
            papcclBroadcast(buf.data_ptr(), buf.data_ptr(), wb.count, wb.type, root, c, opStream()),
            "papcclBroadcast");
      },
      [=] { copyBack(t, buf); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  Where w{"allreduce", rank_};
  checkOne(w, tensors, "tensor");
  at::Tensor t = tensors[0], buf = staged(t);
  Reduction red = reduction(w, opts.reduceOp, t);
  int n = size_;
  if (red.bitwise) {
    at::Tensor gathered = at::empty({n, buf.numel()}, buf.options());
    return enqueue(
        c10d::OpType::ALLREDUCE, "allreduce", tensors,
        [=](papcclComm_t c) { allGather(c, buf, gathered); },
        [=] { bitwiseFold(red.kind, gathered, t, n); }, true, opTimeout(opts.timeout));
  }
  return enqueue(
      c10d::OpType::ALLREDUCE, "allreduce", tensors, reduceInto(red, buf, buf),
      [=] { copyBack(t, buf); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Where w{"allreduce_coalesced", rank_};
  need(!tensors.empty(), w, "no tensors");
  for (const auto& t : tensors)
    checkSame(w, tensors[0], t, "a tensor");
  at::Tensor buf = at::cat(flatParts(tensors));
  Reduction red = reduction(w, opts.reduceOp, buf);
  std::vector<at::Tensor> users = tensors;
  auto scatterBack = [users, buf] {
    int64_t off = 0;
    for (const auto& t : users) {
      t.copy_(buf.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  };
  int n = size_;
  if (red.bitwise) {
    at::Tensor gathered = at::empty({n, buf.numel()}, buf.options());
    return enqueue(
        c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors,
        [=](papcclComm_t c) { allGather(c, buf, gathered); },
        [=] {
          bitwiseFold(red.kind, gathered, buf, n);
          scatterBack();
        },
        true, opTimeout(opts.timeout));
  }
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors,
                 reduceInto(red, buf, buf), scatterBack, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  Where w{"reduce", rank_};
  checkOne(w, tensors, "tensor");
  checkRoot(w, opts.rootRank, size_, "root");
  need(opts.rootTensor == 0, w, "rootTensor must be 0");
  at::Tensor t = tensors[0], buf = staged(t);
  Reduction red = reduction(w, opts.reduceOp, t);
  int root = (int)opts.rootRank, n = size_;
  bool isRoot = rank_ == root;
  if (red.bitwise) {
    at::Tensor gathered = at::empty({n, buf.numel()}, buf.options());
    return enqueue(
        c10d::OpType::REDUCE, "reduce", tensors,
        [=](papcclComm_t c) { allGather(c, buf, gathered); },
        [=] {
          if (isRoot) bitwiseFold(red.kind, gathered, t, n);
        },
        true, opTimeout(opts.timeout));
  }
  // Only the root's tensor receives the result; the others keep their input.
  at::Tensor out = isRoot ? buf : at::empty_like(buf);
  return enqueue(
      c10d::OpType::REDUCE, "reduce", tensors,
      [=](papcclComm_t c) {
        withOp(red, buf, c, [&](papcclRedOp_t op) {
          Wire wb = reduceWire(buf);
          call(papcclReduce(buf.data_ptr(), out.data_ptr(), wb.count, wb.type, op, root, c,
                            opStream()),
               "papcclReduce");
        });
      },
      [=] {
        if (isRoot) copyBack(t, buf);
      },
      true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Where w{"allgather", rank_};
  checkOne(w, inputs, "input");
  need(outputs.size() == 1, w, "takes one output list, got " + std::to_string(outputs.size()));
  need((int)outputs[0].size() == size_, w,
       "the output list has " + std::to_string(outputs[0].size()) + " tensors, the group " +
           std::to_string(size_) + " ranks");
  at::Tensor in = staged(inputs[0]);
  for (const auto& o : outputs[0]) {
    checkSame(w, in, o, "an output tensor");
    need(o.numel() == in.numel(), w,
         "an output tensor has " + std::to_string(o.numel()) + " elements, the input " +
             std::to_string(in.numel()));
  }
  at::Tensor flat = at::empty({(int64_t)size_ * in.numel()}, in.options());
  std::vector<at::Tensor> outs = outputs[0];
  int64_t n = in.numel();
  return enqueue(
      c10d::OpType::ALLGATHER, "allgather", outs, [=](papcclComm_t c) { allGather(c, in, flat); },
      [=] { copyRows(flat, outs, n); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outs{output}, ins{input};
  return allgather_into_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Where w{outputs.size() == 1 ? "allgather_into_tensor" : "allgather_into_tensor_coalesced", rank_};
  need(!inputs.empty() && inputs.size() == outputs.size(), w,
       "needs as many outputs as inputs, at least one (got " + std::to_string(outputs.size()) +
           " and " + std::to_string(inputs.size()) + ")");
  std::vector<at::Tensor> ins, outs, users = outputs;
  for (size_t i = 0; i < inputs.size(); i++) {
    checkTensor(w, inputs[i], "input");
    checkSame(w, inputs[i], outputs[i], "output");
    need(outputs[i].numel() == (int64_t)size_ * inputs[i].numel(), w,
         "output " + std::to_string(i) + " has " + std::to_string(outputs[i].numel()) +
             " elements, expected " + std::to_string(size_) + " x " +
             std::to_string(inputs[i].numel()));
    ins.push_back(staged(inputs[i]));
    outs.push_back(staged(outputs[i]));
  }
  return enqueue(
      outputs.size() == 1 ? c10d::OpType::_ALLGATHER_BASE : c10d::OpType::COALESCED, w.op, outputs,
      [=](papcclComm_t c) {
        if (ins.size() == 1) return allGather(c, ins[0], outs[0]);
        call(papcclGroupStart(), "papcclGroupStart");
        try {
          for (size_t i = 0; i < ins.size(); i++)
            allGather(c, ins[i], outs[i]);
        } catch (...) {
          papcclGroupEnd();
          throw;
        }
        call(papcclGroupEnd(), "papcclGroupEnd");
      },
      [=] {
        for (size_t i = 0; i < users.size(); i++)
          copyBack(users[i], outs[i]);
      },
      true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Where w{"allgather_coalesced", rank_};
  // outputs[r][i]: rank r's input i, as gloo's and torch's documentation have it.
  need(!inputs.empty(), w, "needs at least one input tensor");
  need((int)outputs.size() == size_, w,
       "needs one output list per rank (got " + std::to_string(outputs.size()) +
           " lists, the group has " + std::to_string(size_) + " ranks)");
  for (int r = 0; r < size_; r++)
    need(outputs[r].size() == inputs.size(), w,
         "output list " + std::to_string(r) + " has " + std::to_string(outputs[r].size()) +
             " tensors, one per input needs " + std::to_string(inputs.size()));
  // One flat gather of every input's bytes (inputs may differ in dtype and size), then each
  // rank's part is split back into its output list.
  std::vector<at::Tensor> bytes;
  int64_t per = 0;
  for (size_t i = 0; i < inputs.size(); i++) {
    checkTensor(w, inputs[i], "an input tensor");
    for (int r = 0; r < size_; r++) {
      const at::Tensor& o = outputs[r][i];
      checkSame(w, inputs[i], o, "an output tensor");
      need(o.numel() == inputs[i].numel(), w,
           "output " + std::to_string(i) + " of rank " + std::to_string(r) + "'s list has " +
               std::to_string(o.numel()) + " elements, its input " +
               std::to_string(inputs[i].numel()));
    }
    bytes.push_back(staged(inputs[i]).view(-1).view(at::kByte));
    per += (int64_t)inputs[i].nbytes();
  }
  at::Tensor in = at::cat(bytes);
  at::Tensor flat = at::empty({(int64_t)size_ * per}, in.options());
  std::vector<std::vector<at::Tensor>> outs = outputs;
  std::vector<at::Tensor> flatOuts;
  for (const auto& l : outputs)
    flatOuts.insert(flatOuts.end(), l.begin(), l.end());
  int n = size_;
  return enqueue(
      c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", flatOuts,
      [=](papcclComm_t c) { allGather(c, in, flat); },
      [=] {
        for (int r = 0; r < n; r++) {
          int64_t off = (int64_t)r * per;
          for (const at::Tensor& o : outs[r]) {
            int64_t nb = (int64_t)o.nbytes();
            at::Tensor part = flat.narrow(0, off, nb);
            // The bytes land in a contiguous tensor of the output's dtype (the output
            // itself unless it is strided).
            at::Tensor dst =
                o.is_contiguous() ? o : at::empty_like(o, at::MemoryFormat::Contiguous);
            dst.view(-1).view(at::kByte).copy_(part);
            copyBack(o, dst);
            off += nb;
          }
        }
      },
      true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  Where w{"gather", rank_};
  checkOne(w, inputs, "input");
  checkRoot(w, opts.rootRank, size_, "root");
  int root = (int)opts.rootRank;
  bool isRoot = rank_ == root;
  at::Tensor in = staged(inputs[0]);
  std::vector<at::Tensor> outs;
  if (isRoot) {
    need(outputs.size() == 1 && (int)outputs[0].size() == size_, w,
         "the root needs one output list of " + std::to_string(size_) + " tensors");
    outs = outputs[0];
    for (const auto& o : outs) {
      checkSame(w, in, o, "an output tensor");
      need(o.numel() == in.numel(), w,
           "an output tensor has " + std::to_string(o.numel()) + " elements, the input " +
               std::to_string(in.numel()));
    }
  } else {
    need(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), w,
         "only the root passes output tensors");
  }
  int64_t n = in.numel();
  at::Tensor flat = isRoot ? at::empty({(int64_t)size_ * n}, in.options()) : at::empty_like(in);
  return enqueue(
      c10d::OpType::GATHER, "gather", outs,
      [=](papcclComm_t c) {
        Wire wi = moveWire(in);
        call(papcclGather(in.data_ptr(), flat.data_ptr(), wi.count, wi.type, root, c, opStream()),
             "papcclGather");
      },
      [=] { copyRows(flat, outs, n); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  Where w{"scatter", rank_};
  checkOne(w, outputs, "output");
  checkRoot(w, opts.rootRank, size_, "root");
  int root = (int)opts.rootRank;
  bool isRoot = rank_ == root;
  at::Tensor user = outputs[0], out = staged(user);
  int64_t n = out.numel();
  at::Tensor flat;
  if (isRoot) {
    need(inputs.size() == 1 && (int)inputs[0].size() == size_, w,
         "the root needs one input list of " + std::to_string(size_) + " tensors");
    for (const auto& i : inputs[0]) {
      checkSame(w, out, i, "an input tensor");
      need(i.numel() == n, w,
           "an input tensor has " + std::to_string(i.numel()) + " elements, the output " +
               std::to_string(n));
    }
    flat = at::cat(flatParts(inputs[0]));
  } else {
    need(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), w,
         "only the root passes input tensors");
    flat = out;  // not read on other ranks
  }
  return enqueue(
      c10d::OpType::SCATTER, "scatter", outputs,
      [=](papcclComm_t c) {
        Wire wo = moveWire(out);
        call(papcclScatter(flat.data_ptr(), out.data_ptr(), wo.count, wo.type, root, c, opStream()),
             "papcclScatter");
      },
      [=] { copyBack(user, out); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Where w{"reduce_scatter", rank_};
  checkOne(w, outputs, "output");
  need(inputs.size() == 1 && (int)inputs[0].size() == size_, w,
       "needs one input list of " + std::to_string(size_) + " tensors");
  at::Tensor user = outputs[0];
  for (const auto& i : inputs[0]) {
    checkSame(w, user, i, "an input tensor");
    need(i.numel() == user.numel(), w,
         "an input tensor has " + std::to_string(i.numel()) + " elements, the output " +
             std::to_string(user.numel()));
  }
  at::Tensor flat = at::cat(flatParts(inputs[0]));
  return _reduce_scatter_base(user, flat, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outs{output}, ins{input};
  return reduce_scatter_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Where w{outputs.size() == 1 ? "reduce_scatter" : "reduce_scatter_tensor_coalesced", rank_};
  need(!inputs.empty() && inputs.size() == outputs.size(), w,
       "needs as many outputs as inputs, at least one (got " + std::to_string(outputs.size()) +
           " and " + std::to_string(inputs.size()) + ")");
  std::vector<at::Tensor> ins, outs, users = outputs;
  for (size_t i = 0; i < inputs.size(); i++) {
    checkTensor(w, outputs[i], "output");
    checkSame(w, outputs[i], inputs[i], "input");
    need(inputs[i].numel() == (int64_t)size_ * outputs[i].numel(), w,
         "input " + std::to_string(i) + " has " + std::to_string(inputs[i].numel()) +
             " elements, expected " + std::to_string(size_) + " x " +
             std::to_string(outputs[i].numel()));
    ins.push_back(staged(inputs[i]));
    outs.push_back(staged(outputs[i]));
  }
  // Each pair may have its own dtype: the op must be valid for each (a pre-multiplied sum
  // is made in each one's dtype).
  Reduction red = reduction(w, opts.reduceOp, outputs[0]);
  for (size_t i = 1; i < outputs.size(); i++)
    reduction(w, opts.reduceOp, outputs[i]);
  int n = size_, me = rank_;
  c10d::OpType type =
      outputs.size() == 1 ? c10d::OpType::_REDUCE_SCATTER_BASE : c10d::OpType::COALESCED;
  if (red.bitwise) {
    std::vector<at::Tensor> gathered;
    for (const auto& in : ins)
      gathered.push_back(at::empty({n, in.numel()}, in.options()));
    return enqueue(
        type, w.op, outputs,
        [=](papcclComm_t c) {
          for (size_t i = 0; i < ins.size(); i++)
            allGather(c, ins[i], gathered[i]);
        },
        [=] {
          for (size_t i = 0; i < users.size(); i++) {
            int64_t cnt = users[i].numel();
            bitwiseFold(red.kind, gathered[i].narrow(1, (int64_t)me * cnt, cnt), users[i], n);
          }
        },
        true, opTimeout(opts.timeout));
  }
  return enqueue(
      type, w.op, outputs,
      [=](papcclComm_t c) {
        auto one = [&](size_t i) {
          // papccl reads a pre-multiplied sum's factor when the call is queued: the op may go
          // before the group ends.
          withOp(red, ins[i], c, [&](papcclRedOp_t op) {
            Wire wo = reduceWire(outs[i]);
            call(papcclReduceScatter(ins[i].data_ptr(), outs[i].data_ptr(), wo.count, wo.type, op,
                                     c, opStream()),
                 "papcclReduceScatter");
          });
        };
        if (ins.size() == 1) return one(0);
        call(papcclGroupStart(), "papcclGroupStart");
        try {
          for (size_t i = 0; i < ins.size(); i++)
            one(i);
        } catch (...) {
          papcclGroupEnd();
          throw;
        }
        call(papcclGroupEnd(), "papcclGroupEnd");
      },
      [=] {
        for (size_t i = 0; i < users.size(); i++)
          copyBack(users[i], outs[i]);
      },
      true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) {
  Where w{"alltoall_base", rank_};
  checkTensor(w, input, "input");
  checkSame(w, input, output, "output");
  at::Tensor in = staged(input), user = output, out = staged(output);
  int n = size_;
  if (outputSplits.empty() && inputSplits.empty()) {
    need(in.numel() == out.numel() && in.numel() % n == 0, w,
         "input and output need the same size, a multiple of " + std::to_string(n) + " (got " +
             std::to_string(in.numel()) + " and " + std::to_string(out.numel()) + ")");
    return enqueue(
        c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output},
        [=](papcclComm_t c) {
          Wire wi = moveWire(in);
          call(papcclAlltoAll(in.data_ptr(), out.data_ptr(), wi.count / n, wi.type, c, opStream()),
               "papcclAlltoAll");
        },
        [=] { copyBack(user, out); }, true, opTimeout(opts.timeout));
  }
  c10d::checkSplitSizes(inputSplits, in, n);
  c10d::checkSplitSizes(outputSplits, out, n);
  std::vector<size_t> sendLen(n), sendOff(n), recvLen(n), recvOff(n);
  c10d::computeLengthsAndOffsets(inputSplits, in, &sendLen, &sendOff);
  c10d::computeLengthsAndOffsets(outputSplits, out, &recvLen, &recvOff);
  int me = rank_;
  need(sendLen[me] == recvLen[me], w,
       "this rank sends itself " + std::to_string(sendLen[me]) + " elements but expects " +
           std::to_string(recvLen[me]));
  std::vector<at::Tensor> ins, outs;  // each peer's part: contiguous views of the buffers
  for (int p = 0; p < n; p++) {
    ins.push_back(in.view(-1).narrow(0, (int64_t)sendOff[p], (int64_t)sendLen[p]));
    outs.push_back(out.view(-1).narrow(0, (int64_t)recvOff[p], (int64_t)recvLen[p]));
  }
  return enqueue(
      c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output},
      [=](papcclComm_t c) { exchange(c, me, ins, outs); }, [=] { copyBack(user, out); }, false,
      opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  Where w{"alltoall", rank_};
  int n = size_, me = rank_;
  need((int)inputs.size() == n && (int)outputs.size() == n, w,
       "needs " + std::to_string(n) + " input and " + std::to_string(n) + " output tensors, got " +
           std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  for (int p = 0; p < n; p++) {
    checkSame(w, inputs[0], inputs[p], "an input tensor");
    checkSame(w, inputs[0], outputs[p], "an output tensor");
  }
  need(inputs[me].numel() == outputs[me].numel(), w,
       "this rank sends itself " + std::to_string(inputs[me].numel()) + " elements but expects " +
           std::to_string(outputs[me].numel()));
  std::vector<at::Tensor> ins, outs, users = outputs;
  for (int p = 0; p < n; p++) {
    ins.push_back(staged(inputs[p]));
    outs.push_back(staged(outputs[p]));
  }
  return enqueue(
      c10d::OpType::ALLTOALL, "alltoall", outputs,
      [=](papcclComm_t c) { exchange(c, me, ins, outs); },
      [=] {
        for (int p = 0; p < n; p++)
          copyBack(users[p], outs[p]);
      },
      false, opTimeout(opts.timeout));
}

// ---- Point to point -------------------------------------------------------------------------
// As NCCL's: a send completes when its receiver has taken it; sends and receives run in the
// order they were called, with the collectives. batch_isend_irecv runs its operations as one
// papccl group, which completes them together whatever their order.

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::send(std::vector<at::Tensor>& tensors, int dst,
                                                        int tag) {
  (void)tag;  // papccl matches in order per peer, as NCCL; tags are not carried
  Where w{"send", rank_};
  checkOne(w, tensors, "tensor");
  checkRoot(w, dst, size_, "destination rank");
  need(dst != rank_, w, "a rank cannot send to itself");
  at::Tensor buf = staged(tensors[0]);
  return enqueue(
      c10d::OpType::SEND, "send", tensors,
      [=](papcclComm_t c) {
        Wire wb = moveWire(buf);
        call(papcclSend(buf.data_ptr(), wb.count, wb.type, dst, c, opStream()), "papcclSend");
      },
      nullptr, false, timeout());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::recv(std::vector<at::Tensor>& tensors, int src,
                                                        int tag) {
  (void)tag;
  Where w{"recv", rank_};
  checkOne(w, tensors, "tensor");
  checkRoot(w, src, size_, "source rank");
  need(src != rank_, w, "a rank cannot receive from itself");
  at::Tensor t = tensors[0], buf = staged(t);
  return enqueue(
      c10d::OpType::RECV, "recv", tensors,
      [=](papcclComm_t c) {
        Wire wb = moveWire(buf);
        call(papcclRecv(buf.data_ptr(), wb.count, wb.type, src, c, opStream()), "papcclRecv");
      },
      [=] { copyBack(t, buf); }, false, timeout());
}

// recv(src=None): papcclRecvAny takes the message of whichever peer sent first (per peer in
// order, round robin among the peers whose message is there) into host memory; a CUDA
// tensor is received into a host tensor and copied after. The Work's sourceRank() names the
// sender once the receive is done.
c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  (void)tag;
  Where w{"recv", rank_};
  checkOne(w, tensors, "tensor");
  need(size_ > 1, w, "a group of one rank has no peer to receive from");
  {
    std::lock_guard<std::mutex> lock(mu_);
    need(!coalescing_, w,
         "a receive from any source (src=None) cannot be part of a coalesced batch "
         "(batch_isend_irecv needs each peer)");
  }
  at::Tensor t = tensors[0];
  at::Tensor buf = t.is_cpu() ? staged(t) : at::empty(t.sizes(), t.options().device(at::kCPU));
  auto source = std::make_shared<std::atomic<int>>(-1);
  auto work = enqueue(
      c10d::OpType::RECVANYSOURCE, "recv", tensors,
      [=](papcclComm_t c) {
        Wire wb = moveWire(buf);
        int peer = -1;
        call(papcclRecvAny(buf.data_ptr(), wb.count, wb.type, &peer, c, nullptr), "papcclRecvAny");
        source->store(peer, std::memory_order_release);
      },
      [=] { copyBack(t, buf); }, false, timeout());
  c10::static_intrusive_pointer_cast<WorkPapccl>(work)->setSource(source);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::barrier(const c10d::BarrierOptions& opts) {
  // A one-byte allreduce: it completes on every rank only after every rank has entered it,
  // and after every operation queued before it.
  at::Tensor b = at::zeros({1}, at::TensorOptions().dtype(at::kByte));
  return enqueue(
      c10d::OpType::BARRIER, "barrier", {},
      [=](papcclComm_t c) {
        call(papcclAllReduce(b.data_ptr(), b.data_ptr(), 1, papcclUint8, papcclSum, c, nullptr),
             "papcclAllReduce");
      },
      nullptr, true, opTimeout(opts.timeout));
}

}  // namespace papccl_torch
