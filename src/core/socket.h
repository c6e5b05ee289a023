/* SPDX-License-Identifier: Apache-2.0 */
/* TCP socket helpers for out-of-band traffic: interface choice, listen, connect with retry,
 * and send/recv loops bounded by a deadline and an abort flag. */
#ifndef PAPCCL_CORE_SOCKET_H_
#define PAPCCL_CORE_SOCKET_H_

#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "papccl.h"
#include "wait.h"

/* Any address a papccl socket binds or connects to. */
union papSockAddr {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
};

/* "a.b.c.d:port" or "[v6]:port"; enough room for either. */
#define PAP_SOCKET_ADDR_STRLEN 64

/* Longest wait in one poll() before a loop re-checks its abort flag and deadline. */
#define PAP_SOCKET_POLL_SLICE_MS 100

/* sizeof the sockaddr behind a (0 for an unknown family). */
socklen_t papSocketAddrLen(const union papSockAddr* a);

/* Writes a printable form of a to buf (always terminated; "<unknown>" for a bad family). */
const char* papSocketAddrToString(const union papSockAddr* a, char* buf, size_t len);

/* The address this host's out-of-band sockets use: PAPCCL_SOCKET_IFNAME (a comma list of
 * interface name prefixes, "^" to exclude, "=" for exact names) when set, otherwise the first
 * non-loopback IPv4 interface that is up, otherwise 127.0.0.1. Port 0. ifnameOut may be NULL. */
papcclResult_t papSocketFindIfAddr(union papSockAddr* addrOut, char* ifnameOut, size_t ifnameLen);

/* Parses "host:port" or "[v6host]:port" (host resolved with getaddrinfo). */
papcclResult_t papSocketParseHostPort(const char* str, union papSockAddr* addrOut);

/* A non-blocking, close-on-exec TCP listener bound to addr (port 0: ephemeral). With
 * reuseAddr the port may be rebound while old connections linger in TIME_WAIT. While the port
 * is in use (EADDRINUSE) it retries until deadlineNs (0: one attempt) or *abortFlag. boundOut
 * gets the address actually bound (the ephemeral port filled in). */
papcclResult_t papSocketListen(const union papSockAddr* addr, int reuseAddr, uint64_t deadlineNs,
                               const volatile int* abortFlag, int* fdOut,
                               union papSockAddr* boundOut);

/* One non-blocking accept: *fdOut is a non-blocking connection, or -1 when none is pending. */
papcclResult_t papSocketAccept(int listenFd, int* fdOut, union papSockAddr* peerOut);

/* Connects to addr, retrying with backoff while nobody listens there yet, until deadlineNs
 * (CLOCK_MONOTONIC, as papNowNs) or *abortFlag. *fdOut is non-blocking, TCP_NODELAY.
 * what names the peer in messages ("root 10.0.0.1:4000"). Timeout and abort log a WARN
 * and return papcclRemoteError. */
papcclResult_t papSocketConnect(const union papSockAddr* addr, uint64_t deadlineNs,
                                const volatile int* abortFlag, const char* what, int* fdOut);
/* The same to a listener known to exist (a rank's, whose address came from the rendezvous):
 * a refusal means its process is gone, a WARN and papcclRemoteError at once. */
papcclResult_t papSocketConnectListening(const union papSockAddr* addr, uint64_t deadlineNs,
                                         const volatile int* abortFlag, const char* what,
                                         int* fdOut);
/* One short look at a listener known to exist: 1 when it refuses (its process is gone),
 * 0 otherwise, also when it cannot tell within waitMs. When it connects, the first len bytes
 * of msg are sent (a greeting the listener can tell from a stranger) and it is closed. */
int papSocketProbeGone(const union papSockAddr* addr, int waitMs, const void* msg, size_t len);

/* Waits on fds with poll() in slices of PAP_SOCKET_POLL_SLICE_MS, checking *abortFlag
 * (may be NULL) and deadlineNs between slices. Returns success once some fd has an event,
 * papcclRemoteError with a WARN naming `what` on timeout or abort, papcclSystemError if
 * poll fails. */
papcclResult_t papSocketPoll(struct pollfd* fds, int nfds, uint64_t deadlineNs,
                             const volatile int* abortFlag, const char* what);

/* Non-blocking partial transfers: add what moved to *doneInOut (at most len in total).
 * A closed peer or a socket error logs a WARN naming `what` and returns papcclRemoteError. */
papcclResult_t papSocketTrySend(int fd, const void* buf, size_t len, size_t* doneInOut,
                                const char* what);
papcclResult_t papSocketTryRecv(int fd, void* buf, size_t len, size_t* doneInOut, const char* what);

/* Blocking-style loops over a non-blocking fd, bounded by deadlineNs and *abortFlag. */
papcclResult_t papSocketSendAll(int fd, const void* buf, size_t len, uint64_t deadlineNs,
                                const volatile int* abortFlag, const char* what);
papcclResult_t papSocketRecvAll(int fd, void* buf, size_t len, uint64_t deadlineNs,
                                const volatile int* abortFlag, const char* what);

/* A deadline timeoutS seconds from now (timeoutS <= 0: PAPCCL_TIMEOUT_S). */
uint64_t papSocketDeadline(int64_t timeoutS);

#endif /* PAPCCL_CORE_SOCKET_H_ */
