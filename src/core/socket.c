/* SPDX-License-Identifier: Apache-2.0 */
/* TCP socket helpers: interface selection, listeners, retrying connects, bounded I/O loops. */
#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "futex.h"
#include "log.h"
#include "param.h"

#define BACKOFF_MIN_MS 10 /* connect and bind retries */
#define BACKOFF_MAX_MS 200

socklen_t papSocketAddrLen(const union papSockAddr* a) {
  if (a->sa.sa_family == AF_INET) return sizeof(struct sockaddr_in);
  if (a->sa.sa_family == AF_INET6) return sizeof(struct sockaddr_in6);
  return 0;
}

const char* papSocketAddrToString(const union papSockAddr* a, char* buf, size_t len) {
  char host[INET6_ADDRSTRLEN];
  if (len == 0) return buf;
  if (a->sa.sa_family == AF_INET &&
      inet_ntop(AF_INET, &a->sin.sin_addr, host, sizeof(host)) != NULL) {
    snprintf(buf, len, "%s:%u", host, (unsigned)ntohs(a->sin.sin_port));
  } else if (a->sa.sa_family == AF_INET6 &&
             inet_ntop(AF_INET6, &a->sin6.sin6_addr, host, sizeof(host)) != NULL) {
    snprintf(buf, len, "[%s]:%u", host, (unsigned)ntohs(a->sin6.sin6_port));
  } else {
    snprintf(buf, len, "<unknown address family %d>", (int)a->sa.sa_family);
  }
  return buf;
}

uint64_t papSocketDeadline(int64_t timeoutS) {
  if (timeoutS <= 0) timeoutS = papParamTimeoutS();
  if (timeoutS <= 0 || timeoutS > (int64_t)(UINT64_MAX / 2000000000ull)) return UINT64_MAX;
  return papNowNs() + (uint64_t)timeoutS * 1000000000ull;
}

/* One token of PAPCCL_SOCKET_IFNAME against an interface name: a prefix, or exact with '='. */
static int ifTokenMatches(const char* tok, size_t tokLen, const char* name) {
  if (tokLen > 0 && tok[0] == '=') {
    return strlen(name) == tokLen - 1 && strncmp(name, tok + 1, tokLen - 1) == 0;
  }
  return tokLen > 0 && strncmp(name, tok, tokLen) == 0;
}

/* spec: "eth,ib" (prefixes), "^docker,lo" (anything but), "=eth0" (exact). */
static int ifSpecMatches(const char* spec, const char* name) {
  int exclude = spec[0] == '^';
  const char* p = exclude ? spec + 1 : spec;
  int hit = 0;
  while (*p != '\0' && !hit) {
    const char* end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    hit = ifTokenMatches(p, n, name);
    p += n;
    if (*p == ',') p++;
  }
  return exclude ? !hit : hit;
}

static int ifUsable(const struct ifaddrs* ifa) {
  if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP)) return 0;
  if (ifa->ifa_addr->sa_family == AF_INET) return 1;
  if (ifa->ifa_addr->sa_family == AF_INET6) {
    /* Link-local addresses need a scope the peers cannot know; skip them. */
    const struct sockaddr_in6* s6 = (const struct sockaddr_in6*)ifa->ifa_addr;
    return !IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr);
  }
  return 0;
}

papcclResult_t papSocketFindIfAddr(union papSockAddr* addrOut, char* ifnameOut, size_t ifnameLen) {
  const char* spec = papParamSocketIfname();
  struct ifaddrs* list = NULL;
  const struct ifaddrs* pick = NULL;
  union papSockAddr addr;

  if (getifaddrs(&list) != 0) {
    PAP_WARN("getifaddrs failed: %s", strerror(errno));
    return papcclSystemError;
  }
  /* IPv4 first, then IPv6 (only when PAPCCL_SOCKET_IFNAME names the interface). */
  for (int pass = 0; pass < 2 && pick == NULL; pass++) {
    int family = pass == 0 ? AF_INET : AF_INET6;
    for (const struct ifaddrs* ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
      if (!ifUsable(ifa) || ifa->ifa_addr->sa_family != family) continue;
      if (spec != NULL ? ifSpecMatches(spec, ifa->ifa_name) : !(ifa->ifa_flags & IFF_LOOPBACK)) {
        pick = ifa;
        break;
      }
    }
    if (spec == NULL) break;
  }
  memset(&addr, 0, sizeof(addr));
  if (pick != NULL) {
    memcpy(&addr, pick->ifa_addr,
           pick->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                : sizeof(struct sockaddr_in6));
    if (ifnameOut != NULL && ifnameLen > 0) snprintf(ifnameOut, ifnameLen, "%s", pick->ifa_name);
  } else if (spec != NULL) {
    PAP_WARN("PAPCCL_SOCKET_IFNAME=%s matches no interface that is up with an address", spec);
    freeifaddrs(list);
    return papcclInvalidArgument;
  } else {
    addr.sin.sin_family = AF_INET;
    addr.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (ifnameOut != NULL && ifnameLen > 0) snprintf(ifnameOut, ifnameLen, "lo");
  }
  freeifaddrs(list);
  if (addr.sa.sa_family == AF_INET)
    addr.sin.sin_port = 0;
  else
    addr.sin6.sin6_port = 0;
  *addrOut = addr;
  return papcclSuccess;
}

papcclResult_t papSocketParseHostPort(const char* str, union papSockAddr* addrOut) {
  char host[256];
  const char* portStr;
  struct addrinfo hints;
  struct addrinfo* res = NULL;
  const struct addrinfo* pick = NULL;
  union papSockAddr addr;

  if (str == NULL || *str == '\0') {
    PAP_WARN("empty host:port");
    return papcclInvalidArgument;
  }
  if (str[0] == '[') {
    const char* close = strchr(str, ']');
    if (close == NULL || close[1] != ':' || (size_t)(close - str - 1) >= sizeof(host)) {
      PAP_WARN("cannot parse '%s': expected [ipv6]:port", str);
      return papcclInvalidArgument;
    }
    memcpy(host, str + 1, (size_t)(close - str - 1));
    host[close - str - 1] = '\0';
    portStr = close + 2;
  } else {
    const char* colon = strrchr(str, ':');
    if (colon == NULL || colon == str || (size_t)(colon - str) >= sizeof(host)) {
      PAP_WARN("cannot parse '%s': expected host:port", str);
      return papcclInvalidArgument;
    }
    memcpy(host, str, (size_t)(colon - str));
    host[colon - str] = '\0';
    portStr = colon + 1;
  }
  char* end = NULL;
  errno = 0;
  long port = strtol(portStr, &end, 10);
  if (errno != 0 || end == portStr || *end != '\0' || port < 1 || port > 65535) {
    PAP_WARN("cannot parse '%s': port '%s' is not in 1..65535", str, portStr);
    return papcclInvalidArgument;
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0) {
    PAP_WARN("cannot resolve host '%s' of '%s': %s", host, str, gai_strerror(rc));
    return papcclInvalidArgument;
  }
  for (const struct addrinfo* ai = res; ai != NULL && pick == NULL; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) pick = ai;
  }
  for (const struct addrinfo* ai = res; ai != NULL && pick == NULL; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET6) pick = ai;
  }
  if (pick == NULL) {
    PAP_WARN("host '%s' of '%s' has no IPv4 or IPv6 address", host, str);
    freeaddrinfo(res);
    return papcclInvalidArgument;
  }
  memset(&addr, 0, sizeof(addr));
  memcpy(&addr, pick->ai_addr, pick->ai_addrlen <= sizeof(addr) ? pick->ai_addrlen : sizeof(addr));
  freeaddrinfo(res);
  if (addr.sa.sa_family == AF_INET)
    addr.sin.sin_port = htons((uint16_t)port);
  else
    addr.sin6.sin6_port = htons((uint16_t)port);
  *addrOut = addr;
  return papcclSuccess;
}

static void setNoDelay(int fd) {
  int one = 1;
  /* Best effort: bootstrap messages are small and latency bound. */
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Sleeps until wakeNs in poll slices. 0: woke; 1: deadlineNs passed; 2: *abortFlag set. */
static int sleepUntil(uint64_t wakeNs, uint64_t deadlineNs, const volatile int* abortFlag) {
  for (;;) {
    if (papAborted(abortFlag)) return 2;
    uint64_t now = papNowNs();
    if (now >= deadlineNs) return 1;
    if (now >= wakeNs) return 0;
    uint64_t stop = wakeNs < deadlineNs ? wakeNs : deadlineNs;
    uint64_t ms = (stop - now + 999999) / 1000000;
    poll(NULL, 0, ms < PAP_SOCKET_POLL_SLICE_MS ? (int)ms : PAP_SOCKET_POLL_SLICE_MS);
  }
}

/* One attempt. Returns 0, or the errno of a failed bind (logged unless EADDRINUSE), or -1
 * for any other failure (logged). */
static int listenOnce(const union papSockAddr* addr, int reuseAddr, int* fdOut,
                      union papSockAddr* boundOut) {
  char str[PAP_SOCKET_ADDR_STRLEN];
  union papSockAddr bound;
  socklen_t len = papSocketAddrLen(addr);
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int ret = -1;

  if (fd < 0) {
    PAP_WARN("socket failed: %s", strerror(errno));
    return -1;
  }
  if (reuseAddr) {
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
      PAP_WARN("setsockopt(SO_REUSEADDR) failed: %s", strerror(errno));
      goto out_close;
    }
  }
  if (bind(fd, &addr->sa, len) != 0) {
    ret = errno;
    if (ret != EADDRINUSE) {
      PAP_WARN("bind to %s failed: %s", papSocketAddrToString(addr, str, sizeof(str)),
               strerror(ret));
    }
    goto out_close;
  }
  if (listen(fd, SOMAXCONN) != 0) {
    PAP_WARN("listen on %s failed: %s", papSocketAddrToString(addr, str, sizeof(str)),
             strerror(errno));
    goto out_close;
  }
  memset(&bound, 0, sizeof(bound));
  len = sizeof(bound);
  if (getsockname(fd, &bound.sa, &len) != 0) {
    PAP_WARN("getsockname failed: %s", strerror(errno));
    goto out_close;
  }
  *fdOut = fd;
  if (boundOut != NULL) *boundOut = bound;
  return 0;

out_close:
  close(fd);
  return ret;
}

papcclResult_t papSocketListen(const union papSockAddr* addr, int reuseAddr, uint64_t deadlineNs,
                               const volatile int* abortFlag, int* fdOut,
                               union papSockAddr* boundOut) {
  char str[PAP_SOCKET_ADDR_STRLEN];
  int backoffMs = BACKOFF_MIN_MS;

  if (papSocketAddrLen(addr) == 0) {
    PAP_WARN("cannot listen on %s", papSocketAddrToString(addr, str, sizeof(str)));
    return papcclInvalidArgument;
  }
  for (;;) {
    int err = listenOnce(addr, reuseAddr, fdOut, boundOut);
    if (err == 0) return papcclSuccess;
    if (err != EADDRINUSE) return papcclSystemError;
    /* Someone holds the port for now (an old root closing, a connection passing through). */
    uint64_t wakeNs = papNowNs() + (uint64_t)backoffMs * 1000000ull;
    int why = sleepUntil(wakeNs, deadlineNs, abortFlag);
    if (why != 0) {
      PAP_WARN("bind to %s failed: %s%s", papSocketAddrToString(addr, str, sizeof(str)),
               strerror(EADDRINUSE), why == 2 ? " (aborted while retrying)" : "");
      return why == 2 ? papcclRemoteError : papcclSystemError;
    }
    backoffMs = backoffMs * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoffMs * 2;
  }
}

papcclResult_t papSocketAccept(int listenFd, int* fdOut, union papSockAddr* peerOut) {
  union papSockAddr peer;
  socklen_t len = sizeof(peer);
  int fd;

  memset(&peer, 0, sizeof(peer));
  do {
    fd = accept4(listenFd, &peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    /* Nothing pending, or a connection that died before we took it: not our error. */
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EPROTO) {
      *fdOut = -1;
      return papcclSuccess;
    }
    PAP_WARN("accept failed: %s", strerror(errno));
    return papcclSystemError;
  }
  setNoDelay(fd);
  *fdOut = fd;
  if (peerOut != NULL) *peerOut = peer;
  return papcclSuccess;
}

papcclResult_t papSocketPoll(struct pollfd* fds, int nfds, uint64_t deadlineNs,
                             const volatile int* abortFlag, const char* what) {
  for (;;) {
    if (papAborted(abortFlag)) {
      PAP_WARN("aborted while %s", what);
      return papcclRemoteError;
    }
    uint64_t now = papNowNs();
    if (now >= deadlineNs) {
      PAP_WARN("timeout while %s", what);
      return papcclRemoteError;
    }
    uint64_t leftMs = (deadlineNs - now + 999999) / 1000000;
    int ms = leftMs < PAP_SOCKET_POLL_SLICE_MS ? (int)leftMs : PAP_SOCKET_POLL_SLICE_MS;
    int r = poll(fds, (nfds_t)nfds, ms);
    if (r > 0) return papcclSuccess;
    if (r < 0 && errno != EINTR) {
      PAP_WARN("poll failed while %s: %s", what, strerror(errno));
      return papcclSystemError;
    }
  }
}

/* Errors that mean a peer is unreachable or not listening yet: retry until the deadline. */
static int connectRetryable(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET || err == EHOSTUNREACH ||
         err == ENETUNREACH || err == EAGAIN || err == EADDRNOTAVAIL;
}

/* A connect to a closed local port from the ephemeral range can connect to itself. */
static int isSelfConnect(int fd) {
  union papSockAddr a;
  union papSockAddr b;
  socklen_t la = sizeof(a);
  socklen_t lb = sizeof(b);
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  if (getsockname(fd, &a.sa, &la) != 0 || getpeername(fd, &b.sa, &lb) != 0) return 0;
  return la == lb && memcmp(&a, &b, la) == 0;
}

static papcclResult_t connectLoop(const union papSockAddr* addr, uint64_t deadlineNs,
                                  const volatile int* abortFlag, const char* what, int* fdOut,
                                  int retryRefused);

papcclResult_t papSocketConnect(const union papSockAddr* addr, uint64_t deadlineNs,
                                const volatile int* abortFlag, const char* what, int* fdOut) {
  return connectLoop(addr, deadlineNs, abortFlag, what, fdOut, 1);
}

papcclResult_t papSocketConnectListening(const union papSockAddr* addr, uint64_t deadlineNs,
                                         const volatile int* abortFlag, const char* what,
                                         int* fdOut) {
  return connectLoop(addr, deadlineNs, abortFlag, what, fdOut, 0);
}

int papSocketProbeGone(const union papSockAddr* addr, int waitMs, const void* msg, size_t len) {
  socklen_t alen = papSocketAddrLen(addr);
  if (alen == 0) return 0;
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int err = 0;
  if (connect(fd, &addr->sa, alen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      socklen_t elen = sizeof(err);
      err = poll(&pfd, 1, waitMs) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0
                ? err
                : EINPROGRESS;
    }
  }
  if (err == 0 && isSelfConnect(fd)) err = ECONNREFUSED;
  if (err == 0 && len > 0) (void)!send(fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  close(fd);
  return err == ECONNREFUSED;
}

static papcclResult_t connectLoop(const union papSockAddr* addr, uint64_t deadlineNs,
                                  const volatile int* abortFlag, const char* what, int* fdOut,
                                  int retryRefused) {
  char str[PAP_SOCKET_ADDR_STRLEN];
  socklen_t len = papSocketAddrLen(addr);
  int backoffMs = BACKOFF_MIN_MS;
  papcclResult_t res;

  if (len == 0) {
    PAP_WARN("cannot connect to %s while %s", papSocketAddrToString(addr, str, sizeof(str)), what);
    return papcclInvalidArgument;
  }
  for (;;) {
    int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      PAP_WARN("socket failed while %s: %s", what, strerror(errno));
      return papcclSystemError;
    }
    int err = 0;
    if (connect(fd, &addr->sa, len) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        socklen_t elen = sizeof(err);
        res = papSocketPoll(&pfd, 1, deadlineNs, abortFlag, what);
        if (res != papcclSuccess) {
          close(fd);
          return res;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
      }
    }
    if (err == 0 && isSelfConnect(fd)) err = ECONNREFUSED;
    if (err == 0) {
      setNoDelay(fd);
      *fdOut = fd;
      return papcclSuccess;
    }
    close(fd);
    if (err == ECONNREFUSED && !retryRefused) {
      PAP_WARN("%s refused the connection while %s: its process is gone",
               papSocketAddrToString(addr, str, sizeof(str)), what);
      return papcclRemoteError;
    }
    if (!connectRetryable(err)) {
      PAP_WARN("connect to %s failed while %s: %s", papSocketAddrToString(addr, str, sizeof(str)),
               what, strerror(err));
      return papcclSystemError;
    }
    /* Nobody listens yet (the root may start after us): back off, still watching abort. */
    int why = sleepUntil(papNowNs() + (uint64_t)backoffMs * 1000000ull, deadlineNs, abortFlag);
    if (why == 2) {
      PAP_WARN("aborted while %s", what);
      return papcclRemoteError;
    }
    if (why == 1) {
      PAP_WARN("timeout while %s (last error: %s)", what, strerror(err));
      return papcclRemoteError;
    }
    backoffMs = backoffMs * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoffMs * 2;
  }
}

/* An error on an established connection: the peer's fault unless it is a local misuse. */
static papcclResult_t ioError(int err, const char* op, const char* what) {
  PAP_WARN("%s failed while %s: %s", op, what, strerror(err));
  if (err == EBADF || err == ENOTSOCK || err == EFAULT || err == EINVAL || err == ENOMEM ||
      err == ENOBUFS)
    return papcclSystemError;
  return papcclRemoteError;
}

papcclResult_t papSocketTrySend(int fd, const void* buf, size_t len, size_t* doneInOut,
                                const char* what) {
  while (*doneInOut < len) {
    ssize_t n =
        send(fd, (const char*)buf + *doneInOut, len - *doneInOut, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *doneInOut += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return papcclSuccess;
    } else {
      return ioError(n < 0 ? errno : EPIPE, "send", what);
    }
  }
  return papcclSuccess;
}

papcclResult_t papSocketTryRecv(int fd, void* buf, size_t len, size_t* doneInOut,
                                const char* what) {
  while (*doneInOut < len) {
    ssize_t n = recv(fd, (char*)buf + *doneInOut, len - *doneInOut, MSG_DONTWAIT);
    if (n > 0) {
      *doneInOut += (size_t)n;
    } else if (n == 0) {
      PAP_WARN("connection closed by peer while %s (%zu of %zu bytes received)", what, *doneInOut,
               len);
      return papcclRemoteError;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return papcclSuccess;
    } else {
      return ioError(errno, "recv", what);
    }
  }
  return papcclSuccess;
}

papcclResult_t papSocketSendAll(int fd, const void* buf, size_t len, uint64_t deadlineNs,
                                const volatile int* abortFlag, const char* what) {
  size_t done = 0;
  for (;;) {
    papcclResult_t res = papSocketTrySend(fd, buf, len, &done, what);
    if (res != papcclSuccess || done == len) return res;
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    res = papSocketPoll(&pfd, 1, deadlineNs, abortFlag, what);
    if (res != papcclSuccess) return res;
  }
}

papcclResult_t papSocketRecvAll(int fd, void* buf, size_t len, uint64_t deadlineNs,
                                const volatile int* abortFlag, const char* what) {
  size_t done = 0;
  for (;;) {
    papcclResult_t res = papSocketTryRecv(fd, buf, len, &done, what);
    if (res != papcclSuccess || done == len) return res;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    res = papSocketPoll(&pfd, 1, deadlineNs, abortFlag, what);
    if (res != papcclSuccess) return res;
  }
}
