// SPDX-License-Identifier: Apache-2.0
// Multi-rank test harness, one collective checked: guarded buffers, typed element access, and
// the runner that issues a case on one rank and verifies its result.
#include <cstring>
#include <vector>

#include "multirank/harness.h"

namespace papt {

// ---- Buffers ---------------------------------------------------------------------------------

Buf::Buf(size_t bytes, unsigned char fill) : v_(bytes + kGuard, fill), bytes_(bytes) {
  for (size_t i = 0; i < kGuard; i++)
    v_[bytes + i] = (unsigned char)(0xA5 ^ i);
}

bool Buf::GuardOk() const {
  for (size_t i = 0; i < kGuard; i++)
    if (v_[bytes_ + i] != (unsigned char)(0xA5 ^ i)) return false;
  return true;
}

void SetElem(void* buf, papcclDataType_t t, size_t i, uint64_t bits) {
  size_t s = TypeSize(t);
  memcpy((char*)buf + i * s, &bits, s);  // little endian
}

uint64_t GetElem(const void* buf, papcclDataType_t t, size_t i) {
  size_t s = TypeSize(t);
  uint64_t bits = 0;
  memcpy(&bits, (const char*)buf + i * s, s);
  return bits;
}

bool CheckElems(const void* buf, papcclDataType_t t, size_t count,
                const std::function<uint64_t(size_t)>& expected, const std::string& what) {
  size_t bad = 0;
  const size_t esz = TypeSize(t);
  const int hex = (int)(2 * esz);
  const unsigned char* p = (const unsigned char*)buf;
  for (size_t i = 0; i < count; i++) {
    uint64_t want = expected(i);
    uint64_t got;
    switch (esz) {
    case 1:
      got = p[i];
      break;
    case 2: {
      uint16_t v;
      memcpy(&v, p + 2 * i, 2);
      got = v;
      break;
    }
    case 4: {
      uint32_t v;
      memcpy(&v, p + 4 * i, 4);
      got = v;
      break;
    }
    default:
      memcpy(&got, p + 8 * i, 8);
      break;
    }
    if (want == got) continue;
    if (bad < 3) {
      char msg[160];
      snprintf(msg, sizeof(msg), "element %zu: expected 0x%0*llx (%g), got 0x%0*llx (%g)", i, hex,
               (unsigned long long)want, DecodeValue(t, want), hex, (unsigned long long)got,
               DecodeValue(t, got));
      ADD_FAILURE() << what << ": " << msg;
    }
    bad++;
  }
  if (bad > 3) ADD_FAILURE() << what << ": " << bad << " of " << count << " elements wrong";
  return bad == 0;
}

// ---- One collective, checked ----------------------------------------------------------------

namespace {

papcclRedOp_t BuiltinOp(Op o) {
  switch (o) {
  case Op::kSum:
    return papcclSum;
  case Op::kProd:
    return papcclProd;
  case Op::kMax:
    return papcclMax;
  case Op::kMin:
    return papcclMin;
  case Op::kAvg:
    return papcclAvg;
  case Op::kPreMulSum:
    break;
  }
  return papcclSum;
}

void FillInput(Buf& b, size_t offElems, const Case& c, int nranks, int r, size_t startIdx,
               size_t count) {
  for (size_t i = 0; i < count; i++)
    SetElem(b.data() + offElems * TypeSize(c.type), c.type, i,
            InputBits(c, nranks, r, startIdx + i));
}

}  // namespace

struct CaseRunner::Impl {
  Rank rk;
  Case c;
  int n, r, root;
  papcclDataType_t t;
  size_t esz, count;
  std::string what;
  bool ok = true;
  papcclRedOp_t op = papcclSum;
  bool created = false;
  bool issued = false;
  Buf send, recv;
  void* sb = nullptr;  // what is passed as sendbuff
  void* rb = nullptr;  // what is passed as recvbuff
  int peerNext = 0, peerPrev = 0;

  void Fail(const std::string& msg) {
    ADD_FAILURE() << what << ": " << msg;
    ok = false;
  }
  void ExpectOk(papcclResult_t res, const char* call) {
    if (res != papcclSuccess) {
      std::ostringstream s;
      s << call << " returned " << res << " (" << papcclGetErrorString(res)
        << "): " << papcclGetLastError(rk.comm);
      Fail(s.str());
    }
  }
  void Check(const void* buf, size_t cnt, const std::function<uint64_t(size_t)>& f,
             const char* name) {
    if (!CheckElems(buf, t, cnt, f, what + " " + name)) ok = false;
  }
  // count reduced elements starting at reference index first: bit-exact, except the
  // floating-point average over a rank count that is not a power of two (1/n is rounded).
  void CheckReduced(const void* buf, size_t first, size_t cnt) {
    const Case& cc = c;
    int nn = n;
    if (AvgIsApproximate(cc, nn)) {
      if (!CheckAvgApprox(buf, cc, nn, first, cnt, what + " (recvbuff)")) ok = false;
      return;
    }
    Check(
        buf, cnt, [&](size_t i) { return ReducedBits(cc, nn, first + i); }, "(recvbuff)");
  }
  // An out-of-place input must come back unchanged.
  void InputIntact(const Buf& b, size_t cnt) {
    int rr = r;
    const Case& cc = c;
    int nn = n;
    Check(
        b.data(), cnt, [&](size_t i) { return InputBits(cc, nn, rr, i); }, "(sendbuff)");
  }
  void Guards() {
    if (!send.GuardOk()) Fail("write past the end of sendbuff");
    if (!recv.GuardOk()) Fail("write past the end of recvbuff");
  }
};

CaseRunner::CaseRunner(const Rank& rk, const Case& c) : d_(new Impl) {
  Impl& d = *d_;
  d.rk = rk;
  d.c = c;
  d.n = rk.nranks;
  d.r = rk.rank;
  d.root = c.root % d.n;
  d.t = c.type;
  d.esz = TypeSize(c.type);
  d.count = c.count;
  std::ostringstream ws;
  ws << c.Describe() << " [" << ModeName(rk.mode) << " rank " << d.r << "/" << d.n << "]";
  d.what = ws.str();
  const int n = d.n, r = d.r, root = d.root;
  const size_t esz = d.esz, count = d.count;
  const size_t all = (size_t)n * count;

  if (CollReduces(c.coll)) {
    if (c.op == Op::kPreMulSum) {
      uint64_t scalar = PreMulScalarBits(d.t);
      papcclResult_t res =
          papcclRedOpCreatePreMulSum(&d.op, &scalar, d.t, papcclScalarHostImmediate, rk.comm);
      d.ExpectOk(res, "papcclRedOpCreatePreMulSum");
      d.created = res == papcclSuccess;
    } else {
      d.op = BuiltinOp(c.op);
    }
  }

  switch (c.coll) {
  case Coll::kAllReduce:
    d.send = Buf(count * esz);
    d.recv = Buf(count * esz);
    FillInput(d.send, 0, c, n, r, 0, count);
    d.sb = d.send.data();
    d.rb = c.inPlace ? d.send.data() : d.recv.data();
    break;
  case Coll::kBroadcast:
  case Coll::kBcast:
    d.send = Buf(count * esz);
    d.recv = Buf(count * esz);
    if (r == root) FillInput(d.send, 0, c, n, r, 0, count);
    d.sb = d.send.data();
    d.rb = c.inPlace || c.coll == Coll::kBcast ? d.send.data() : d.recv.data();
    break;
  case Coll::kReduce:
    d.send = Buf(count * esz);
    d.recv = Buf(r == root ? count * esz : 0);
    FillInput(d.send, 0, c, n, r, 0, count);
    d.sb = d.send.data();
    // recvbuff is only significant at the root: other ranks pass NULL out of place.
    d.rb = c.inPlace ? d.send.data() : (r == root ? d.recv.data() : nullptr);
    break;
  case Coll::kAllGather:
    d.send = Buf(count * esz);
    d.recv = Buf(all * esz);
    if (c.inPlace) {
      FillInput(d.recv, (size_t)r * count, c, n, r, 0, count);
      d.sb = d.recv.data() + (size_t)r * count * esz;
    } else {
      FillInput(d.send, 0, c, n, r, 0, count);
      d.sb = d.send.data();
    }
    d.rb = d.recv.data();
    break;
  case Coll::kReduceScatter:
    d.send = Buf(all * esz);
    d.recv = Buf(count * esz);
    FillInput(d.send, 0, c, n, r, 0, all);
    d.sb = d.send.data();
    d.rb = c.inPlace ? d.send.data() + (size_t)r * count * esz : d.recv.data();
    break;
  case Coll::kAlltoAll:
    d.send = Buf(all * esz);
    d.recv = Buf(all * esz);
    FillInput(d.send, 0, c, n, r, 0, all);
    d.sb = d.send.data();
    d.rb = c.inPlace ? d.send.data() : d.recv.data();
    break;
  case Coll::kGather:
    d.send = Buf(count * esz);
    d.recv = Buf(r == root ? all * esz : 0);
    if (c.inPlace && r == root) {
      FillInput(d.recv, (size_t)root * count, c, n, r, 0, count);
      d.sb = d.recv.data() + (size_t)root * count * esz;
    } else {
      FillInput(d.send, 0, c, n, r, 0, count);
      d.sb = d.send.data();
    }
    d.rb = r == root ? d.recv.data() : nullptr;  // only significant at the root
    break;
  case Coll::kScatter:
    d.send = Buf(r == root ? all * esz : 0);
    d.recv = Buf(count * esz);
    if (r == root) FillInput(d.send, 0, c, n, r, 0, all);
    d.sb = r == root ? d.send.data() : nullptr;  // only significant at the root
    d.rb = c.inPlace && r == root ? d.send.data() + (size_t)root * count * esz : d.recv.data();
    break;
  case Coll::kSendRecv:
    d.send = Buf(count * esz);
    d.recv = Buf(count * esz);
    FillInput(d.send, 0, c, n, r, 0, count);
    d.sb = d.send.data();
    d.rb = d.recv.data();
    d.peerNext = (r + 1) % n;
    d.peerPrev = (r - 1 + n) % n;
    break;
  }
}

CaseRunner::~CaseRunner() {
  if (d_->created) d_->ExpectOk(papcclRedOpDestroy(d_->op, d_->rk.comm), "papcclRedOpDestroy");
}

const std::string& CaseRunner::What() const {
  return d_->what;
}

bool CaseRunner::Issue() {
  Impl& d = *d_;
  if (CollReduces(d.c.coll) && d.c.op == Op::kPreMulSum && !d.created) return false;
  d.issued = true;
  const papcclComm_t comm = d.rk.comm;
  const papcclDataType_t t = d.t;
  const size_t count = d.count;
  switch (d.c.coll) {
  case Coll::kAllReduce:
    d.ExpectOk(papcclAllReduce(d.sb, d.rb, count, t, d.op, comm, nullptr), "papcclAllReduce");
    break;
  case Coll::kBroadcast:
    d.ExpectOk(papcclBroadcast(d.sb, d.rb, count, t, d.root, comm, nullptr), "papcclBroadcast");
    break;
  case Coll::kBcast:
    d.ExpectOk(papcclBcast(d.rb, count, t, d.root, comm, nullptr), "papcclBcast");
    break;
  case Coll::kReduce:
    d.ExpectOk(papcclReduce(d.sb, d.rb, count, t, d.op, d.root, comm, nullptr), "papcclReduce");
    break;
  case Coll::kAllGather:
    d.ExpectOk(papcclAllGather(d.sb, d.rb, count, t, comm, nullptr), "papcclAllGather");
    break;
  case Coll::kReduceScatter:
    d.ExpectOk(papcclReduceScatter(d.sb, d.rb, count, t, d.op, comm, nullptr),
               "papcclReduceScatter");
    break;
  case Coll::kAlltoAll:
    d.ExpectOk(papcclAlltoAll(d.sb, d.rb, count, t, comm, nullptr), "papcclAlltoAll");
    break;
  case Coll::kGather:
    d.ExpectOk(papcclGather(d.sb, d.rb, count, t, d.root, comm, nullptr), "papcclGather");
    break;
  case Coll::kScatter:
    d.ExpectOk(papcclScatter(d.sb, d.rb, count, t, d.root, comm, nullptr), "papcclScatter");
    break;
  case Coll::kSendRecv:
    d.ExpectOk(papcclGroupStart(), "papcclGroupStart");
    d.ExpectOk(papcclSend(d.sb, count, t, d.peerNext, comm, nullptr), "papcclSend");
    d.ExpectOk(papcclRecv(d.rb, count, t, d.peerPrev, comm, nullptr), "papcclRecv");
    d.ExpectOk(papcclGroupEnd(), "papcclGroupEnd");
    break;
  }
  return d.ok;
}

bool CaseRunner::Verify() {
  Impl& d = *d_;
  if (!d.issued) return false;
  const Case& c = d.c;
  const int n = d.n, r = d.r, root = d.root;
  const size_t count = d.count;
  const size_t all = (size_t)n * count;
  switch (c.coll) {
  case Coll::kAllReduce:
    d.CheckReduced(d.rb, 0, count);
    if (!c.inPlace) d.InputIntact(d.send, count);
    break;
  case Coll::kBroadcast:
  case Coll::kBcast:
    d.Check(
        d.rb, count, [&](size_t i) { return InputBits(c, n, root, i); }, "(recvbuff)");
    if (r == root && d.rb != d.send.data()) d.InputIntact(d.send, count);
    break;
  case Coll::kReduce:
    if (r == root) d.CheckReduced(d.rb, 0, count);
    if (!c.inPlace) d.InputIntact(d.send, count);
    break;
  case Coll::kAllGather:
    d.Check(
        d.rb, all, [&](size_t j) { return InputBits(c, n, (int)(j / count), j % count); },
        "(recvbuff)");
    if (!c.inPlace) d.InputIntact(d.send, count);
    break;
  case Coll::kReduceScatter:
    d.CheckReduced(d.rb, (size_t)r * count, count);
    if (!c.inPlace) d.InputIntact(d.send, all);
    break;
  case Coll::kAlltoAll:
    d.Check(
        d.rb, all,
        [&](size_t j) { return InputBits(c, n, (int)(j / count), (size_t)r * count + j % count); },
        "(recvbuff)");
    if (!c.inPlace) d.InputIntact(d.send, all);
    break;
  case Coll::kGather:
    if (r == root)
      d.Check(
          d.rb, all, [&](size_t j) { return InputBits(c, n, (int)(j / count), j % count); },
          "(recvbuff)");
    if (d.sb == d.send.data()) d.InputIntact(d.send, count);
    break;
  case Coll::kScatter:
    d.Check(
        d.rb, count, [&](size_t i) { return InputBits(c, n, root, (size_t)r * count + i); },
        "(recvbuff)");
    if (r == root && !c.inPlace) d.InputIntact(d.send, all);
    break;
  case Coll::kSendRecv: {
    int prev = d.peerPrev;
    d.Check(
        d.rb, count, [&](size_t i) { return InputBits(c, n, prev, i); }, "(recvbuff)");
    d.InputIntact(d.send, count);
    break;
  }
  }
  d.Guards();
  return d.ok;
}

bool RunCase(const Rank& rk, const Case& c) {
  CaseRunner run(rk, c);
  if (!run.Issue()) return false;
  return run.Verify();
}

}  // namespace papt
