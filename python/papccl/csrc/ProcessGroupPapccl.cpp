// SPDX-License-Identifier: Apache-2.0
// The torch.distributed backend "papccl" (docs/PYTORCH.md): every c10d operation becomes a
// queued Op that one worker thread per group runs in the caller's order on papccl's public
// C API; a watchdog aborts the communicator when an operation outlives its timeout. This file
// holds the group's life: queue, worker, watchdog, abort, shutdown, split, shrink, telemetry.
#include "ProcessGroupPapccl.hpp"

#include <Python.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "tensors.hpp"

#if defined(PAPCCL_TORCH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace papccl_torch {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

// ---- Work -----------------------------------------------------------------------------------

WorkPapccl::WorkPapccl(int rank, c10d::OpType type, const char* name,
                       std::vector<at::Tensor> outputs, std::vector<c10::Device> devices,
                       uint64_t seq)
    : c10d::Work(rank, type),
      name_(name),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::move(devices))),
      seq_(seq) {}

std::vector<at::Tensor> WorkPapccl::result() {
  return outputs_;
}

int WorkPapccl::sourceRank() const {
  if (!source_) return c10d::Work::sourceRank();
  int src = source_->load(std::memory_order_acquire);
  TORCH_CHECK(src >= 0, "papccl recv on rank ", rank_,
              ": the source rank is known only once the receive is done (wait for it first)");
  return src;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkPapccl::getFuture() {
  return future_;
}

bool WorkPapccl::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    TORCH_CHECK(false, "papccl ", name_, " on rank ", rank_, ": wait timed out after ",
                timeout.count(), " ms (the operation goes on)");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void WorkPapccl::complete(std::exception_ptr exception) {
  // The future first, then the waiters: once wait() returns, the future is done, so a
  // then() added after wait() runs at once in the caller's thread (gloo's order; torchft's
  // DDP chains its callbacks so and breaks when one runs later in this worker).
  if (exception)
    future_->setError(exception);
  else
    future_->markCompleted(c10::IValue(outputs_));
  finish(exception);
}

// ---- The group ----------------------------------------------------------------------------

ProcessGroupPapccl::ProcessGroupPapccl(const std::string& uniqueId, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeoutMs_(timeout.count()) {
  TORCH_CHECK(uniqueId.size() == sizeof(papcclUniqueId), "papccl: the unique id has ",
              uniqueId.size(), " bytes, expected ", sizeof(papcclUniqueId));
  papcclUniqueId id;
  std::memcpy(id.internal, uniqueId.data(), sizeof(id.internal));
  // Bounded by PAPCCL_TIMEOUT_S, which papccl.torch sets from the first group's timeout.
  papcclResult_t r = papcclCommInitRank(&comm_, size, id, rank);
  TORCH_CHECK(r == papcclSuccess, "papccl: creating rank ", rank, " of a group of ", size,
              " failed: ", papcclGetErrorString(r), ": ", papcclGetLastError(nullptr));
  start();
}

ProcessGroupPapccl::ProcessGroupPapccl(papcclComm_t comm, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), comm_(comm), timeoutMs_(timeout.count()) {
  start();
}

void ProcessGroupPapccl::start() {
  worker_ = std::thread(&ProcessGroupPapccl::workerLoop, this);
  watchdog_ = std::thread(&ProcessGroupPapccl::watchdogLoop, this);
}

ProcessGroupPapccl::~ProcessGroupPapccl() {
  shutdown();
}

void ProcessGroupPapccl::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutDown_) return;  // destroy_process_group may call it, and then the destructor
    shutDown_ = true;
    stop_ = true;
  }
  workCv_.notify_all();
  watchCv_.notify_all();
  {
    // The worker may be completing a future whose Python callbacks need the GIL.
    PyThreadState* saved = nullptr;
    if (Py_IsInitialized() && PyGILState_Check()) saved = PyEval_SaveThread();
    if (worker_.joinable()) worker_.join();
    if (watchdog_.joinable()) watchdog_.join();
    if (saved) PyEval_RestoreThread(saved);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) {
    // Destroy is local; a communicator that failed is aborted instead (no flush).
    if (brokenWhy_.empty())
      papcclCommDestroy(comm_);
    else
      papcclCommAbort(comm_);
    aborted_ = true;
  }
  if (brokenWhy_.empty()) brokenWhy_ = "the group was shut down";
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupPapccl::getBackendOptions() {
  return c10::make_intrusive<Options>("papccl", timeout());
}

uint64_t ProcessGroupPapccl::getSequenceNumberForGroup() {
  return seq_.load();
}

void ProcessGroupPapccl::setTimeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) fail("set_timeout", "the timeout must be positive");
  timeoutMs_.store(timeout.count());
}

c10d::ErrorType ProcessGroupPapccl::getError() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void ProcessGroupPapccl::abort() {
  abortComm("abort() was called");
}

std::chrono::milliseconds ProcessGroupPapccl::opTimeout(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? timeout() : requested;
}

void ProcessGroupPapccl::fail(const char* op, const std::string& what) const {
  TORCH_CHECK(false, "papccl ", op, " on rank ", rank_, ": ", what);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::enqueue(c10d::OpType type, const char* name,
                                                           std::vector<at::Tensor> outputs,
                                                           std::function<void(papcclComm_t)> issue,
                                                           std::function<void()> finish,
                                                           bool collective,
                                                           std::chrono::milliseconds timeout) {
  c10::Device device(c10::kCPU);
  for (const auto& t : outputs)
    if (t.defined() && !t.device().is_cpu()) device = t.device();
  for (const auto& t : outputs)
    if (t.defined() && t.device() != device)
      fail(name, "tensors on several devices (" + t.device().str() + " and " + device.str() +
                     "); one operation takes tensors of one device");
  std::vector<c10::Device> devices;
  if (!device.is_cpu()) devices.push_back(device);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutDown_) fail(name, "the group was shut down (destroy_process_group)");
  }
  // c10d's sequence number counts the collectives, as NCCL's process group does: every op
  // but sends, receives and splits, whether or not papccl keeps an arrival record of it
  // (all-to-all runs as sends and receives, and counts).
  const bool counted = type != c10d::OpType::SEND && type != c10d::OpType::RECV &&
                       type != c10d::OpType::RECVANYSOURCE && type != c10d::OpType::UNKNOWN;
  uint64_t seq = counted ? ++seq_ : seq_.load();
  auto work = c10::make_intrusive<WorkPapccl>(rank_, type, name, outputs, std::move(devices), seq);
  Op op{work, std::move(issue), std::move(finish), collective};
  {
    std::lock_guard<std::mutex> lock(mu_);
    Batch b;
    b.device = device;
#if defined(PAPCCL_TORCH_CUDA)
    if (device.is_cuda()) {
      // The group's stream waits for what the caller queued on its current stream (the
      // inputs, the staged copies); the caching allocator keeps the outputs for it.
      auto it = streams_.find(device.index());
      if (it == streams_.end())
        it = streams_.emplace(device.index(), c10::cuda::getStreamFromPool(false, device.index()))
                 .first;
      at::cuda::CUDAEvent ready;
      ready.record(c10::cuda::getCurrentCUDAStream(device.index()));
      ready.block(it->second);
      for (const auto& t : outputs)
        if (t.defined() && t.numel())
          c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), it->second);
      b.stream = it->second;
    }
#endif
    if (coalescing_) {
      TORCH_CHECK(coalesced_.ops.empty() || coalesced_.device == device, "papccl ", name,
                  ": a coalesced batch must stay on one device (", coalesced_.device.str(), " and ",
                  device.str(), ")");
      coalesced_.device = device;
#if defined(PAPCCL_TORCH_CUDA)
      coalesced_.stream = b.stream;
#endif
      coalesced_.ops.push_back(std::move(op));
      coalesced_.timeout = std::max(coalesced_.timeout, timeout);
      return work;
    }
    b.ops.push_back(std::move(op));
    b.timeout = timeout;
    queue_.push_back(std::move(b));
  }
  workCv_.notify_one();
  return work;
}

void ProcessGroupPapccl::startCoalescing() {
  std::lock_guard<std::mutex> lock(mu_);
  if (coalescing_) fail("start_coalescing", "already coalescing (nested coalescing managers?)");
  coalescing_ = true;
  coalesced_ = Batch();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::queueCoalesced() {
  c10::intrusive_ptr<c10d::Work> last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!coalescing_) fail("end_coalescing", "no start_coalescing before it");
    coalescing_ = false;
    if (coalesced_.ops.empty()) return last;
    last = coalesced_.ops.back().work;
    queue_.push_back(std::move(coalesced_));
    coalesced_ = Batch();
  }
  workCv_.notify_one();
  return last;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::endCoalescing() {
  auto last = queueCoalesced();
  if (last) return last;
  auto none = c10::make_intrusive<WorkPapccl>(rank_, c10d::OpType::COALESCED, "coalesced",
                                              std::vector<at::Tensor>(), std::vector<c10::Device>(),
                                              seq_.load());
  none->complete(nullptr);
  return none;
}

// Runs one batch's papccl calls and finish steps on the worker. A failed papccl call sets
// res and what; any other exception lands in error.
void ProcessGroupPapccl::runBatch(Batch& batch, std::string& what, papcclResult_t& res,
                                  const char*& failedOp, std::exception_ptr& error) {
#if defined(PAPCCL_TORCH_CUDA)
  // The op's papccl calls, copies and folds go on the group's stream of its device.
  std::optional<c10::cuda::CUDAStreamGuard> guard;
  if (batch.stream) guard.emplace(*batch.stream);
  setOpStream(batch.stream ? (papcclStream_t)batch.stream->stream() : nullptr);
#endif
  try {
    if (batch.ops.size() == 1) {
      batch.ops[0].issue(comm_);
    } else {
      call(papcclGroupStart(), "papcclGroupStart");
      papcclResult_t first = papcclSuccess;
      std::string firstCall;
      for (auto& op : batch.ops) {
        try {
          op.issue(comm_);
        } catch (const CallError& e) {
          if (first == papcclSuccess) first = e.res, firstCall = e.what();
          failedOp = op.work->name();
        }
      }
      papcclResult_t end = papcclGroupEnd();
      if (first != papcclSuccess) throw CallError(first, firstCall);
      call(end, "papcclGroupEnd");
    }
    for (auto& op : batch.ops) {
      failedOp = op.work->name();
      if (op.finish) op.finish();
    }
#if defined(PAPCCL_TORCH_CUDA)
    if (batch.stream) {
      // The Work completes when the data is there: wait for the stream (the watchdog still
      // bounds a stuck operation: papccl's device path fails it on abort).
      at::cuda::CUDAEvent done;
      done.record(*batch.stream);
      done.synchronize();
    }
#endif
    if (batch.ops.size() == 1 && batch.ops[0].collective) recordArrival(failedOp);
  } catch (const CallError& e) {
    res = e.res;
    what = std::string(e.what()) + " returned " + papcclGetErrorString(e.res);
  } catch (...) {
    error = std::current_exception();
  }
  setOpStream(nullptr);
}

void ProcessGroupPapccl::workerLoop() {
  for (;;) {
    Batch batch;
    std::string broken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      workCv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      batch = std::move(queue_.front());
      queue_.pop_front();
      broken = brokenWhy_;
      if (broken.empty()) {
        running_ = true;
        runningTimeout_ = batch.timeout;
        runningName_ = batch.ops[0].work->name();
        deadline_ = Clock::now() + batch.timeout;
      }
    }
    watchCv_.notify_all();
    std::exception_ptr error;
    papcclResult_t res = papcclSuccess;
    std::string what;
    const char* failedOp = batch.ops[0].work->name();
    if (!broken.empty())
      what = "the group is unusable after an earlier failure: " + broken;
    else
      runBatch(batch, what, res, failedOp, error);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
      if (!what.empty() && broken.empty()) {
        if (aborted_) {
          what = brokenWhy_;  // the watchdog (or abort) cancelled the call
        } else {
          // Under mu_: the communicator cannot be aborted (freed) while we read it.
          what += std::string(": ") + papcclGetLastError(comm_);
        }
        if (!aborted_ && res != papcclInvalidArgument && brokenWhy_.empty()) {
          brokenWhy_ = std::string(failedOp) + " failed: " + what;
          error_ = res == papcclRemoteError ? c10d::ErrorType::REMOTE_ERROR
                                            : c10d::ErrorType::COMM_ERROR;
        }
      }
    }
    watchCv_.notify_all();
    if (!what.empty()) {
      std::ostringstream msg;
      msg << "papccl " << failedOp << " on rank " << rank_ << " (group of " << size_
          << "): " << what;
      error = std::make_exception_ptr(std::runtime_error(msg.str()));
    }
    for (auto& op : batch.ops)
      op.work->complete(error);
  }
}

void ProcessGroupPapccl::watchdogLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stop_ && !running_ && queue_.empty()) return;
    if (!running_ || aborted_) {
      watchCv_.wait(lock);
      continue;
    }
    auto deadline = deadline_;
    if (watchCv_.wait_until(lock, deadline) != std::cv_status::timeout) continue;
    if (!running_ || aborted_ || deadline_ != deadline) continue;
    if (shrinking_) {  // the shrink ends the running call (ABORT) or waits for it: look again
      deadline_ = Clock::now() + std::chrono::milliseconds(50);
      continue;
    }
    // The running batch outlived its timeout: abort the communicator (the call returns an
    // error in the worker), as NCCL's process group does.
    // What the rank waited for (the ranks that have not arrived, the peers its plan waits
    // on), read before the abort ends the wait.
    char state[1024] = "";
    papcclCommDumpState(comm_, state, sizeof(state));
    std::ostringstream why;
    why << runningName_ << " timed out after " << runningTimeout_.count()
        << " ms (the group's timeout); the communicator was aborted. State: " << state;
    brokenWhy_ = why.str();
    error_ = c10d::ErrorType::TIMEOUT;
    aborted_ = true;
    papcclCommAbort(comm_);
  }
}

void ProcessGroupPapccl::abortComm(const std::string& why) {
  std::unique_lock<std::mutex> lock(mu_);
  watchCv_.wait(lock, [&] { return !shrinking_; });
  if (aborted_) return;
  brokenWhy_ = "aborted: " + why;
  if (error_ == c10d::ErrorType::SUCCESS) error_ = c10d::ErrorType::COMM_ERROR;
  aborted_ = true;
  papcclCommAbort(comm_);
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupPapccl::shrink(
    const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<Options>& opts) {
  const bool abort = (shrinkFlags & PAPCCL_SHRINK_ABORT) != 0;
  if ((shrinkFlags & ~PAPCCL_SHRINK_ABORT) != 0)
    fail("shrink", "unknown shrink flags " + std::to_string(shrinkFlags) +
                       " (SHRINK_DEFAULT 0 or SHRINK_ABORT 1)");
  std::vector<int> exclude;
  for (int64_t r : ranksToExclude) {
    if (r < 0 || r >= size_)
      fail("shrink",
           "excluded rank " + std::to_string(r) + " is not in [0, " + std::to_string(size_) + ")");
    exclude.push_back((int)r);
  }
  const std::chrono::milliseconds newTimeout = opts ? opts->timeout : timeout();
  for (int r : exclude) {
    if (r < 0 || r >= size_)
      fail("shrink",
           "excluded rank " + std::to_string(r) + " is not in [0, " + std::to_string(size_) + ")");
    if (r == rank_)
      fail("shrink", "this rank is in the exclusion list (excluded ranks do not call shrink)");
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) fail("shrink", "the group's communicator was aborted: " + brokenWhy_);
    if (shrinking_) fail("shrink", "another shrink of this group is running");
    if (coalescing_) fail("shrink", "called while coalescing");
    if (abort) {
      // Nothing queued runs on this communicator any more; the running call ends when the
      // shrink revokes the communicator.
      brokenWhy_ = "the group was shrunk with abort: use the new group" +
                   (brokenWhy_.empty() ? std::string() : "; before that: " + brokenWhy_);
    } else {
      // A healthy group: its queued work goes first (every rank issues the same calls).
      watchCv_.wait(lock, [&] { return (queue_.empty() && !running_) || aborted_; });
      if (aborted_) fail("shrink", "the group's communicator was aborted: " + brokenWhy_);
    }
    shrinking_ = true;
  }
  papcclComm_t child = nullptr;
  papcclResult_t r =
      papcclCommShrink(comm_, const_cast<int*>(exclude.data()), (int)exclude.size(), &child,
                       nullptr, abort ? PAPCCL_SHRINK_ABORT : PAPCCL_SHRINK_DEFAULT);
  endReshape("shrink", r);
  int crank = -1, csize = -1;
  papcclCommUserRank(child, &crank);
  papcclCommCount(child, &csize);
  return c10::make_intrusive<ProcessGroupPapccl>(child, crank, csize, newTimeout);
}

void ProcessGroupPapccl::endReshape(const char* op, papcclResult_t r) {
  std::string why;
  if (r != papcclSuccess)
    why = std::string(papcclGetErrorString(r)) + ": " + papcclGetLastError(comm_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    shrinking_ = false;
  }
  watchCv_.notify_all();
  if (r != papcclSuccess) fail(op, why);
}

std::string ProcessGroupPapccl::growId() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) fail("grow_id", "the group's communicator was aborted: " + brokenWhy_);
  }
  papcclUniqueId id;
  papcclResult_t r = papcclCommGetUniqueId(comm_, &id);
  if (r != papcclSuccess)
    fail("grow_id", std::string(papcclGetErrorString(r)) + ": " + papcclGetLastError(comm_));
  return std::string(id.internal, sizeof(id.internal));
}

c10::intrusive_ptr<ProcessGroupPapccl> ProcessGroupPapccl::grow(int size, const std::string& uid,
                                                                std::chrono::milliseconds timeout) {
  papcclUniqueId id;
  if (!uid.empty()) {
    if (uid.size() != sizeof(id.internal))
      fail("grow", "the id has " + std::to_string(uid.size()) + " bytes, expected " +
                       std::to_string(sizeof(id.internal)));
    std::memcpy(id.internal, uid.data(), sizeof(id.internal));
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) fail("grow", "the group's communicator was aborted: " + brokenWhy_);
    if (shrinking_) fail("grow", "a shrink or grow of this group is running");
    if (coalescing_) fail("grow", "called while coalescing");
    // Its queued work goes first (every rank issues the same calls).
    watchCv_.wait(lock, [&] { return (queue_.empty() && !running_) || aborted_; });
    if (aborted_) fail("grow", "the group's communicator was aborted: " + brokenWhy_);
    shrinking_ = true;
  }
  papcclComm_t child = nullptr;
  papcclResult_t r = papcclCommGrow(comm_, size, uid.empty() ? nullptr : &id, -1, &child, nullptr);
  endReshape("grow", r);
  return c10::make_intrusive<ProcessGroupPapccl>(child, rank_, size, timeout);
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupPapccl::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  (void)store;  // papcclCommSplit needs no rendezvous: the parent communicator carries it
  auto mine = std::find(ranks.begin(), ranks.end(), rank_);
  for (int r : ranks)
    if (r < 0 || r >= size_)
      fail("split", "rank " + std::to_string(r) + " of the new group is not in [0, " +
                        std::to_string(size_) + ")");
  // Disjoint splits have distinct smallest ranks; the key keeps the caller's order.
  const int color =
      mine == ranks.end() ? PAPCCL_SPLIT_NOCOLOR : *std::min_element(ranks.begin(), ranks.end());
  const int key = mine == ranks.end() ? 0 : (int)(mine - ranks.begin());
  auto child = std::make_shared<papcclComm_t>(nullptr);
  // In order with this group's other operations, on its worker.
  auto work = enqueue(
      c10d::OpType::UNKNOWN, "split", {},
      [child, color, key](papcclComm_t c) {
        call(papcclCommSplit(c, color, key, child.get(), nullptr), "papcclCommSplit");
      },
      nullptr, false, timeout());
  work->wait(kNoTimeout);
  if (*child == nullptr) return nullptr;  // not a member of any new group
  int crank = -1, csize = -1;
  papcclCommUserRank(*child, &crank);
  papcclCommCount(*child, &csize);
  return c10::make_intrusive<ProcessGroupPapccl>(*child, crank, csize,
                                                 opts ? opts->timeout : timeout());
}

void ProcessGroupPapccl::recordArrival(const char* name) {
  papcclPapStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);  // not while the watchdog aborts the communicator
    if (aborted_ || papcclCommGetPapStats(comm_, &s) != papcclSuccess) return;
  }
  std::lock_guard<std::mutex> lock(statsMu_);
  if (s.ops == lastOps_) return;  // this op made no arrival record
  lastOps_ = s.ops;
  ArrivalRecord a;
  a.seq = s.lastSeq;
  a.op = name;
  a.algo = s.lastAlgoName;
  a.complete = s.lastComplete != 0;
  a.lateRank = s.lastLateRank;
  a.skewUs = s.lastSkewUs;
  a.tailUs = s.lastTailUs;
  a.timeInCollUs = s.lastTimeInCollUs;
  a.planWaitUs = s.lastPlanWaitUs;
  int n = std::min(s.nranks, PAPCCL_PAP_STATS_MAX_RANKS);
  a.order.assign(s.lastOrder, s.lastOrder + n);
  a.latenessUs.assign(s.lastLatenessUs, s.lastLatenessUs + n);
  history_.push_back(std::move(a));
  const size_t kKeep = 4096;
  while (history_.size() > kKeep)
    history_.pop_front();
}

papcclPapStats ProcessGroupPapccl::papStats() {
  papcclPapStats s;
  std::memset(&s, 0, sizeof(s));
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(!aborted_, "papccl pap_stats: the group's communicator was aborted: ", brokenWhy_);
  papcclResult_t r = papcclCommGetPapStats(comm_, &s);
  TORCH_CHECK(r == papcclSuccess, "papccl pap_stats: ", papcclGetErrorString(r));
  return s;
}

std::vector<ArrivalRecord> ProcessGroupPapccl::arrivalHistory(size_t last) {
  std::lock_guard<std::mutex> lock(statsMu_);
  size_t n = std::min(last, history_.size());
  return std::vector<ArrivalRecord>(history_.end() - (std::ptrdiff_t)n, history_.end());
}

}  // namespace papccl_torch
