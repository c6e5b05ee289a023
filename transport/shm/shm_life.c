/* SPDX-License-Identifier: Apache-2.0 */
/* Shared-memory transport: liveness. Each rank holds a lock on its own segment for the
 * comm's life; a peer whose lock is free without a word (depart) is dead. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "shm/shm_state.h"

/* Liveness that cannot be fooled. Each rank holds an open-file-description (OFD) write lock
 * on the first byte of its own segment for as long as its comm lives. The kernel lets go of
 * the lock when the last descriptor of that description closes, which happens when the
 * process dies, whatever the signal, before it becomes a zombie. No pid is involved, so a peer
 * in another PID namespace (a container of the same host) is judged as well as one in ours,
 * and a recycled pid cannot pass for the dead rank. A peer asks with F_OFD_GETLK on its own
 * descriptor of the segment: no conflicting lock means the owner is gone.
 *
 * A child forked by a rank (a data-loader worker) would inherit the descriptor and keep the
 * lock alive after the rank died: every lock is in lifeList, and a fork handler closes them
 * in the child (exec closes them through close-on-exec, which shm_open sets). The lock is
 * taken on a description that nothing maps, since a mapping, which the child inherits too,
 * keeps its description open. */
static pthread_mutex_t lifeMutex = PTHREAD_MUTEX_INITIALIZER;
static struct shmState* lifeList;
static pthread_once_t lifeOnce = PTHREAD_ONCE_INIT;

static void lifeForkPrepare(void) {
  pthread_mutex_lock(&lifeMutex);
}

static void lifeForkParent(void) {
  pthread_mutex_unlock(&lifeMutex);
}

static void lifeForkChild(void) {
  for (struct shmState* st = lifeList; st != NULL; st = st->lifeNext) {
    if (st->selfFd >= 0) close(st->selfFd);
    st->selfFd = -1;
  }
  /* The child holds no lock: its list starts empty (a comm it ends later, selfFd -1, is not
   * in it, so it never leaves a freed state behind in the list). */
  lifeList = NULL;
  pthread_mutex_unlock(&lifeMutex);
}

static void lifeInstall(void) {
  pthread_atfork(lifeForkPrepare, lifeForkParent, lifeForkChild);
}

static int lifeLockOp(int fd, int cmd, struct flock* fl, short type) {
  memset(fl, 0, sizeof(*fl));
  fl->l_type = type;
  fl->l_whence = SEEK_SET;
  fl->l_start = 0;
  fl->l_len = 1;
  return fcntl(fd, cmd, fl);
}

/* Takes the life lock on fd (this rank's new segment) and keeps fd in st; 0 when held. */
int papShmLifeHold(struct shmState* st, int fd) {
  struct flock fl;
  pthread_once(&lifeOnce, lifeInstall);
  if (lifeLockOp(fd, F_OFD_SETLK, &fl, F_WRLCK) != 0) {
    PAP_WARN(
        "shm: cannot lock segment %s (F_OFD_SETLK: %s): peers will see this rank's death "
        "only at PAPCCL_TIMEOUT_S",
        st->name, strerror(errno));
    return -1;
  }
  pthread_mutex_lock(&lifeMutex);
  st->selfFd = fd;
  st->lifePrev = NULL;
  st->lifeNext = lifeList;
  if (lifeList != NULL) lifeList->lifePrev = st;
  lifeList = st;
  pthread_mutex_unlock(&lifeMutex);
  return 0;
}

/* Lets go of the life lock (the comm ends: its header says so first). */
void papShmLifeRelease(struct shmState* st) {
  pthread_mutex_lock(&lifeMutex);
  if (st->selfFd >= 0) {
    if (st->lifePrev != NULL)
      st->lifePrev->lifeNext = st->lifeNext;
    else
      lifeList = st->lifeNext;
    if (st->lifeNext != NULL) st->lifeNext->lifePrev = st->lifePrev;
    close(st->selfFd);
    st->selfFd = -1;
  }
  pthread_mutex_unlock(&lifeMutex);
}

void papShmClosePeerFds(struct shmState* st) {
  if (st->peerFds == NULL) return;
  for (int r = 0; r < st->base.ctx.nranks; r++)
    if (st->peerFds[r] >= 0) close(st->peerFds[r]);
  free(st->peerFds);
  st->peerFds = NULL;
}

/* How a peer stands: alive while its life lock is held or while it has left in good order;
 * failed when it ended its comm without that (an abort, an error); dead when its lock was let
 * go without a word (its process is gone; see papShmLifeHold). */
enum peerState {
  PEER_ALIVE,
  PEER_FAILED,
  PEER_DEAD
};

static enum peerState peerState(struct shmState* st, int peer) {
  if (peer < 0 || peer >= st->base.ctx.nranks || peer == st->base.ctx.rank) return PEER_ALIVE;
  struct papConn* c = st->conns[peer];
  if (c == NULL || c->peerSeg.hdr == NULL || st->peerFds[peer] < 0) return PEER_ALIVE;
  struct shmHeader* h = c->peerSeg.hdr;
  if (!atomic_load_explicit(&h->lifeLock, memory_order_relaxed)) return PEER_ALIVE;
  uint32_t left = atomic_load_explicit(&h->departed, memory_order_acquire);
  if (left == PAP_SHM_LEFT_GOOD) return PEER_ALIVE;
  if (left == PAP_SHM_LEFT_FAILED) return PEER_FAILED;
  struct flock fl;
  if (lifeLockOp(st->peerFds[peer], F_OFD_GETLK, &fl, F_RDLCK) != 0) return PEER_ALIVE;
  if (fl.l_type != F_UNLCK) return PEER_ALIVE;
  /* The lock goes at the end of a comm too, after departed is set: read it again. */
  left = atomic_load_explicit(&h->departed, memory_order_acquire);
  return left == PAP_SHM_LEFT_GOOD     ? PEER_ALIVE
         : left == PAP_SHM_LEFT_FAILED ? PEER_FAILED
                                       : PEER_DEAD;
}

int papShmPeerAlive(void* state, int peer) {
  return peerState((struct shmState*)state, peer) == PEER_ALIVE;
}

/* A local peer in another process that exited without leaving the comm: every survivor sees
 * it at its next health check, also one that waits on another peer (that peer may wait on
 * the dead one, or fail and leave). A dead peer is named before one that only ended its
 * comm after failing (most likely on that death). */
int papShmDeadPeer(void* state) {
  struct shmState* st = (struct shmState*)state;
  int failed = -1;
  for (int p = 0; p < st->base.ctx.nranks; p++) {
    enum peerState ps = peerState(st, p);
    if (ps == PEER_DEAD) return p;
    if (ps == PEER_FAILED && failed < 0) failed = p;
  }
  return failed;
}

void papShmDepart(void* state) {
  struct shmState* st = (struct shmState*)state;
  atomic_store_explicit(&st->self.hdr->departed, PAP_SHM_LEFT_GOOD, memory_order_release);
}
