// SPDX-License-Identifier: Apache-2.0
#include "tensors.hpp"

#include <c10/core/ScalarType.h>

namespace papccl_torch {

void call(papcclResult_t r, const char* what) {
  if (r != papcclSuccess) throw CallError(r, what);
}

namespace {
thread_local papcclStream_t tlsStream = nullptr;

// papccl's type of a real dtype it computes on; false for the others.
bool nativeType(at::ScalarType t, papcclDataType_t* out) {
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
    return true;  // 0 or 1
  case at::kInt:
    *out = papcclInt32;
    return true;
  case at::kLong:
    *out = papcclInt64;
    return true;
  case at::kUInt32:
    *out = papcclUint32;
    return true;
  case at::kUInt64:
    *out = papcclUint64;
    return true;
  case at::kFloat8_e4m3fn:
    *out = papcclFloat8e4m3;
    return true;
  case at::kFloat8_e5m2:
    *out = papcclFloat8e5m2;
    return true;
  default:
    return false;
  }
}

const char* kReducible =
    "float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2, int8, uint8, int32, "
    "int64, uint32, uint64, bool, and complex32/64/128 for SUM, AVG and PREMUL_SUM";
}  // namespace

papcclStream_t opStream() {
  return tlsStream;
}
void setOpStream(papcclStream_t s) {
  tlsStream = s;
}

void badArg(const Where& w, const std::string& what) {
  TORCH_CHECK(false, "papccl ", w.op, " on rank ", w.rank, ": ", what);
}

Wire moveWire(const at::Tensor& t) {
  papcclDataType_t d;
  if (t.is_complex() && nativeType(c10::toRealValueType(t.scalar_type()), &d))
    return {d, t.numel() * 2};
  if (nativeType(t.scalar_type(), &d)) return {d, t.numel()};
  return {papcclUint8, (int64_t)t.nbytes()};  // any other dtype travels as its bytes
}

Wire reduceWire(const at::Tensor& t) {
  papcclDataType_t d = papcclFloat32;
  if (t.is_complex()) {
    nativeType(c10::toRealValueType(t.scalar_type()), &d);
    return {d, t.numel() * 2};
  }
  nativeType(t.scalar_type(), &d);
  return {d, t.numel()};
}

void checkTensor(const Where& w, const at::Tensor& t, const char* what) {
  need(t.defined(), w, std::string(what) + " is undefined");
  need(t.layout() == at::kStrided, w,
       std::string(what) + " is sparse; papccl takes dense tensors only");
#if defined(PAPCCL_TORCH_CUDA)
  need(t.device().is_cpu() || t.device().is_cuda(), w,
       std::string(what) + " is on " + t.device().str() + "; papccl takes CPU and CUDA tensors");
#else
  need(t.device().is_cpu(), w,
       std::string(what) + " is on " + t.device().str() +
           "; this build of the papccl backend takes CPU tensors only (CUDA tensors need a "
           "build against a CUDA torch with the CUDA toolkit)");
#endif
}

void checkOne(const Where& w, const std::vector<at::Tensor>& ts, const char* what) {
  need(ts.size() == 1, w,
       std::string(what) + ": takes one tensor per process, got " + std::to_string(ts.size()));
  checkTensor(w, ts[0], what);
}

void checkSame(const Where& w, const at::Tensor& ref, const at::Tensor& t, const char* what) {
  checkTensor(w, t, what);
  need(t.scalar_type() == ref.scalar_type(), w,
       std::string(what) + " has dtype " + c10::toString(t.scalar_type()) + ", the first tensor " +
           c10::toString(ref.scalar_type()));
  need(t.device() == ref.device(), w,
       std::string(what) + " is on " + t.device().str() + ", the first tensor on " +
           ref.device().str() + " (one device per operation)");
}

void checkRoot(const Where& w, int64_t root, int size, const char* what) {
  need(root >= 0 && root < size, w,
       std::string(what) + " " + std::to_string(root) + " is out of range for a group of " +
           std::to_string(size));
}

Reduction reduction(const Where& w, const c10d::ReduceOp& rop, const at::Tensor& t) {
  Reduction r;
  r.kind = rop.op_;
  const at::ScalarType st = t.scalar_type();
  const bool isBool = st == at::kBool, isComplex = t.is_complex();
  const bool isInt = at::isIntegralType(st, /*includeBool=*/false);
  papcclDataType_t d;
  need(nativeType(isComplex ? c10::toRealValueType(st) : st, &d), w,
       std::string("tensor has dtype ") + c10::toString(st) + ", which papccl cannot reduce (" +
           kReducible + ")");
  const std::string dt = c10::toString(st);
  switch (rop.op_) {
  case c10d::ReduceOp::SUM:
    r.op = isBool ? papcclMax : papcclSum;  // logical or
    break;
  case c10d::ReduceOp::PRODUCT:
    need(!isComplex, w, "ReduceOp.PRODUCT is not defined for complex tensors (" + dt + ")");
    r.op = isBool ? papcclMin : papcclProd;  // logical and
    break;
  case c10d::ReduceOp::MIN:
  case c10d::ReduceOp::MAX:
    need(!isComplex, w, "ReduceOp.MIN and MAX are not defined for complex tensors (" + dt + ")");
    r.op = rop.op_ == c10d::ReduceOp::MIN ? papcclMin : papcclMax;
    break;
  case c10d::ReduceOp::AVG:
    need(!isBool, w, "ReduceOp.AVG is not defined for bool tensors");
    r.op = papcclAvg;
    break;
  case c10d::ReduceOp::BAND:
  case c10d::ReduceOp::BOR:
  case c10d::ReduceOp::BXOR:
    need(isInt || isBool, w, "bitwise reductions need an integer or bool tensor, got " + dt);
    r.bitwise = true;
    break;
  case c10d::ReduceOp::PREMUL_SUM: {
    need(!isBool, w, "ReduceOp.PREMUL_SUM is not defined for bool tensors");
    auto* sup = dynamic_cast<c10d::PreMulSumSupplement*>(rop.supplement_.get());
    need(sup != nullptr, w, "ReduceOp.PREMUL_SUM came without its factor");
    if (sup->tensor_factor.defined()) {
      need(sup->tensor_factor.numel() == 1 && !sup->tensor_factor.is_complex(), w,
           "PREMUL_SUM takes one real one-element factor tensor");
      r.factor = sup->tensor_factor.to(at::kCPU).item<double>();
    } else {
      r.factor = sup->double_factor;
    }
    r.premul = true;
    break;
  }
  default:
    badArg(w, "unsupported reduce op " + std::to_string(int(rop.op_)));
  }
  return r;
}

void withOp(const Reduction& red, const at::Tensor& like, papcclComm_t comm,
            const std::function<void(papcclRedOp_t)>& fn) {
  if (!red.premul) {
    fn(red.op);
    return;
  }
  at::ScalarType real =
      like.is_complex() ? c10::toRealValueType(like.scalar_type()) : like.scalar_type();
  at::Tensor scalar = at::scalar_tensor(red.factor, at::TensorOptions().dtype(real));
  papcclRedOp_t op;
  call(papcclRedOpCreatePreMulSum(&op, scalar.data_ptr(), reduceWire(like).type,
                                  papcclScalarHostImmediate, comm),
       "papcclRedOpCreatePreMulSum");
  try {
    fn(op);
  } catch (...) {
    papcclRedOpDestroy(op, comm);
    throw;
  }
  call(papcclRedOpDestroy(op, comm), "papcclRedOpDestroy");
}

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
  out.copy_(acc.view(out.sizes()));  // out may be strided (a user's tensor)
}

at::Tensor staged(const at::Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

void copyBack(const at::Tensor& user, const at::Tensor& buf) {
  if (!user.is_same(buf)) user.copy_(buf.view(user.sizes()));
}

void copyRows(const at::Tensor& flat, const std::vector<at::Tensor>& outs, int64_t n) {
  for (size_t r = 0; r < outs.size(); r++)
    outs[r].copy_(flat.narrow(0, (int64_t)r * n, n).view(outs[r].sizes()));
}

void allGather(papcclComm_t c, const at::Tensor& in, const at::Tensor& out) {
  Wire wi = moveWire(in);
  call(papcclAllGather(in.data_ptr(), out.data_ptr(), wi.count, wi.type, c, opStream()),
       "papcclAllGather");
}

void exchange(papcclComm_t c, int me, const std::vector<at::Tensor>& ins,
              const std::vector<at::Tensor>& outs) {
  outs[me].view(-1).copy_(ins[me].view(-1));
  call(papcclGroupStart(), "papcclGroupStart");
  papcclResult_t res = papcclSuccess;
  for (int p = 0; p < (int)ins.size() && res == papcclSuccess; p++) {
    if (p == me) continue;
    Wire wi = moveWire(ins[p]), wo = moveWire(outs[p]);
    if (wi.count) res = papcclSend(ins[p].data_ptr(), wi.count, wi.type, p, c, opStream());
    if (res == papcclSuccess && wo.count)
      res = papcclRecv(outs[p].data_ptr(), wo.count, wo.type, p, c, opStream());
  }
  papcclResult_t end = papcclGroupEnd();
  call(res, "papcclSend/papcclRecv");
  call(end, "papcclGroupEnd");
}

}  // namespace papccl_torch
