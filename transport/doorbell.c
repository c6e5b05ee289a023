/* SPDX-License-Identifier: Apache-2.0 */
/* The network backends' doorbell (doorbell.h). */
#include "doorbell.h"

#include <sys/eventfd.h>
#include <unistd.h>

int papDoorbellInit(struct papDoorbell* d) {
  atomic_store_explicit(&d->bell, 0, memory_order_relaxed);
  atomic_store_explicit(&d->sleepers, 0, memory_order_relaxed);
  d->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  return d->fd < 0 ? -1 : 0;
}

void papDoorbellFree(struct papDoorbell* d) {
  if (d->fd >= 0) close(d->fd);
  d->fd = -1;
}

void papDoorbellKick(struct papDoorbell* d) {
  uint64_t one = 1;
  ssize_t n = write(d->fd, &one, sizeof(one));
  (void)n;
}

void papDoorbellRing(struct papDoorbell* d) {
  atomic_fetch_add_explicit(&d->bell, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&d->sleepers, memory_order_seq_cst) > 0) papDoorbellKick(d);
}

void papDoorbellWake(struct papDoorbell* d) {
  atomic_fetch_add_explicit(&d->bell, 1, memory_order_seq_cst);
  papDoorbellKick(d);
}

void papDoorbellSleepEnter(struct papDoorbell* d) {
  atomic_fetch_add_explicit(&d->sleepers, 1, memory_order_seq_cst);
}

void papDoorbellSleepLeave(struct papDoorbell* d) {
  if (atomic_fetch_sub_explicit(&d->sleepers, 1, memory_order_seq_cst) == 1) {
    uint64_t v;
    ssize_t n = read(d->fd, &v, sizeof(v));
    (void)n;
  }
}
