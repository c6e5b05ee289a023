/* SPDX-License-Identifier: Apache-2.0 */
/* The message board (docs/PAP-ENGINE.md section 10): the home rank (rank 0) keeps the board's
 * words in its own memory and runs every request on them in one piece (the transport
 * serializes serve); the ranks that wait learn what they wait for from the replies and from
 * the home's pushes (their mail), never by polling a remote word. */
#include <stdlib.h>
#include <string.h>

#include "arrival_int.h"
#include "log.h"

void papHomePush(struct papComm* comm, int peer, uint32_t kind, int slot, uint32_t gen, int pos,
                 int rank, uint64_t word, const uint64_t* data, size_t words) {
  uint64_t buf[1024]; /* 8 KiB on the stack: every push but the statistics of large comms */
  struct hmPush* p = (struct hmPush*)buf;
  struct hmPush* big = NULL;
  size_t bytes = sizeof(*p) + words * sizeof(uint64_t);
  if (bytes > sizeof(buf)) {
    big = (struct hmPush*)malloc(bytes);
    if (big == NULL) {
      PAP_WARN("arrival board: out of memory for a message to rank %d", peer);
      return;
    }
    p = big;
  }
  p->kind = kind;
  p->slot = (uint32_t)slot;
  p->gen = gen;
  p->pos = pos;
  p->rank = rank;
  p->word = word;
  if (words) memcpy(p->data, data, words * sizeof(uint64_t));
  comm->tops->home->push(comm->tstate, peer, p, bytes);
  free(big);
}

/* A commit just made at the home (word, early ranks ranks[0..nE)) by rank `by`: the ranks
 * that arrived before it wait for it, and the ranks that have not arrived yet find it in
 * their mail when they come and need no round trip to the home (but a chain, whose ranks
 * need their arrival position). */
static void homeCommitPush(struct papComm* comm, int slot, uint32_t gen, uint64_t word,
                           const uint64_t* ranks, uint32_t nE, int by) {
  int n = comm->nranks;
  if (PAP_W_ALGO(word) == PAP_ALGO_CHAIN) {
    for (uint32_t p = 1; p < nE; p++) {
      int rk = entryRank(ranks[p], gen, n);
      if (rk >= 0) papHomePush(comm, rk, HP_COMMIT, slot, gen, 0, 0, word, ranks, nE);
    }
    return;
  }
  for (int rk = 0; rk < n; rk++)
    if (rk != by) papHomePush(comm, rk, HP_COMMIT, slot, gen, 0, 0, word, ranks, nE);
}

static size_t homeArrive(struct papComm* comm, int from, const struct hmReq* q, struct hmReply* r) {
  int n = comm->nranks, slot = (int)q->slot;
  uint64_t* B = comm->arrival->home;
  uint64_t w = B[IDX_WORD(n, slot)], nw = 0;
  int decided = (q->b & HM_DECIDED) != 0;
  enum arrStep e = arrivalStep(w, q->gen, decided, n);
  if (e == ARR_TAKE) {
    uint64_t* rel = &B[IDX_REL(n, slot)];
    int t = takeOverStep(*rel, PAP_W_GEN(w), q->gen, n);
    if (t == 0) e = ARR_WAIT;
    if (t == 1) *rel = (uint64_t)q->gen << 32;
    nw = makeWord(q->gen, 0, 0, decided, 0, 1);
    if (decided && (q->b & HM_PROPOSE)) nw = makeWord(q->gen, HM_ALGO(q->b), 1, 1, 1, 1);
  } else if (e == ARR_JOIN) {
    nw = w + 1;
  }
  r->status = (int32_t)e;
  r->word = w;
  r->pos = 0;
  if (e != ARR_JOIN && e != ARR_TAKE) return sizeof(*r);
  int pos = e == ARR_JOIN ? (int)PAP_W_COUNT(w) : 0;
  B[IDX_WORD(n, slot)] = nw;
  B[IDX_TARR(n, slot, from)] = q->a;
  B[IDX_RANKAT(n, slot, pos)] = ((uint64_t)q->gen << 32) | (uint32_t)(from + 1);
  r->pos = pos;
  if (e == ARR_TAKE) r->word = PAP_W_COMMIT(nw) ? nw : 0; /* first: committed at once? */
  for (int p = 0; p < pos; p++)
    r->ranks[p] = B[IDX_RANKAT(n, slot, p)];
  if (decided && pos > 0) {
    /* The arrival before ours learns its successor (a chain extends to it); the decider,
     * while it has not committed, the new count. */
    int pred = entryRank(B[IDX_RANKAT(n, slot, pos - 1)], q->gen, n);
    int dec = entryRank(B[IDX_RANKAT(n, slot, 0)], q->gen, n);
    if (pred >= 0 && (!PAP_W_COMMIT(w) || PAP_W_ALGO(w) == PAP_ALGO_CHAIN))
      papHomePush(comm, pred, HP_NEXT, slot, q->gen, pos, from, nw, NULL, 0);
    if (!PAP_W_COMMIT(w) && dec >= 0 && dec != pred)
      papHomePush(comm, dec, HP_WORD, slot, q->gen, 0, 0, nw, NULL, 0);
  }
  if (e == ARR_TAKE && PAP_W_COMMIT(nw)) /* the first arrival committed its proposal */
    homeCommitPush(comm, slot, q->gen, nw, &B[IDX_RANKAT(n, slot, 0)], 1, from);
  if (decided && PAP_W_COUNT(nw) == (uint32_t)n) /* every stamp is in: the statistics */
    for (int p = 0; p < n; p++)
      papHomePush(comm, p, HP_FULL, slot, q->gen, 0, 0, nw, &B[slotBase(n, slot)], SLOT_WORDS(n));
  return sizeof(*r) + (size_t)pos * sizeof(uint64_t);
}

static size_t homeServe(void* arg, int from, const void* req, size_t len, void* reply, size_t cap) {
  struct papComm* comm = (struct papComm*)arg;
  int n = comm->nranks;
  struct hmReq q;
  if (len < sizeof(q) || cap < sizeof(struct hmReply) + SLOT_WORDS(n) * sizeof(uint64_t)) return 0;
  memcpy(&q, req, sizeof(q));
  if (q.slot >= PAP_BOARD_SLOTS || q.rank != from) return 0;
  uint64_t* B = comm->arrival->home;
  int slot = (int)q.slot;
  struct hmReply* r = (struct hmReply*)reply;
  switch (q.kind) {
  case HM_ARRIVE:
    papMismatchAtHome(comm, from, q.c, q.sig, (int32_t)q.root);
    return homeArrive(comm, from, &q, r);
  case HM_CALL: { /* q.a calls of (c, sig, root) after the header */
    const uint64_t* v = (const uint64_t*)((const char*)req + sizeof(q));
    if (q.a > (len - sizeof(q)) / (3 * sizeof(uint64_t))) return 0;
    for (uint64_t i = 0; i < q.a; i++)
      papMismatchAtHome(comm, from, v[3 * i], v[3 * i + 1], (int32_t)v[3 * i + 2]);
    return 0;
  }
  case HM_COMMIT: {
    uint64_t* wp = &B[IDX_WORD(n, slot)];
    r->status = *wp == q.a;
    if (r->status) *wp = q.b;
    r->word = *wp;
    r->pos = 0;
    uint32_t nE = PAP_W_COMMIT(*wp) && PAP_W_GEN(*wp) == q.gen ? PAP_W_NE(*wp) : 0;
    if (nE > (uint32_t)n) nE = 0;
    for (uint32_t p = 0; p < nE; p++)
      r->ranks[p] = B[IDX_RANKAT(n, slot, p)];
    if (r->status) homeCommitPush(comm, slot, q.gen, *wp, r->ranks, nE, from);
    return sizeof(*r) + nE * sizeof(uint64_t);
  }
  case HM_READ:
    memcpy(reply, &B[slotBase(n, slot)], SLOT_WORDS(n) * sizeof(uint64_t));
    return SLOT_WORDS(n) * sizeof(uint64_t);
  case HM_RELEASE:
    B[IDX_REL(n, slot)] += 1;
    return 0;
  case HM_SYNC:
    papHomePush(comm, from, HP_SYNC, 0, 0, 0, 0, q.a, NULL, 0);
    return 0;
  case HM_ACK:
    if (comm->arrival->acked != NULL)
      atomic_store_explicit(&comm->arrival->acked[from], 1, memory_order_release);
    return 0;
  default:
    return 0;
  }
}

/* The mail of slot for generation gen, reset when gen is newer; NULL when gen is older than
 * what the mail holds (a late push). mailLock held. */
struct papMail* papHomeMail(struct papArrivalState* ps, int slot, uint32_t gen) {
  struct papMail* m = &ps->mail[slot];
  if (m->gen == gen) return m;
  if (m->gen != 0 && !genOlder(m->gen, gen)) return NULL;
  m->gen = gen;
  m->word = 0;
  m->committed = m->hasFull = 0;
  m->succPos = m->succRank = -1;
  return m;
}

void papHomeSetOwners(struct papMail* m, const uint64_t* ranks, uint32_t nE, int n) {
  for (uint32_t p = 0; p < nE && p < (uint32_t)n; p++)
    m->owners[p] = entryRank(ranks[p], m->gen, n);
}

static void homePushed(void* arg, const void* msg, size_t len) {
  struct papComm* comm = (struct papComm*)arg;
  struct papArrivalState* ps = comm->arrival;
  int n = comm->nranks;
  const struct hmPush* p = (const struct hmPush*)msg;
  if (ps == NULL || len < sizeof(*p) || p->slot >= PAP_BOARD_SLOTS) return;
  size_t words = (len - sizeof(*p)) / sizeof(uint64_t);
  if (p->kind == HP_SYNC) {
    uint64_t seen = atomic_load_explicit(&ps->syncSeen, memory_order_relaxed);
    if (p->word > seen) atomic_store_explicit(&ps->syncSeen, p->word, memory_order_release);
    return;
  }
  if (p->kind == HP_MISMATCH) { /* kept for the calling thread's checks: the first one */
    if (words < 4) return;
    pthread_mutex_lock(&ps->mailLock);
    if (!atomic_load_explicit(&ps->noticeAny, memory_order_relaxed) || p->word < ps->notice.cseq) {
      ps->notice.cseq = p->word;
      ps->notice.a = p->pos;
      ps->notice.b = p->rank;
      ps->notice.sigA = p->data[0];
      ps->notice.rootA = (int)(uint32_t)p->data[1];
      ps->notice.sigB = p->data[2];
      ps->notice.rootB = (int)(uint32_t)p->data[3];
      atomic_store_explicit(&ps->noticeAny, 1, memory_order_release);
    }
    pthread_mutex_unlock(&ps->mailLock);
    return;
  }
  pthread_mutex_lock(&ps->mailLock);
  struct papMail* m = papHomeMail(ps, (int)p->slot, p->gen);
  if (m != NULL) {
    if ((p->kind == HP_WORD || p->kind == HP_NEXT) && !m->committed &&
        PAP_W_GEN(p->word) == p->gen && PAP_W_COUNT(p->word) > PAP_W_COUNT(m->word))
      m->word = p->word;
    if (p->kind == HP_NEXT) {
      m->succPos = p->pos;
      m->succRank = p->rank;
    } else if (p->kind == HP_COMMIT && words >= PAP_W_NE(p->word)) {
      m->word = p->word;
      m->committed = 1;
      papHomeSetOwners(m, p->data, PAP_W_NE(p->word), n);
    } else if (p->kind == HP_FULL && words == SLOT_WORDS(n)) {
      memcpy(m->full, p->data, words * sizeof(uint64_t));
      m->hasFull = 1;
    }
  }
  pthread_mutex_unlock(&ps->mailLock);
}

/* A request to the home and its reply. An unreachable home is logged here, unless a mismatch
 * the home found explains it (a peer that failed on it and left, rank 0 itself). */
papcclResult_t papHomeCall(struct papComm* comm, const struct hmReq* q, size_t* len) {
  papcclResult_t res = comm->tops->home->call(comm->tstate, q, sizeof(*q), comm->arrival->reply,
                                              PAP_HOME_MAX_BYTES, len);
  if (res != papcclRemoteError) return res;
  if (papArrivalPoll(comm, PAP_POLL_EXPLAIN, NULL, NULL) == papcclInvalidUsage)
    return papcclInvalidUsage;
  PAP_WARN("rank 0, which holds the arrival board, is unreachable from rank %d", comm->rank);
  return res;
}

papcclResult_t papHomeAttach(struct papComm* comm) {
  return comm->tops->home->attach(comm->tstate, homeServe, homePushed, comm);
}
