/* SPDX-License-Identifier: Apache-2.0 */
/* The ib listen handle's codec. */
#include "ib/ib_handle.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"

/* ---- Listen handle --------------------------------------------------------------------- */

enum {
  OFF_MAGIC = 0,
  OFF_VERSION = 8,
  OFF_LINK = 10,
  OFF_MTU = 11,
  OFF_RANK = 12,
  OFF_NRANKS = 16,
  OFF_LID = 20,
  OFF_PORT = 22,
  OFF_GID = 24,
  OFF_BOARD_ADDR = 40,
  OFF_BOARD_RKEY = 48,
  OFF_BYTES = 52,
  OFF_SUM = 56,
  OFF_BUF_SIZE = 60,
  OFF_NBUFS = 64
};

static void put(unsigned char* p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* FNV-1a over the encoded handle, the checksum field counted as zero. */
static uint32_t handleSum(const unsigned char* p, size_t bytes) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < bytes; i++) {
    unsigned char b = (i >= OFF_SUM && i < OFF_SUM + 4) ? 0 : p[i];
    h = (h ^ b) * 16777619u;
  }
  return h;
}

size_t papIbHandleSize(int nranks) {
  if (nranks < 1 || nranks > PAP_IB_MAX_RANKS) return 0;
  return PAP_IB_HANDLE_HDR_BYTES + 3 * (size_t)nranks;
}

papcclResult_t papIbHandleEncode(const struct papIbHandle* h, const uint32_t* qpns, void* buf,
                                 size_t bufBytes, const char** whyOut) {
  if (h == NULL || qpns == NULL || buf == NULL) {
    *whyOut = "NULL argument";
    return papcclInvalidArgument;
  }
  size_t bytes = papIbHandleSize(h->nranks);
  if (bytes == 0) {
    *whyOut = "nranks does not fit in the handle (at most PAP_IB_MAX_RANKS)";
    return papcclInvalidUsage;
  }
  if (bytes > bufBytes) {
    *whyOut = "buffer too small for the handle";
    return papcclInvalidArgument;
  }
  if (h->rank < 0 || h->rank >= h->nranks) {
    *whyOut = "rank out of range";
    return papcclInvalidArgument;
  }
  unsigned char* p = (unsigned char*)buf;
  memset(p, 0, bufBytes);
  put(p + OFF_MAGIC, PAP_IB_HANDLE_MAGIC, 8);
  put(p + OFF_VERSION, PAP_IB_HANDLE_VERSION, 2);
  p[OFF_LINK] = h->linkLayer;
  p[OFF_MTU] = h->mtu;
  put(p + OFF_RANK, (uint32_t)h->rank, 4);
  put(p + OFF_NRANKS, (uint32_t)h->nranks, 4);
  put(p + OFF_LID, h->lid, 2);
  p[OFF_PORT] = h->port;
  memcpy(p + OFF_GID, h->gid, 16);
  put(p + OFF_BOARD_ADDR, h->boardAddr, 8);
  put(p + OFF_BOARD_RKEY, h->boardRkey, 4);
  put(p + OFF_BYTES, (uint32_t)bytes, 4);
  put(p + OFF_BUF_SIZE, h->bufSize, 4);
  put(p + OFF_NBUFS, h->nbufs, 4);
  for (int i = 0; i < h->nranks; i++) {
    if (qpns[i] > 0xffffff) {
      *whyOut = "queue-pair number wider than 24 bits";
      return papcclInternalError;
    }
    put(p + PAP_IB_HANDLE_HDR_BYTES + 3 * (size_t)i, qpns[i], 3);
  }
  put(p + OFF_SUM, handleSum(p, bytes), 4);
  return papcclSuccess;
}

papcclResult_t papIbHandleDecode(const void* buf, size_t bufBytes, int expectRank, int expectNranks,
                                 struct papIbHandle* hOut, const char** whyOut) {
  const unsigned char* p = (const unsigned char*)buf;
  if (buf == NULL || hOut == NULL) {
    *whyOut = "NULL argument";
    return papcclInvalidArgument;
  }
  if (bufBytes < PAP_IB_HANDLE_HDR_BYTES) {
    *whyOut = "truncated (shorter than the header)";
    return papcclInternalError;
  }
  if (get(p + OFF_MAGIC, 8) != PAP_IB_HANDLE_MAGIC) {
    *whyOut = "bad magic (not an ib handle)";
    return papcclInternalError;
  }
  if (get(p + OFF_VERSION, 2) != PAP_IB_HANDLE_VERSION) {
    *whyOut = "unsupported version (mixed library versions?)";
    return papcclInternalError;
  }
  uint32_t nranks = (uint32_t)get(p + OFF_NRANKS, 4);
  uint32_t rank = (uint32_t)get(p + OFF_RANK, 4);
  if ((int64_t)nranks != expectNranks) {
    *whyOut = "wrong nranks (the handle belongs to another communicator)";
    return papcclInternalError;
  }
  if ((int64_t)rank != expectRank) {
    *whyOut = "wrong rank";
    return papcclInternalError;
  }
  if (rank >= nranks) {
    *whyOut = "rank out of range";
    return papcclInternalError;
  }
  size_t bytes = papIbHandleSize((int)nranks);
  if (bytes == 0 || get(p + OFF_BYTES, 4) != bytes) {
    *whyOut = "bad length field";
    return papcclInternalError;
  }
  if (bytes > bufBytes) {
    *whyOut = "truncated (queue-pair table cut off)";
    return papcclInternalError;
  }
  if ((uint32_t)get(p + OFF_SUM, 4) != handleSum(p, bytes)) {
    *whyOut = "checksum mismatch (corrupt handle)";
    return papcclInternalError;
  }
  memset(hOut, 0, sizeof(*hOut));
  hOut->rank = (int)rank;
  hOut->nranks = (int)nranks;
  hOut->linkLayer = p[OFF_LINK];
  hOut->mtu = p[OFF_MTU];
  hOut->lid = (uint16_t)get(p + OFF_LID, 2);
  hOut->port = p[OFF_PORT];
  memcpy(hOut->gid, p + OFF_GID, 16);
  hOut->boardAddr = get(p + OFF_BOARD_ADDR, 8);
  hOut->boardRkey = (uint32_t)get(p + OFF_BOARD_RKEY, 4);
  hOut->bufSize = (uint32_t)get(p + OFF_BUF_SIZE, 4);
  hOut->nbufs = (uint32_t)get(p + OFF_NBUFS, 4);
  return papcclSuccess;
}

uint32_t papIbHandleQpn(const void* buf, int idx) {
  return (uint32_t)get((const unsigned char*)buf + PAP_IB_HANDLE_HDR_BYTES + 3 * (size_t)idx, 3);
}
