// SPDX-License-Identifier: Apache-2.0
// The torch.distributed backend "papccl": a c10d::Backend (torch 2.x) over papccl's public C
// API. docs/PYTORCH.md describes the design; python/papccl/torch.py registers it.
#pragma once

#include <papccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
// CUDA tensors (PAPCCL_TORCH_CUDA, against a CUDA build of torch): each op runs on papccl's
// stream-ordered device path on a stream of the group's own, which waits for the caller's
// current stream; the Work completes once that stream has finished the op.
#if defined(PAPCCL_TORCH_CUDA)
#include <c10/cuda/CUDAStream.h>
#endif

namespace papccl_torch {

// One operation's completion: the Work torch hands back, its future (DDP and comm hooks
// chain on it) and the tensors that hold its result.
class WorkPapccl : public c10d::Work {
 public:
  WorkPapccl(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
             std::vector<c10::Device> devices, uint64_t seq);
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override {
    return seq_;
  }
  // Marks the work done (exception null) or failed; wakes waiters, completes the future.
  void complete(std::exception_ptr exception);
  const char* name() const {
    return name_;
  }
  // recv from any source: the sender's rank, filled in by the receive. sourceRank() throws
  // until the receive is done, and on any other op (as c10d's base does).
  void setSource(std::shared_ptr<std::atomic<int>> source) {
    source_ = std::move(source);
  }
  int sourceRank() const override;

 private:
  const char* name_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  uint64_t seq_;
  std::shared_ptr<std::atomic<int>> source_;
};

// A queued operation in two phases: issue calls papccl (inside a papccl group when the
// operation is part of a coalesced batch), finish runs after the data has moved (copies out
// of staging buffers, bitwise folds). Both throw on error.
struct Op {
  c10::intrusive_ptr<WorkPapccl> work;
  std::function<void(papcclComm_t)> issue;
  std::function<void()> finish;
  bool collective = true;  // has an arrival record (papcclCommGetPapStats)
};

// What the worker runs at once: one op, or the ops of a coalesced batch as one papccl group.
struct Batch {
  std::vector<Op> ops;
  std::chrono::milliseconds timeout{0};
  c10::Device device{c10::kCPU};  // every op of a batch is on one device
#if defined(PAPCCL_TORCH_CUDA)
  std::optional<c10::cuda::CUDAStream> stream;  // the group's stream on `device` (CUDA)
#endif
};

// One collective's arrival pattern as this rank saw it (papcclPapStats' "last" fields).
struct ArrivalRecord {
  uint64_t seq = 0;
  std::string op;
  std::string algo;
  bool complete = false;
  int lateRank = -1;
  double skewUs = 0, tailUs = 0, timeInCollUs = 0, planWaitUs = 0;
  std::vector<int> order;
  std::vector<double> latenessUs;
};

class ProcessGroupPapccl : public c10d::Backend {
 public:
  // uniqueId: papcclUniqueId's bytes, made by rank 0 and shared through the c10d store.
  ProcessGroupPapccl(const std::string& uniqueId, int rank, int size,
                     std::chrono::milliseconds timeout);
  // Adopts comm (a shrunk or split communicator) as rank `rank` of `size`.
  ProcessGroupPapccl(papcclComm_t comm, int rank, int size, std::chrono::milliseconds timeout);
  ~ProcessGroupPapccl() override;

  const std::string getBackendName() const override {
    return "papccl";
  }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  bool supportsCoalescing() const override {
    return true;
  }
  bool supportsSplitting() const override {
    return true;
  }
  bool supportsShrinking() const override {
    return true;
  }

  // Collectives (collectives.cpp).
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void startCoalescing() override;
  // One Work for the batch (its ops complete together); a completed one for an empty batch.
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // Life cycle (ProcessGroupPapccl.cpp).
  uint64_t getSequenceNumberForGroup() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  c10d::ErrorType getError() override;
  // Aborts the communicator now: queued and running operations fail, later ones too.
  void abort() override;
  // Runs what is queued, then frees the communicator; later operations fail. Idempotent.
  void shutdown() override;
  // papcclCommSplit (every rank of this group calls it): the ranks in `ranks` (ranks of this
  // group, in the new group's order) form a new group; others get null.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // papcclCommShrink: the ranks not in ranksToExclude, in their order, without a store.
  // c10d's SHRINK_ABORT flag: this group's running and queued operations end with an error
  // and it takes no more; else this group finishes its queued work first and stays usable.
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude,
                                           int shrinkFlags,
                                           const c10::intrusive_ptr<Options>& opts) override;

  // papcclCommGetUniqueId: the id of a grow of this group (its bytes), for this rank to hand
  // to the new processes.
  std::string growId();
  // papcclCommGrow on an existing rank: a group of `size` ranks, this group's first (in
  // their order) and new ones after them; uid: the id of growId on the grow's root, empty on
  // the other ranks. This group finishes its queued work first and stays usable.
  c10::intrusive_ptr<ProcessGroupPapccl> grow(int size, const std::string& uid,
                                              std::chrono::milliseconds timeout);

  // PAP telemetry: the cumulative statistics and the last `last` arrival records.
  papcclPapStats papStats();
  std::vector<ArrivalRecord> arrivalHistory(size_t last);
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeoutMs_.load());
  }
  void abortComm(const std::string& why);

 private:
  // Queues one op (or adds it to the coalesced batch); its Work. Every op but point to
  // point and split takes the next sequence number; `collective`: it has an arrival record.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name,
                                         std::vector<at::Tensor> outputs,
                                         std::function<void(papcclComm_t)> issue,
                                         std::function<void()> finish, bool collective,
                                         std::chrono::milliseconds timeout);
  void start();
  c10::intrusive_ptr<c10d::Work> queueCoalesced();
  void workerLoop();
  void runBatch(Batch& batch, std::string& what, papcclResult_t& res, const char*& failedOp,
                std::exception_ptr& error);
  void watchdogLoop();
  void recordArrival(const char* name);
  std::chrono::milliseconds opTimeout(std::chrono::milliseconds requested) const;
  [[noreturn]] void fail(const char* op, const std::string& what) const;
  // The end of a shrink or grow (r: its result): the watchdog may use comm_ again; a
  // failure raises, naming op and papccl's reason.
  void endReshape(const char* op, papcclResult_t r);

  papcclComm_t comm_ = nullptr;
  std::atomic<int64_t> timeoutMs_;
  std::atomic<uint64_t> seq_{0};  // collectives issued (c10d's sequence number)

  std::mutex mu_;
  std::condition_variable workCv_;  // the worker waits for a batch
  std::condition_variable watchCv_;  // the watchdog waits for a deadline
  std::deque<Batch> queue_;
  bool stop_ = false;
  bool shutDown_ = false;
  bool running_ = false;  // the worker is inside a batch
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds runningTimeout_{0};
  std::string runningName_;
  bool aborted_ = false;  // comm_ was aborted or destroyed (freed): nothing may touch it
  bool shrinking_ =
      false;  // a shrink or grow uses comm_ outside mu_: the watchdog must not free it
  c10d::ErrorType error_ = c10d::ErrorType::SUCCESS;
#if defined(PAPCCL_TORCH_CUDA)
  std::unordered_map<c10::DeviceIndex, c10::cuda::CUDAStream> streams_;  // per device, under mu_
#endif
  std::string brokenWhy_;  // non-empty: every later op fails with this
  // Coalescing (batch_isend_irecv, _coalescing_manager): ops collect here until endCoalescing.
  bool coalescing_ = false;
  Batch coalesced_;

  std::mutex statsMu_;
  std::deque<ArrivalRecord> history_;
  uint64_t lastOps_ = 0;  // papcclPapStats.ops when the last record was taken

  std::thread worker_;
  std::thread watchdog_;
};

}  // namespace papccl_torch
