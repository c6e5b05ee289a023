/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap: the unique id (made, checked, decoded), the messages' header, and reading a
 * hello without blocking. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap_state.h"
#include "check.h"
#include "futex.h"
#include "log.h"
#include "param.h"

static const unsigned char idMagic[8] = {'p', 'a', 'p', 'c', 'c', 'l', 'I', 'D'};

/* ---- Encoding ------------------------------------------------------------------------ */

void papBootstrapPackHdr(unsigned char hdr[PAP_BOOTSTRAP_HDR_BYTES], int type, uint64_t payloadLen,
                         uint32_t seq, uint32_t step, const unsigned char key[16]) {
  uint16_t v16;
  uint64_t v64 = htobe64(payloadLen);
  bsPut32(hdr, PAP_BS_MSG_MAGIC);
  v16 = htobe16(PAP_BS_PROTO_VERSION);
  memcpy(hdr + 4, &v16, 2);
  v16 = htobe16((uint16_t)type);
  memcpy(hdr + 6, &v16, 2);
  bsPut32(hdr + 8, seq);
  bsPut32(hdr + 12, step);
  memcpy(hdr + 16, &v64, 8);
  memcpy(hdr + BS_HDR_KEY, key, PAP_BS_KEY_BYTES);
}

void papBootstrapUnpackHdr(const unsigned char* raw, struct bsHdr* h) {
  uint16_t v16;
  uint64_t v64;
  h->magic = bsGet32(raw);
  memcpy(&v16, raw + 4, 2);
  h->version = be16toh(v16);
  memcpy(&v16, raw + 6, 2);
  h->type = be16toh(v16);
  h->seq = bsGet32(raw + 8);
  h->step = bsGet32(raw + 12);
  memcpy(&v64, raw + 16, 8);
  h->len = be64toh(v64);
  memcpy(h->key, raw + BS_HDR_KEY, PAP_BS_KEY_BYTES);
}

void papBootstrapPackRootHello(unsigned char payload[PAP_BOOTSTRAP_ROOT_HELLO_BYTES], int rank,
                               int nranks, const struct papBootstrapAddr* addr) {
  bsPut32(payload, (uint32_t)rank);
  bsPut32(payload + 4, (uint32_t)nranks);
  memcpy(payload + 8, addr->bytes, PAP_BOOTSTRAP_ADDR_BYTES);
}

int papBootstrapCheckHdr(const unsigned char* raw, const unsigned char* key, int type, uint64_t len,
                         uint32_t seq, uint32_t step, char* why, size_t whyLen) {
  struct bsHdr h;
  papBootstrapUnpackHdr(raw, &h);
  if (h.magic != PAP_BS_MSG_MAGIC) {
    snprintf(why, whyLen, "bad magic 0x%08x", h.magic);
  } else if (h.version != PAP_BS_PROTO_VERSION) {
    snprintf(why, whyLen, "protocol version %u, expected %u", h.version, PAP_BS_PROTO_VERSION);
  } else if (key != NULL && !keyEqual(h.key, key)) {
    snprintf(why, whyLen, "wrong communicator key 0x%02x%02x%02x%02x...", h.key[0], h.key[1],
             h.key[2], h.key[3]);
  } else if (h.type != type) {
    snprintf(why, whyLen, "message type %u, expected %d", h.type, type);
  } else if (h.len != len) {
    snprintf(why, whyLen, "payload length %llu%s, expected %llu", (unsigned long long)h.len,
             h.len > PAP_BS_MAX_CTRL_PAYLOAD && len <= PAP_BS_MAX_CTRL_PAYLOAD ? " (absurd)" : "",
             (unsigned long long)len);
  } else if (h.seq != seq || h.step != step) {
    snprintf(why, whyLen, "collective %u step %u, expected collective %u step %u", h.seq, h.step,
             seq, step);
  } else {
    return 0;
  }
  return -1;
}

/* ---- Unique id ----------------------------------------------------------------------- */

papcclResult_t papBootstrapDecodeId(const papcclUniqueId* id, struct bsId* out,
                                    union papSockAddr* root) {
  char str[PAP_SOCKET_ADDR_STRLEN];
  if (id == NULL) {
    PAP_WARN("bootstrap: unique id is NULL");
    return papcclInvalidArgument;
  }
  memcpy(out, id->internal, sizeof(*out));
  if (memcmp(out->magic, idMagic, sizeof(idMagic)) != 0) {
    PAP_WARN("bootstrap: not a papccl unique id (bad magic 0x%02x%02x%02x%02x...)",
             (unsigned char)id->internal[0], (unsigned char)id->internal[1],
             (unsigned char)id->internal[2], (unsigned char)id->internal[3]);
    return papcclInvalidArgument;
  }
  if (ntohl(out->version) != BS_ID_VERSION) {
    PAP_WARN("bootstrap: unique id version %u, this library speaks %u", ntohl(out->version),
             BS_ID_VERSION);
    return papcclInvalidArgument;
  }
  if (bsAddrFromBytes(&out->root, root) != 0) {
    PAP_WARN("bootstrap: unique id holds an invalid root address %s",
             bsAddrStr(&out->root, str, sizeof(str)));
    return papcclInvalidArgument;
  }
  return papcclSuccess;
}

papcclResult_t papBootstrapCheckId(const papcclUniqueId* id) {
  struct bsId body;
  union papSockAddr root;
  return papBootstrapDecodeId(id, &body, &root);
}

papcclResult_t papBootstrapIdInfo(const papcclUniqueId* id, struct papBootstrapAddr* rootOut,
                                  unsigned char keyOut[16]) {
  struct bsId body;
  union papSockAddr root;
  PAP_CHECK(papBootstrapDecodeId(id, &body, &root));
  *rootOut = body.root;
  memcpy(keyOut, body.key, PAP_BS_KEY_BYTES);
  return papcclSuccess;
}

/* Every rank derives the same key from the same PAPCCL_COMM_ID string (FNV-1a, then a
 * splitmix64 finalizer per half). It tells communicators apart; it is not a secret. */
static void deriveKey(const char* str, unsigned char key[PAP_BS_KEY_BYTES]) {
  for (int half = 0; half < 2; half++) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)(half + 1) * 0x9e3779b97f4a7c15ull;
    const char* salt = "papccl-bootstrap-v1:";
    for (const char* p = salt; *p; p++)
      h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    for (const char* p = str; *p; p++)
      h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    h = htobe64(h);
    memcpy(key + 8 * half, &h, 8);
  }
}

papcclResult_t papBootstrapRandomKey(unsigned char key[PAP_BS_KEY_BYTES]) {
  size_t got = 0;
  while (got < PAP_BS_KEY_BYTES) {
    ssize_t n = getrandom(key + got, PAP_BS_KEY_BYTES - got, 0);
    if (n > 0) {
      got += (size_t)n;
    } else if (n < 0 && errno != EINTR) {
      PAP_WARN("bootstrap: getrandom failed: %s", strerror(errno));
      return papcclSystemError;
    }
  }
  return papcclSuccess;
}

/* ---- Reading hellos without blocking --------------------------------------------------- */

int papBootstrapHelloProgress(struct papBsHelloConn* c, const unsigned char* key, int type,
                              size_t payloadLen, char* why, size_t whyLen) {
  for (;;) {
    size_t want = c->got < PAP_BS_HDR ? PAP_BS_HDR : PAP_BS_HDR + payloadLen;
    if (c->got == want) return 1;
    ssize_t n = recv(c->fd, c->buf + c->got, want - c->got, MSG_DONTWAIT);
    if (n > 0) {
      c->got += (size_t)n;
      if (c->got == PAP_BS_HDR &&
          papBootstrapCheckHdr(c->buf, key, type, payloadLen, 0, 0, why, whyLen) != 0)
        return -1;
    } else if (n == 0) {
      snprintf(why, whyLen, "closed the connection after %zu of %zu bytes", c->got,
               PAP_BS_HDR + payloadLen);
      return -1;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return 0;
    } else if (errno != EINTR) {
      snprintf(why, whyLen, "recv failed: %s", strerror(errno));
      return -1;
    }
  }
}

papcclResult_t papBootstrapGetUniqueId(papcclUniqueId* id) {
  struct bsId body;
  union papSockAddr addr;
  char str[PAP_SOCKET_ADDR_STRLEN];
  char ifname[64];
  const char* commId;

  if (id == NULL) {
    PAP_WARN("bootstrap: GetUniqueId: id is NULL");
    return papcclInvalidArgument;
  }
  memset(&body, 0, sizeof(body));
  memcpy(body.magic, idMagic, sizeof(idMagic));
  body.version = htonl(BS_ID_VERSION);
  commId = papParamCommId();
  if (commId != NULL) {
    PAP_CHECK(papSocketParseHostPort(commId, &addr));
    deriveKey(commId, body.key);
    body.flags = htonl(BS_ID_FLAG_RANK0_SERVES);
    PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap: unique id for PAPCCL_COMM_ID=%s (%s), rank 0 serves it",
             commId, papSocketAddrToString(&addr, str, sizeof(str)));
  } else {
    PAP_CHECK(papBootstrapRandomKey(body.key));
    PAP_CHECK(papSocketFindIfAddr(&addr, ifname, sizeof(ifname)));
    PAP_CHECK(papBootstrapRootStart(&addr, 0, 0, body.key, body.key, 0, 0, NULL, &addr));
    PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap: root listening on %s (%s), key 0x%02x%02x%02x%02x...",
             papSocketAddrToString(&addr, str, sizeof(str)), ifname, body.key[0], body.key[1],
             body.key[2], body.key[3]);
  }
  addrToBs(&addr, &body.root);
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &body, sizeof(body));
  return papcclSuccess;
}

/* ---- Grow ids ---------------------------------------------------------------------------- */

papcclResult_t papBootstrapGetGrowId(papcclUniqueId* id) {
  struct bsId body;
  union papSockAddr addr;
  char str[PAP_SOCKET_ADDR_STRLEN];
  memset(&body, 0, sizeof(body));
  memcpy(body.magic, idMagic, sizeof(idMagic));
  body.version = htonl(BS_ID_VERSION);
  body.flags = htonl(BS_ID_FLAG_GROW);
  PAP_CHECK(papBootstrapRandomKey(body.key));
  PAP_CHECK(papSocketFindIfAddr(&addr, NULL, 0));
  PAP_CHECK(papBootstrapRootStart(&addr, 0, 1, body.key, body.key, 0, 0, NULL, &addr));
  PAP_INFO(PAP_LOG_BOOTSTRAP, "bootstrap: grow root listening on %s, key 0x%02x%02x%02x%02x...",
           papSocketAddrToString(&addr, str, sizeof(str)), body.key[0], body.key[1], body.key[2],
           body.key[3]);
  addrToBs(&addr, &body.root);
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &body, sizeof(body));
  return papcclSuccess;
}

int papBootstrapIdIsGrow(const papcclUniqueId* id) {
  struct bsId body;
  memcpy(&body, id->internal, sizeof(body));
  return memcmp(body.magic, idMagic, sizeof(idMagic)) == 0 &&
         (ntohl(body.flags) & BS_ID_FLAG_GROW) != 0;
}

void papBootstrapCancelGrow(const papcclUniqueId* id) {
  struct bsId body;
  union papSockAddr root;
  unsigned char hdr[PAP_BS_HDR];
  int fd = -1;
  if (papBootstrapDecodeId(id, &body, &root) != papcclSuccess) return;
  /* The root runs in this process: it is there at once, or it has finished. */
  if (papSocketConnectListening(&root, papNowNs() + 1000000000ull, NULL, "the grow's root", &fd) !=
      papcclSuccess)
    return;
  papBootstrapPackHdr(hdr, PAP_BOOTSTRAP_MSG_ROOT_CANCEL, 0, 0, 0, body.key);
  (void)papSocketSendAll(fd, hdr, sizeof(hdr), papNowNs() + 1000000000ull, NULL,
                         "calling off the grow at its root");
  close(fd);
}
