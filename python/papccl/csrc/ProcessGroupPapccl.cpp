// SPDX-License-Identifier: Apache-2.0
// The torch.distributed backend "papccl" (docs/PYTORCH.md): every c10d operation becomes a
// queued Op that one worker thread per group runs in the caller's order on papccl's public
// C API; a watchdog aborts the communicator when an operation outlives its timeout.
#include "ProcessGroupPapccl.hpp"

#include <Python.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <torch/csrc/distributed/c10d/Utils.hpp>

#if defined(PAPCCL_TORCH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace papccl_torch {
namespace {

using Clock = std::chrono::steady_clock;

// A failed papccl call, raised inside the worker and reported with the op's name.
struct CallError : std::runtime_error {
  papcclResult_t res;
  CallError(papcclResult_t r, const std::string& call) : std::runtime_error(call), res(r) {}
};

void call(papcclResult_t r, const char* what) {
  if (r != papcclSuccess) throw CallError(r, what);
}

// The stream of the op the worker runs now: papccl's stream-ordered device path takes it for
// CUDA tensors; NULL (host buffers) otherwise. Set by the worker around each batch.
thread_local papcclStream_t tlsStream = nullptr;
papcclStream_t opStream() {
  return tlsStream;
}

const char* dtypeName(at::ScalarType t) {
  return c10::toString(t);
}

// papccl's datatype for a tensor's dtype; bool travels as uint8 (0 or 1).
bool papcclType(at::ScalarType t, papcclDataType_t* out) {
  switch (t) {
  case at::kFloat:
    *out = papcclFloat32;
    return true;
  case at::kDouble:
    *out = papcclFloat64;
    return true;
  case at::kHalf:
    *out = papcclFloat16;
    return true;
  case at::kBFloat16:
    *out = papcclBfloat16;
    return true;
  case at::kChar:
    *out = papcclInt8;
    return true;
  case at::kByte:
    *out = papcclUint8;
    return true;
  case at::kBool:
    *out = papcclUint8;
    return true;
  case at::kInt:
    *out = papcclInt32;
    return true;
  case at::kLong:
    *out = papcclInt64;
    return true;
  default:
    return false;
  }
}

papcclDataType_t dtypeOf(const at::Tensor& t) {
  papcclDataType_t d = papcclFloat32;
  papcclType(t.scalar_type(), &d);
  return d;
}

// Every tensor an op touches: dense, on the CPU, of a dtype papccl carries.
void checkTensor(const char* op, const at::Tensor& t, const char* what = "tensor") {
  TORCH_CHECK(t.defined(), "papccl ", op, ": ", what, " is undefined");
  TORCH_CHECK(t.layout() == at::kStrided, "papccl ", op, ": ", what,
              " is sparse; papccl supports dense tensors only");
  TORCH_CHECK(!t.is_complex(), "papccl ", op, ": ", what, " has complex dtype ",
              dtypeName(t.scalar_type()), "; papccl supports no complex type (use view_as_real)");
#if defined(PAPCCL_TORCH_CUDA)
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "papccl ", op, ": ", what, " is on ",
              t.device().str(), "; papccl takes CPU and CUDA tensors");
#else
  TORCH_CHECK(t.device().is_cpu(), "papccl ", op, ": ", what, " is on ", t.device().str(),
              "; this build of the papccl backend takes CPU tensors only (CUDA tensors need "
              "a build with PAPCCL_TORCH_CUDA against a CUDA torch)");
#endif
  papcclDataType_t d;
  TORCH_CHECK(papcclType(t.scalar_type(), &d), "papccl ", op, ": ", what, " has dtype ",
              dtypeName(t.scalar_type()),
              ", which papccl does not carry (float16, bfloat16, float32, float64, int8, "
              "uint8, int32, int64, bool)");
}

void checkOne(const char* op, const std::vector<at::Tensor>& ts) {
  TORCH_CHECK(ts.size() == 1, "papccl ", op, ": takes one tensor per process, got ", ts.size());
  checkTensor(op, ts[0]);
}

void checkSame(const char* op, const at::Tensor& ref, const at::Tensor& t, const char* what) {
  checkTensor(op, t, what);
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "papccl ", op, ": ", what, " has dtype ",
              dtypeName(t.scalar_type()), ", the input ", dtypeName(ref.scalar_type()));
  TORCH_CHECK(t.device() == ref.device(), "papccl ", op, ": ", what, " is on ", t.device().str(),
              ", the input on ", ref.device().str(), " (one device per operation)");
}

// A contiguous buffer for a tensor: the tensor itself when it is contiguous, else a copy.
at::Tensor staged(const at::Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

void copyBack(const at::Tensor& user, const at::Tensor& buf) {
  if (!user.is_same(buf)) user.copy_(buf.view(user.sizes()));
}

void checkRoot(const char* op, int64_t root, int size) {
  TORCH_CHECK(root >= 0 && root < size, "papccl ", op, ": root ", root,
              " is out of range for a group of ", size);
}

// A reduction as papccl runs it. Bitwise operations have no papccl counterpart (NCCL has
// none either): they gather every rank's input and fold it locally.
struct Reduction {
  c10d::ReduceOp::RedOpType kind;
  papcclRedOp_t op = papcclSum;
  bool bitwise = false;
  bool premul = false;
  double factor = 1.0;
};

Reduction reduction(const char* opname, const c10d::ReduceOp& rop, const at::Tensor& t) {
  Reduction r;
  r.kind = rop.op_;
  const bool isBool = t.scalar_type() == at::kBool;
  const bool isInt = at::isIntegralType(t.scalar_type(), /*includeBool=*/false);
  switch (rop.op_) {
  case c10d::ReduceOp::SUM:
    r.op = isBool ? papcclMax : papcclSum;
    break;  // logical or
  case c10d::ReduceOp::PRODUCT:
    r.op = isBool ? papcclMin : papcclProd;
    break;  // and
  case c10d::ReduceOp::MIN:
    r.op = papcclMin;
    break;
  case c10d::ReduceOp::MAX:
    r.op = papcclMax;
    break;
  case c10d::ReduceOp::AVG:
    TORCH_CHECK(!isBool, "papccl ", opname, ": ReduceOp.AVG is not defined for bool");
    r.op = papcclAvg;
    break;
  case c10d::ReduceOp::BAND:
  case c10d::ReduceOp::BOR:
  case c10d::ReduceOp::BXOR:
    TORCH_CHECK(isInt || isBool, "papccl ", opname,
                ": bitwise reductions need an integer or bool tensor, got ",
                dtypeName(t.scalar_type()));
    r.bitwise = true;
    break;
  case c10d::ReduceOp::PREMUL_SUM: {
    TORCH_CHECK(!isBool, "papccl ", opname, ": ReduceOp.PREMUL_SUM is not defined for bool");
    auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(rop.supplement_.get());
    TORCH_CHECK(sup != nullptr, "papccl ", opname, ": PREMUL_SUM without its factor");
    if (!sup->tensor_factors.empty()) {
      TORCH_CHECK(sup->tensor_factors.size() == 1 && sup->tensor_factors[0].numel() == 1, "papccl ",
                  opname, ": PREMUL_SUM takes one one-element factor tensor");
      r.factor = sup->tensor_factors[0].to(at::kCPU).item<double>();
    } else {
      r.factor = sup->double_factor;
    }
    r.premul = true;
    break;
  }
  default:
    TORCH_CHECK(false, "papccl ", opname, ": unsupported reduce op ", int(rop.op_));
  }
  return r;
}

// Folds the nranks rows of `gathered` (nranks x n) into `out` (n) with a bitwise op.
void bitwiseFold(c10d::ReduceOp::RedOpType kind, const at::Tensor& gathered, const at::Tensor& out,
                 int nranks) {
  at::Tensor acc = gathered[0].clone();
  for (int r = 1; r < nranks; r++) {
    if (kind == c10d::ReduceOp::BAND)
      acc.bitwise_and_(gathered[r]);
    else if (kind == c10d::ReduceOp::BOR)
      acc.bitwise_or_(gathered[r]);
    else
      acc.bitwise_xor_(gathered[r]);
  }
  out.view(-1).copy_(acc.view(-1));
}

// Runs an allreduce, reduce or reduce-scatter's papccl call with a reduction, making and
// freeing the pre-multiplied sum's op around it.
template <typename F>
void withOp(const Reduction& red, const at::Tensor& like, papcclComm_t comm, F&& fn) {
  if (!red.premul) {
    fn(red.op);
    return;
  }
  at::Tensor scalar = at::scalar_tensor(red.factor, at::TensorOptions().dtype(like.scalar_type()));
  papcclRedOp_t op;
  call(papcclRedOpCreatePreMulSum(&op, scalar.data_ptr(), dtypeOf(like), papcclScalarHostImmediate,
                                  comm),
       "papcclRedOpCreatePreMulSum");
  try {
    fn(op);
  } catch (...) {
    papcclRedOpDestroy(op, comm);
    throw;
  }
  call(papcclRedOpDestroy(op, comm), "papcclRedOpDestroy");
}

// The issue phase of an allgather of `in` into `out` (nranks x in): the list forms gather
// through one flat buffer, and the bitwise reductions gather before they fold.
std::function<void(papcclComm_t)> allGatherInto(const at::Tensor& in, const at::Tensor& out) {
  return [in, out](papcclComm_t c) {
    call(papcclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), dtypeOf(in), c, opStream()),
         "papcclAllGather");
  };
}

// Copies row r of `flat` (n elements each) into outs[r].
void copyRows(const at::Tensor& flat, const std::vector<at::Tensor>& outs, int64_t n) {
  for (size_t r = 0; r < outs.size(); r++)
    outs[r].copy_(flat.narrow(0, (int64_t)r * n, n).view(outs[r].sizes()));
}

// Sends ins[p] to every rank p and receives outs[p] from it (contiguous tensors, empty ones
// skipped) in one papccl group; this rank's own part is a copy.
void exchange(papcclComm_t c, int me, const std::vector<at::Tensor>& ins,
              const std::vector<at::Tensor>& outs) {
  outs[me].view(-1).copy_(ins[me].view(-1));
  call(papcclGroupStart(), "papcclGroupStart");
  papcclResult_t res = papcclSuccess;
  for (int p = 0; p < (int)ins.size() && res == papcclSuccess; p++) {
    if (p == me) continue;
    if (ins[p].numel())
      res = papcclSend(ins[p].data_ptr(), ins[p].numel(), dtypeOf(ins[p]), p, c, opStream());
    if (res == papcclSuccess && outs[p].numel())
      res = papcclRecv(outs[p].data_ptr(), outs[p].numel(), dtypeOf(outs[p]), p, c, opStream());
  }
  papcclResult_t end = papcclGroupEnd();
  call(res, "papcclSend/papcclRecv");
  call(end, "papcclGroupEnd");
}

}  // namespace

// ---- Work -----------------------------------------------------------------------------------

WorkPapccl::WorkPapccl(int rank, c10d::OpType type, const char* name,
                       std::vector<at::Tensor> outputs, std::vector<c10::Device> devices)
    : c10d::Work(rank, type),
      name_(name),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::move(devices))) {}

std::vector<at::Tensor> WorkPapccl::result() {
  return outputs_;
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
  finish(exception);
  if (exception)
    future_->setError(exception);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

// ---- The group ----------------------------------------------------------------------------

ProcessGroupPapccl::ProcessGroupPapccl(const std::string& uniqueId, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : PAPCCL_TORCH_BASE(rank, size), timeout_(timeout) {
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
    : PAPCCL_TORCH_BASE(rank, size), comm_(comm), timeout_(timeout) {
  start();
}

void ProcessGroupPapccl::start() {
  worker_ = std::thread(&ProcessGroupPapccl::workerLoop, this);
  watchdog_ = std::thread(&ProcessGroupPapccl::watchdogLoop, this);
}

ProcessGroupPapccl::~ProcessGroupPapccl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  workCv_.notify_all();
  watchCv_.notify_all();
  {
    // The worker may be completing a future whose Python callbacks need the GIL.
    PyThreadState* saved = nullptr;
    if (Py_IsInitialized() && PyGILState_Check()) saved = PyEval_SaveThread();
    worker_.join();
    watchdog_.join();
    if (saved) PyEval_RestoreThread(saved);
  }
  if (!aborted_) {
    // Destroy is local; a communicator that failed is aborted instead (no flush).
    if (brokenWhy_.empty())
      papcclCommDestroy(comm_);
    else
      papcclCommAbort(comm_);
  }
}

std::chrono::milliseconds ProcessGroupPapccl::opTimeout(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? timeout_ : requested;
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
    TORCH_CHECK(!t.defined() || t.device() == device, "papccl ", name,
                ": tensors on several devices (", t.device().str(), " and ", device.str(), ")");
  std::vector<c10::Device> devices;
  if (!device.is_cpu()) devices.push_back(device);
  auto work = c10::make_intrusive<WorkPapccl>(rank_, type, name, outputs, std::move(devices));
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
  TORCH_CHECK(!coalescing_, "papccl: startCoalescing while already coalescing");
  coalescing_ = true;
  coalesced_ = Batch();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::queueCoalesced() {
  c10::intrusive_ptr<c10d::Work> last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TORCH_CHECK(coalescing_, "papccl: endCoalescing without startCoalescing");
    coalescing_ = false;
    if (coalesced_.ops.empty()) return last;
    last = coalesced_.ops.back().work;
    queue_.push_back(std::move(coalesced_));
    coalesced_ = Batch();
  }
  workCv_.notify_one();
  return last;
}

#if defined(PAPCCL_TORCH_BACKEND_API)
c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::endCoalescing() {
  auto last = queueCoalesced();
  if (last) return last;
  auto none = c10::make_intrusive<WorkPapccl>(rank_, c10d::OpType::UNKNOWN, "coalesced",
                                              std::vector<at::Tensor>());
  none->complete(nullptr);
  return none;
}
#else
void ProcessGroupPapccl::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) {
  (void)reqs;  // the works of the batch were handed out as their ops were called
  queueCoalesced();
}
#endif

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
    if (!broken.empty()) {
      what = "the group is unusable after an earlier failure: " + broken;
    } else {
#if defined(PAPCCL_TORCH_CUDA)
      // The op's papccl calls, copies and folds go on the group's stream of its device.
      c10::optional<c10::cuda::CUDAStreamGuard> guard;
      if (batch.stream) guard.emplace(*batch.stream);
      tlsStream = batch.stream ? (papcclStream_t)batch.stream->stream() : nullptr;
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
          // The Work completes when the data is there: wait for the stream (the watchdog
          // still bounds a stuck operation: papccl's device path fails it on abort).
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
    }
#if defined(PAPCCL_TORCH_CUDA)
    tlsStream = nullptr;
#endif
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
    aborted_ = true;
    papcclCommAbort(comm_);
  }
}

void ProcessGroupPapccl::abortComm(const std::string& why) {
  std::unique_lock<std::mutex> lock(mu_);
  watchCv_.wait(lock, [&] { return !shrinking_; });
  if (aborted_) return;
  brokenWhy_ = "aborted: " + why;
  aborted_ = true;
  papcclCommAbort(comm_);
}

c10::intrusive_ptr<ProcessGroupPapccl> ProcessGroupPapccl::shrink(const std::vector<int>& exclude,
                                                                  bool abort) {
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
  std::string why;
  int crank = -1, csize = -1;
  if (r == papcclSuccess) {
    papcclCommUserRank(child, &crank);
    papcclCommCount(child, &csize);
  } else {
    why = std::string(papcclGetErrorString(r)) + ": " + papcclGetLastError(comm_);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    shrinking_ = false;
  }
  watchCv_.notify_all();
  if (r != papcclSuccess) fail("shrink", why);
  return c10::make_intrusive<ProcessGroupPapccl>(child, crank, csize, timeout_);
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

// ---- Collectives ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  checkOne("broadcast", tensors);
  checkRoot("broadcast", opts.rootRank, size_);
  TORCH_CHECK(opts.rootTensor == 0, "papccl broadcast: rootTensor must be 0");
  at::Tensor t = tensors[0], buf = staged(t);
  int root = (int)opts.rootRank;
  return enqueue(
      c10d::OpType::BROADCAST, "broadcast", tensors,
      [=](papcclComm_t c) {
        call(papcclBroadcast(buf.data_ptr(), buf.data_ptr(), buf.numel(), dtypeOf(buf), root, c,
                             opStream()),
             "papcclBroadcast");
      },
      [=] { copyBack(t, buf); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  checkOne("allreduce", tensors);
  at::Tensor t = tensors[0], buf = staged(t);
  Reduction red = reduction("allreduce", opts.reduceOp, t);
  int n = size_;
  if (red.bitwise) {
    at::Tensor gathered = at::empty({n, buf.numel()}, buf.options());
    return enqueue(
        c10d::OpType::ALLREDUCE, "allreduce", tensors, allGatherInto(buf, gathered),
        [=] { bitwiseFold(red.kind, gathered, t, n); }, true, opTimeout(opts.timeout));
  }
  return enqueue(
      c10d::OpType::ALLREDUCE, "allreduce", tensors,
      [=](papcclComm_t c) {
        withOp(red, buf, c, [&](papcclRedOp_t op) {
          call(papcclAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dtypeOf(buf), op, c,
                               opStream()),
               "papcclAllReduce");
        });
      },
      [=] { copyBack(t, buf); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "papccl allreduce_coalesced: no tensors");
  for (const auto& t : tensors)
    checkSame("allreduce_coalesced", tensors[0], t, "a tensor");
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors)
    flat.push_back(t.reshape(-1));
  at::Tensor buf = at::cat(flat);
  std::vector<at::Tensor> one{buf};
  Reduction red = reduction("allreduce_coalesced", opts.reduceOp, buf);
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
        allGatherInto(buf, gathered),
        [=] {
          bitwiseFold(red.kind, gathered, buf, n);
          scatterBack();
        },
        true, opTimeout(opts.timeout));
  }
  return enqueue(
      c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors,
      [=](papcclComm_t c) {
        withOp(red, buf, c, [&](papcclRedOp_t op) {
          call(papcclAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dtypeOf(buf), op, c,
                               opStream()),
               "papcclAllReduce");
        });
      },
      scatterBack, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  checkOne("reduce", tensors);
  checkRoot("reduce", opts.rootRank, size_);
  TORCH_CHECK(opts.rootTensor == 0, "papccl reduce: rootTensor must be 0");
  at::Tensor t = tensors[0], buf = staged(t);
  Reduction red = reduction("reduce", opts.reduceOp, t);
  int root = (int)opts.rootRank, n = size_;
  bool isRoot = rank_ == root;
  if (red.bitwise) {
    at::Tensor gathered = at::empty({n, buf.numel()}, buf.options());
    return enqueue(
        c10d::OpType::REDUCE, "reduce", tensors, allGatherInto(buf, gathered),
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
          call(papcclReduce(buf.data_ptr(), out.data_ptr(), buf.numel(), dtypeOf(buf), op, root, c,
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
  checkOne("allgather", inputs);
  TORCH_CHECK(outputs.size() == 1, "papccl allgather: takes one output list, got ", outputs.size());
  TORCH_CHECK((int)outputs[0].size() == size_, "papccl allgather: the output list has ",
              outputs[0].size(), " tensors, the group ", size_, " ranks");
  at::Tensor in = staged(inputs[0]);
  for (const auto& o : outputs[0]) {
    checkSame("allgather", in, o, "an output tensor");
    TORCH_CHECK(o.numel() == in.numel(), "papccl allgather: an output tensor has ", o.numel(),
                " elements, the input ", in.numel());
  }
  at::Tensor flat = at::empty({(int64_t)size_ * in.numel()}, in.options());
  std::vector<at::Tensor> outs = outputs[0];
  int64_t n = in.numel();
  return enqueue(
      c10d::OpType::ALLGATHER, "allgather", outs, allGatherInto(in, flat),
      [=] { copyRows(flat, outs, n); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  checkTensor("_allgather_base", input, "input");
  checkSame("_allgather_base", input, output, "output");
  TORCH_CHECK(output.numel() == (int64_t)size_ * input.numel(),
              "papccl _allgather_base: output has ", output.numel(), " elements, expected ", size_,
              " x ", input.numel());
  at::Tensor in = staged(input), out = staged(output), user = output;
  return enqueue(
      c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output}, allGatherInto(in, out),
      [=] { copyBack(user, out); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  checkOne("gather", inputs);
  checkRoot("gather", opts.rootRank, size_);
  int root = (int)opts.rootRank;
  bool isRoot = rank_ == root;
  at::Tensor in = staged(inputs[0]);
  std::vector<at::Tensor> outs;
  if (isRoot) {
    TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_,
                "papccl gather: the root needs one output list of ", size_, " tensors");
    outs = outputs[0];
    for (const auto& o : outs) {
      checkSame("gather", in, o, "an output tensor");
      TORCH_CHECK(o.numel() == in.numel(), "papccl gather: an output tensor has ", o.numel(),
                  " elements, the input ", in.numel());
    }
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "papccl gather: only the root passes output tensors");
  }
  int64_t n = in.numel();
  at::Tensor flat = isRoot ? at::empty({(int64_t)size_ * n}, in.options()) : at::empty_like(in);
  return enqueue(
      c10d::OpType::GATHER, "gather", outs,
      [=](papcclComm_t c) {
        call(papcclGather(in.data_ptr(), flat.data_ptr(), n, dtypeOf(in), root, c, opStream()),
             "papcclGather");
      },
      [=] { copyRows(flat, outs, n); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  checkOne("scatter", outputs);
  checkRoot("scatter", opts.rootRank, size_);
  int root = (int)opts.rootRank;
  bool isRoot = rank_ == root;
  at::Tensor user = outputs[0], out = staged(user);
  int64_t n = out.numel();
  at::Tensor flat;
  if (isRoot) {
    TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
                "papccl scatter: the root needs one input list of ", size_, " tensors");
    std::vector<at::Tensor> parts;
    for (const auto& i : inputs[0]) {
      checkSame("scatter", out, i, "an input tensor");
      TORCH_CHECK(i.numel() == n, "papccl scatter: an input tensor has ", i.numel(),
                  " elements, the output ", n);
      parts.push_back(i.reshape(-1));
    }
    flat = at::cat(parts);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "papccl scatter: only the root passes input tensors");
    flat = out;  // not read on other ranks
  }
  return enqueue(
      c10d::OpType::SCATTER, "scatter", outputs,
      [=](papcclComm_t c) {
        call(papcclScatter(flat.data_ptr(), out.data_ptr(), n, dtypeOf(out), root, c, opStream()),
             "papcclScatter");
      },
      [=] { copyBack(user, out); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  checkOne("reduce_scatter", outputs);
  TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_,
              "papccl reduce_scatter: needs one input list of ", size_, " tensors");
  at::Tensor user = outputs[0];
  std::vector<at::Tensor> parts;
  for (const auto& i : inputs[0]) {
    checkSame("reduce_scatter", user, i, "an input tensor");
    TORCH_CHECK(i.numel() == user.numel(), "papccl reduce_scatter: an input tensor has ", i.numel(),
                " elements, the output ", user.numel());
    parts.push_back(i.reshape(-1));
  }
  at::Tensor flat = at::cat(parts);
  return _reduce_scatter_base(user, flat, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkTensor("reduce_scatter", output, "output");
  checkSame("reduce_scatter", output, input, "input");
  TORCH_CHECK(input.numel() == (int64_t)size_ * output.numel(), "papccl reduce_scatter: input has ",
              input.numel(), " elements, expected ", size_, " x ", output.numel());
  at::Tensor in = staged(input), user = output, out = staged(output);
  Reduction red = reduction("reduce_scatter", opts.reduceOp, output);
  int n = size_, me = rank_;
  int64_t cnt = out.numel();
  if (red.bitwise) {
    at::Tensor gathered = at::empty({n, in.numel()}, in.options());
    return enqueue(
        c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter", {output}, allGatherInto(in, gathered),
        [=] { bitwiseFold(red.kind, gathered.narrow(1, (int64_t)me * cnt, cnt), user, n); }, true,
        opTimeout(opts.timeout));
  }
  return enqueue(
      c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter", {output},
      [=](papcclComm_t c) {
        withOp(red, in, c, [&](papcclRedOp_t op) {
          call(papcclReduceScatter(in.data_ptr(), out.data_ptr(), cnt, dtypeOf(in), op, c,
                                   opStream()),
               "papcclReduceScatter");
        });
      },
      [=] { copyBack(user, out); }, true, opTimeout(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) {
  checkTensor("alltoall_base", input, "input");
  checkSame("alltoall_base", input, output, "output");
  at::Tensor in = staged(input), user = output, out = staged(output);
  int n = size_;
  if (outputSplits.empty() && inputSplits.empty()) {
    TORCH_CHECK(in.numel() == out.numel() && in.numel() % n == 0,
                "papccl alltoall_base: input and output need the same size, a multiple of ", n,
                " (got ", in.numel(), " and ", out.numel(), ")");
    int64_t cnt = in.numel() / n;
    return enqueue(
        c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output},
        [=](papcclComm_t c) {
          call(papcclAlltoAll(in.data_ptr(), out.data_ptr(), cnt, dtypeOf(in), c, opStream()),
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
  TORCH_CHECK(sendLen[me] == recvLen[me], "papccl alltoall_base: this rank sends itself ",
              sendLen[me], " elements but expects ", recvLen[me]);
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
  int n = size_, me = rank_;
  TORCH_CHECK((int)inputs.size() == n && (int)outputs.size() == n, "papccl alltoall: needs ", n,
              " input and ", n, " output tensors, got ", inputs.size(), " and ", outputs.size());
  for (int p = 0; p < n; p++) {
    checkSame("alltoall", inputs[0], inputs[p], "an input tensor");
    checkSame("alltoall", inputs[0], outputs[p], "an output tensor");
  }
  TORCH_CHECK(inputs[me].numel() == outputs[me].numel(), "papccl alltoall: this rank sends itself ",
              inputs[me].numel(), " elements but expects ", outputs[me].numel());
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
  checkOne("send", tensors);
  checkRoot("send", dst, size_);
  TORCH_CHECK(dst != rank_, "papccl send: rank ", rank_, " cannot send to itself");
  at::Tensor buf = staged(tensors[0]);
  return enqueue(
      c10d::OpType::SEND, "send", tensors,
      [=](papcclComm_t c) {
        call(papcclSend(buf.data_ptr(), buf.numel(), dtypeOf(buf), dst, c, opStream()),
             "papcclSend");
      },
      nullptr, false, timeout_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::recv(std::vector<at::Tensor>& tensors, int src,
                                                        int tag) {
  (void)tag;
  checkOne("recv", tensors);
  checkRoot("recv", src, size_);
  TORCH_CHECK(src != rank_, "papccl recv: rank ", rank_, " cannot receive from itself");
  at::Tensor t = tensors[0], buf = staged(t);
  return enqueue(
      c10d::OpType::RECV, "recv", tensors,
      [=](papcclComm_t c) {
        call(papcclRecv(buf.data_ptr(), buf.numel(), dtypeOf(buf), src, c, opStream()),
             "papcclRecv");
      },
      [=] { copyBack(t, buf); }, false, timeout_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPapccl::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  (void)tensors;
  (void)tag;
  fail("recv",
       "receiving from any source is not supported (papccl, as NCCL, matches each "
       "receive with one named peer); pass src");
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
