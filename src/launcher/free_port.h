/* SPDX-License-Identifier: Apache-2.0 */
/* Choosing a rendezvous port for PAPCCL_COMM_ID on this host (libc only: the launcher does
 * not link papccl; the tests include it too). */
#ifndef PAPCCL_SRC_LAUNCHER_FREE_PORT_H_
#define PAPCCL_SRC_LAUNCHER_FREE_PORT_H_

#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A TCP port nobody holds now on any interface, taken below the kernel's ephemeral range:
 * the port is released again before rank 0 binds it, and inside that range it could
 * meanwhile become the source port of any connection or the port of any bind to port 0 on
 * the host (tests running side by side did hit that). Below the range only another
 * explicit bind can take it. Returns -1 when the range leaves no room below it or no free
 * port was found. */
static inline int papFreeFixedPort(void) {
  enum {
    PORT_LO = 10000,
    ATTEMPTS = 256
  };
  int lo = 32768, hi = 0;
  FILE* f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
  if (f != NULL) {
    if (fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768;
    fclose(f);
  }
  if (lo <= PORT_LO + 64) return -1;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec;
  for (int a = 0; a < ATTEMPTS; a++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    int port = PORT_LO + (int)(x % (uint64_t)(lo - PORT_LO));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons((uint16_t)port);
    int ok = bind(fd, (struct sockaddr*)&addr, sizeof(addr)) == 0;
    close(fd);
    if (ok) return port;
  }
  return -1;
}

#endif /* PAPCCL_SRC_LAUNCHER_FREE_PORT_H_ */
