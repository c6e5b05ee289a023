/* SPDX-License-Identifier: Apache-2.0 */
/* Flat small collectives (docs/PAP-ENGINE.md section 8): on one host, an allreduce up to
 * PAPCCL_FLAT_MAX_BYTES needs no plan, no board and no messages. Each rank owns two lines in
 * its shared flat area (the transport maps every rank's area into every rank); a line is a
 * header (sequence number, arrival stamp, call signature) and the input. A rank copies its
 * input into the line of this op's parity, publishes the sequence number, rings the
 * doorbells of sleeping peers, waits until every peer's line holds the same number, and
 * reduces all the lines itself in rank order: every rank gets the same bits, and the last
 * rank to arrive does one write of its input and one read of each input: the least any
 * plan can leave it.
 *
 * Reuse: the line of flat op s is written again by flat op s + 2, after this rank saw every
 * peer at flat op s + 1, which each peer entered only after it had read every line of op s.
 * A line names its collective by the comm's collective number, so a peer that runs another
 * collective in its place is seen (docs/PAP-ENGINE.md section 11). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "algo.h"
#include "arrival_int.h"
#include "check.h"
#include "comm.h"
#include "futex.h"
#include "kernels.h"
#include "log.h"
#include "param.h"
#include "transport.h"
#include "wait.h"

/* A line: this header, then the input right behind it (up to 40 bytes share its cache
 * line), 64-byte aligned lines. */
#define FLAT_HDR 24

struct flatHdr {
  _Atomic uint64_t seq; /* 1 + the collective (cseq) this line holds (0: none yet); written last */
  uint64_t tArr; /* CLOCK_MONOTONIC ns: the rank's arrival */
  uint64_t sig; /* the call's signature: every rank must make the same call */
};
_Static_assert(sizeof(struct flatHdr) == FLAT_HDR, "flat line header");

static size_t align64(size_t v) {
  return (v + 63) & ~(size_t)63;
}

size_t papFlatAreaBytes(int nranks) {
  int64_t m = papParamFlatMaxBytes();
  if (m <= 0 || nranks < 2) return 0;
  return 2 * align64(FLAT_HDR + (size_t)m);
}

papcclResult_t papFlatAttach(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  int n = comm->nranks;
  size_t area = papFlatAreaBytes(n);
  ps->flatCap = 0;
  if (area == 0 || comm->tops->local == NULL) return papcclSuccess;
  for (int r = 0; r < n; r++) {
    ps->flatArea[r] = (char*)comm->tops->local->flat(comm->tstate, r);
    if (ps->flatArea[r] == NULL) return papcclSuccess; /* not every rank mapped: no flat ops */
  }
  ps->flatLine = area / 2;
  ps->flatCap = (size_t)papParamFlatMaxBytes();
  return papcclSuccess;
}

int papFlatEligible(const struct papComm* comm, const struct papOpDesc* op) {
  const struct papArrivalState* ps = comm->arrival;
  if (ps == NULL || ps->flatCap == 0 || op->call.coll != PAP_COLL_ALLREDUCE || op->call.count == 0)
    return 0;
  if (op->call.count * papKernTypeSize(op->call.dtype) > ps->flatCap) return 0;
  /* A forced algorithm and the deterministic mode (one canonical tree at every size) keep
   * their plans (ops the device arenas take: papPathDecide asks them first). Every rank
   * decides alike. */
  return papSelectForcedAlgo(op) == PAP_ALGO_AUTO && !papParamDeterministic();
}

/* The op byte: [reduction:4 | avg:1 | preMul:1 | 0:2]. */
uint64_t papArrivalSignature(const struct papCall* c) {
  unsigned red = (unsigned)(c->red & 0xf) | (c->avg ? 0x10u : 0) | (c->preMul ? 0x20u : 0);
  return (uint64_t)c->count << 24 | (uint64_t)(c->dtype & 0xff) << 16 | (uint64_t)red << 8 |
         (uint64_t)(c->coll & 0xff);
}

const char* papArrivalCallString(uint64_t sig, int root, char* buf, size_t len) {
  static const char* const colls[] = {"AllReduce",     "Broadcast", "Reduce", "AllGather",
                                      "ReduceScatter", "AlltoAll",  "Gather", "Scatter",
                                      "Send",          "Recv"};
  static const char* const types[] = {"int8",   "uint8",    "int32",      "uint32",
                                      "int64",  "uint64",   "float16",    "float",
                                      "double", "bfloat16", "float8e4m3", "float8e5m2"};
  static const char* const reds[] = {"sum", "prod", "max", "min"};
  unsigned coll = (unsigned)(sig & 0xff), red = (unsigned)(sig >> 8 & 0xff);
  unsigned type = (unsigned)(sig >> 16 & 0xff);
  char t[16], o[32] = "";
  if (type < sizeof(types) / sizeof(types[0]))
    snprintf(t, sizeof(t), "%s", types[type]);
  else
    snprintf(t, sizeof(t), "datatype %u", type);
  if (coll == PAP_COLL_ALLREDUCE || coll == PAP_COLL_REDUCE || coll == PAP_COLL_REDUCESCATTER)
    snprintf(o, sizeof(o), ", %s",
             red & 0x10        ? "avg"
             : red & 0x20      ? "premulsum"
             : (red & 0xf) < 4 ? reds[red & 0xf]
                               : "?");
  char r[24] = "";
  if (coll == PAP_COLL_BROADCAST || coll == PAP_COLL_REDUCE || coll == PAP_COLL_GATHER ||
      coll == PAP_COLL_SCATTER)
    snprintf(r, sizeof(r), ", root %d", root);
  snprintf(buf, len, "%s(count %llu, %s%s%s)",
           coll < sizeof(colls) / sizeof(colls[0]) ? colls[coll] : "collective",
           (unsigned long long)(sig >> 24), t, o, r);
  return buf;
}

static struct flatHdr* lineOf(const struct papArrivalState* ps, int r, uint64_t seq) {
  return (struct flatHdr*)(ps->flatArea[r] + (seq & 1) * ps->flatLine);
}

/* Polls the peers not seen yet for the line of collective cseq (its header's seq is cseq +
 * 1); returns how many arrived in this pass, or -1 on a peer that made another call (logged):
 * a different signature, or its line of this parity holds a later collective (it never runs
 * ours flat: it reached a later flat op, whose line this one would be after ours). */
static int pollPeers(struct papComm* comm, uint64_t seq, uint64_t fseq, uint64_t sig, int* seen) {
  struct papArrivalState* ps = comm->arrival;
  int got = 0;
  for (int p = 0; p < comm->nranks; p++) {
    if (seen[p]) continue;
    struct flatHdr* h = lineOf(ps, p, fseq);
    uint64_t v = atomic_load_explicit(&h->seq, memory_order_acquire);
    if (v != seq) {
      if (v > seq && ps->checkMismatch) {
        /* Its call is on the board when it ran ours there: named then. */
        if (papArrivalPoll(comm, PAP_POLL_MISMATCH, NULL, NULL) != papcclSuccess) return -1;
        char a[128];
        PAP_WARN(
            "collective #%llu mismatch: rank %d called %s but rank %d called another collective "
            "there (it has reached collective #%llu; every rank must make the same calls in the "
            "same order)",
            (unsigned long long)(seq - 1), comm->rank, papArrivalCallString(sig, 0, a, sizeof(a)),
            p, (unsigned long long)(v - 1));
        return -1;
      }
      continue;
    }
    seen[p] = 1;
    got++;
    ps->stamps[p] = h->tArr;
    if (h->sig != sig && ps->checkMismatch) {
      papArrivalMismatchWarn(seq - 1, comm->rank, sig, 0, p, h->sig, 0);
      return -1;
    }
  }
  return got;
}

int papFlatPeerAt(struct papComm* comm, uint64_t cseq, int* rankOut, uint64_t* sigOut) {
  struct papArrivalState* ps = comm->arrival;
  if (ps->flatCap == 0) return 0;
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank) continue;
    for (uint64_t parity = 0; parity < 2; parity++) {
      struct flatHdr* h = lineOf(ps, p, parity);
      if (atomic_load_explicit(&h->seq, memory_order_acquire) != cseq + 1) continue;
      *rankOut = p;
      *sigOut = h->sig;
      return 1;
    }
  }
  return 0;
}

/* Flat ops run only where the backend has a local table (papFlatAttach). */
static void wakePeers(struct papComm* comm) {
  comm->tops->local->notifyAll(comm->tstate);
}

/* A call that differs from ours: our line is out, so wake the sleepers to see it too. */
static papcclResult_t mismatch(struct papComm* comm) {
  wakePeers(comm);
  return papcclInvalidUsage;
}

/* Waits for the lines of the `left` peers not seen yet (the one wait, core/wait.h, with a
 * prediction: poll for the spin budget, sleep on the doorbell, and poll again around the time
 * the last peer came in past ops). */
static papcclResult_t awaitLines(struct papComm* comm, const struct papOpDesc* op, uint64_t seq,
                                 uint64_t fseq, uint64_t sig, int* seen, int left) {
  const struct papArrival* a = &op->arr;
  const struct papCall* c = &op->call;
  int n = comm->nranks, me = comm->rank, got = 0;
  struct papWait w;
  papWaitInit(&w, "a flat allreduce", (const volatile int*)&comm->abortFlag, 1, comm->spinNs, 0);
  w.yield = comm->oversubscribed;
  w.hint = ": a rank never arrived or is dead";
  char what[128];
  int described = 0;
  papWaitExpect(&w, a->tArr, a->due, a->spread);
  unsigned polls = 0;
  while (left > 0) {
    got = pollPeers(comm, seq, fseq, sig, seen);
    if (got < 0) return mismatch(comm);
    if (got > 0) {
      left -= got;
      if (left > 0) papWaitProgressed(&w, papNowNs());
      continue;
    }
    if ((++polls & 15) != 0) continue;
    uint64_t now = papNowNs();
    PAP_CHECK(papWaitCheck(&w, now));
    if (papWaitHealthDue(&w, now)) {
      papDiagUpdate(comm, &w, seen);
      /* A peer that runs this collective on the board made another call; asked first, as it
       * may since have ended its comm on that mismatch, which is then the cause to name. */
      if (papArrivalPoll(comm, PAP_POLL_MISMATCH, &w, NULL) != papcclSuccess) return mismatch(comm);
      for (int p = 0; p < n; p++) {
        if (seen[p] || comm->tops->live->peerAlive(comm->tstate, p)) continue;
        PAP_WARN("allreduce #%llu on rank %d: rank %d (%s) exited before it arrived",
                 (unsigned long long)c->cseq, me, p, papCommPidText(comm, p).s);
        return papcclRemoteError;
      }
    }
    if (papWaitSpin(&w, now)) continue;
    if (!described) { /* named only when the wait may last (a timeout names it) */
      snprintf(what, sizeof(what), "allreduce #%llu on rank %d (flat), waiting for %d rank(s)",
               (unsigned long long)c->cseq, me, left);
      w.what = what;
      described = 1;
    }
    uint32_t tok = comm->tops->wake->waitToken(comm->tstate);
    got = pollPeers(comm, seq, fseq, sig, seen);
    if (got != 0) {
      comm->tops->wake->wait(comm->tstate, tok, 0);
      if (got < 0) return mismatch(comm);
      left -= got;
      continue;
    }
    comm->tops->wake->wait(comm->tstate, tok, papWaitSlice(&w, now, 100000000));
    w.spinUntil = papNowNs() + w.spinNs / 4; /* a short poll after each wake-up */
  }
  return papcclSuccess;
}

papcclResult_t papFlatRun(struct papComm* comm, struct papOpDesc* op) {
  struct papArrivalState* ps = comm->arrival;
  struct papArrival* a = &op->arr;
  const struct papCall* c = &op->call;
  int n = comm->nranks, me = comm->rank;
  size_t bytes = c->count * papKernTypeSize(c->dtype);
  uint64_t fseq = ++ps->flatSeq; /* the line's parity */
  uint64_t seq = c->cseq + 1; /* what the line holds (the collective, as every rank counts) */
  uint64_t sig = papArrivalSignature(c);
  a->used = 0;
  a->flat = 1;
  a->tPlan = 0;
  if (a->tArr == 0) a->tArr = papNowNs();
  papArrivalPredict(comm, op, sig);
  op->call.commit.algo = PAP_ALGO_FLAT;
  op->call.commit.nE = n;

  /* Publish: the input, then the header, then the number (release). */
  struct flatHdr* mine = lineOf(ps, me, fseq);
  memcpy((char*)mine + FLAT_HDR, c->sendbuff, bytes);
  mine->tArr = a->tArr;
  mine->sig = sig;
  atomic_store_explicit(&mine->seq, seq, memory_order_release);

  int* seen = ps->flatSeen;
  memset(seen, 0, sizeof(int) * (size_t)n);
  seen[me] = 1;
  ps->stamps[me] = a->tArr;
  int left = n - 1;
  int got = 0;
  /* Cheap polls first (no clock): in step, the peers are a cache miss away. With a CPU
   * each, a few microseconds of them; sharing CPUs, a few, then the wait's yields. */
  const int cheap = comm->oversubscribed ? 16 : 1024;
  for (int i = 0; i < cheap && left > 0; i++) {
    got = pollPeers(comm, seq, fseq, sig, seen);
    if (got < 0) return mismatch(comm);
    left -= got;
    if (left > 0 && got == 0) papCpuRelax();
  }
  if (left > 0) {
    papcclResult_t res = awaitLines(comm, op, seq, fseq, sig, seen, left);
    if (res != papcclSuccess) return res;
  }
  a->tPlan = a->tArr; /* no plan to wait for: the work starts at arrival */
  /* Wake the sleepers. Only the last line lets anyone finish and its writer sees every line
   * at once, so ringing once the wait is over (not at publishing) wakes no one early and
   * keeps the doorbell's fence off the publishing rank's way. The doorbell's fence pairs
   * with the sleeper's: it sees us sleeping, or our line and every line we saw. */
  wakePeers(comm);

  /* Our line of the next op: the peers read it two ops ago and hold copies, so the first
   * store to it would wait for them to be invalidated, on the critical path of ranks that
   * arrive together. Every peer is done with it (each published this op after reading the
   * last), so take it now, while nobody waits for us (docs/PAP-ENGINE.md section 13). */
  char* next = (char*)lineOf(ps, me, fseq + 1);
  for (size_t off = 0; off < FLAT_HDR + bytes; off += 64)
    papCpuPrefetchWrite(next + off);

  /* Reduce every line in rank order: the same bits on every rank. */
  char* out = (char*)op->call.recvbuff;
  memcpy(out, (char*)lineOf(ps, 0, fseq) + FLAT_HDR, bytes);
  for (int p = 1; p < n; p++)
    papKernHostReduce(out, out, (char*)lineOf(ps, p, fseq) + FLAT_HDR, c->count, c->dtype, c->red);

  return papcclSuccess;
}
