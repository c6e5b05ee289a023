/* SPDX-License-Identifier: Apache-2.0 */
/* The ib backend's listen handle and its codec (no device needed: unit tests and the fuzzer
 * run it everywhere). */
#ifndef PAPCCL_TRANSPORT_IB_IB_HANDLE_H_
#define PAPCCL_TRANSPORT_IB_IB_HANDLE_H_

#include <stddef.h>
#include <stdint.h>

#include "papccl.h"

/* ---- Listen handle --------------------------------------------------------------------- */

/* Layout (little-endian): magic u64, version u16, link layer u8, active MTU u8, rank u32,
 * nranks u32, LID u16, port u8, reserved u8, GID[16], board address u64, board rkey u32,
 * encoded length u32, checksum u32 (FNV-1a of the handle with this field zero), bounce
 * buffer bytes u32, buffers per peer u32, reserved u32; then nranks queue-pair numbers of
 * 24 bits each (entry p: the QP this rank keeps for peer p). */
#define PAP_IB_HANDLE_BYTES 4096
#define PAP_IB_HANDLE_HDR_BYTES 72
#define PAP_IB_HANDLE_MAGIC 0x3130626970617070ull /* "ppapib01" */
#define PAP_IB_HANDLE_VERSION 1
#define PAP_IB_MAX_RANKS ((PAP_IB_HANDLE_BYTES - PAP_IB_HANDLE_HDR_BYTES) / 3)

struct papIbHandle {
  int rank;
  int nranks;
  uint8_t linkLayer; /* IBV_LINK_LAYER_* */
  uint8_t mtu; /* enum ibv_mtu */
  uint16_t lid;
  uint8_t port;
  uint8_t gid[16];
  uint64_t boardAddr; /* rank 0 only: the arrival board */
  uint32_t boardRkey;
  uint32_t bufSize; /* eager protocol: every rank must use the same */
  uint32_t nbufs;
};

/* Encoded bytes for nranks, or 0 when nranks is out of [1, PAP_IB_MAX_RANKS]. */
size_t papIbHandleSize(int nranks);
/* Writes h and qpns[h->nranks] into buf (bufBytes, at least papIbHandleSize); the rest of buf
 * is zeroed. On error *whyOut names the cause (no logging: the caller logs). */
papcclResult_t papIbHandleEncode(const struct papIbHandle* h, const uint32_t* qpns, void* buf,
                                 size_t bufBytes, const char** whyOut);
/* Validates buf (bufBytes readable) as the handle of rank expectRank in a comm of
 * expectNranks and fills hOut; papcclInternalError with *whyOut on a corrupt handle. */
papcclResult_t papIbHandleDecode(const void* buf, size_t bufBytes, int expectRank, int expectNranks,
                                 struct papIbHandle* hOut, const char** whyOut);
/* Entry idx of a handle that papIbHandleDecode accepted. */
uint32_t papIbHandleQpn(const void* buf, int idx);

#endif /* PAPCCL_TRANSPORT_IB_IB_HANDLE_H_ */
