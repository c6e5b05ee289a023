/* SPDX-License-Identifier: Apache-2.0 */
/* Native InfiniBand/RoCE transport: the device. Its parameters (PAPCCL_IB_*), the device and
 * port it runs on (PAPCCL_IB_HCA, or the first active port), that port's addresses and the
 * GID a RoCE port uses. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ib/ib.h"
#include "log.h"
#include "param.h"

/* The GID to use on an Ethernet port: PAPCCL_IB_GID_INDEX, else the first RoCE v2 GID
 * (IPv4-mapped preferred), else index 0. */
static int pickGid(struct ibState* st, int tableLen) {
  int64_t want = papParamIbGidIndex();
  if (want >= 0) return (int)want;
  int firstV2 = -1;
  for (int i = 0; i < tableLen; i++) {
    struct ibv_gid_entry e;
    if (ibv_query_gid_ex(st->ctx, st->port, (uint32_t)i, &e, 0) != 0) continue;
    if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(e.gid.raw, v4, sizeof(v4)) == 0) return i;
    if (firstV2 < 0) firstV2 = i;
  }
  return firstV2 >= 0 ? firstV2 : 0;
}

papcclResult_t papIbOpenDevice(struct ibState* st) {
  int n = 0;
  errno = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) {
    if (list == NULL && errno != 0)
      PAP_WARN("ib: no RDMA device found (ibv_get_device_list: %s)", strerror(errno));
    else
      PAP_WARN("ib: no RDMA device found");
    if (list) ibv_free_device_list(list);
    return papcclSystemError;
  }
  const char* want = papParamIbHca();
  char name[64] = "";
  int wantPort = 0;
  if (want) {
    const char* colon = strchr(want, ':');
    size_t len = colon ? (size_t)(colon - want) : strlen(want);
    if (len >= sizeof(name)) len = sizeof(name) - 1;
    memcpy(name, want, len);
    name[len] = '\0';
    if (colon) wantPort = atoi(colon + 1);
    if (colon && (wantPort < 1 || wantPort > 255)) {
      PAP_WARN("ib: invalid port in PAPCCL_IB_HCA '%s'", want);
      ibv_free_device_list(list);
      return papcclInvalidUsage;
    }
  }
  struct ibv_device_attr da;
  struct ibv_port_attr pa;
  for (int d = 0; d < n && st->ctx == NULL; d++) {
    if (want && strcmp(ibv_get_device_name(list[d]), name) != 0) continue;
    struct ibv_context* ctx = ibv_open_device(list[d]);
    if (ctx == NULL) {
      PAP_INFO(PAP_LOG_IB, "ib: cannot open %s: %s", ibv_get_device_name(list[d]), strerror(errno));
      continue;
    }
    if (ibv_query_device(ctx, &da) == 0) {
      for (int p = 1; p <= da.phys_port_cnt && st->ctx == NULL; p++) {
        if (wantPort && p != wantPort) continue;
        if (ibv_query_port(ctx, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
          st->ctx = ctx;
          st->port = (uint8_t)p;
        }
      }
    }
    if (st->ctx == NULL) ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (st->ctx == NULL) {
    if (want)
      PAP_WARN("ib: device '%s' (PAPCCL_IB_HCA) not found or without an active port", want);
    else
      PAP_WARN("ib: no RDMA device with an active port");
    return papcclSystemError;
  }
  const char* dev = ibv_get_device_name(st->ctx->device);
  if (da.atomic_cap == IBV_ATOMIC_NONE || da.max_qp_rd_atom < 1 || da.max_qp_init_rd_atom < 1) {
    PAP_WARN("ib: %s has no RDMA atomics (the arrival board needs them)", dev);
    return papcclSystemError;
  }
  st->linkLayer = pa.link_layer;
  st->mtu = (uint8_t)pa.active_mtu;
  st->lid = pa.lid;
  st->maxMsg = pa.max_msg_sz && pa.max_msg_sz < (1u << 30) ? pa.max_msg_sz : (1u << 30);
  if (st->linkLayer != IBV_LINK_LAYER_ETHERNET && st->lid == 0) {
    PAP_WARN("ib: %s port %d has no LID (is a subnet manager running?)", dev, st->port);
    return papcclSystemError;
  }
  st->gidIndex = st->linkLayer == IBV_LINK_LAYER_ETHERNET ? pickGid(st, pa.gid_tbl_len) : 0;
  if (ibv_query_gid(st->ctx, st->port, st->gidIndex, &st->gid) != 0) {
    PAP_WARN("ib: %s port %d has no GID at index %d", dev, st->port, st->gidIndex);
    return papcclSystemError;
  }
  size_t cqe = (size_t)(st->base.ctx.nranks) * (size_t)(st->nbufs + IB_SQ_EXTRA + st->nrecv) + 16;
  if (cqe > (size_t)da.max_cqe || st->nbufs + IB_SQ_EXTRA > da.max_qp_wr) {
    PAP_WARN(
        "ib: %d peers with %d buffers each exceed %s's queues (%d CQ entries, %d WRs); "
        "lower PAPCCL_IB_NBUFS",
        st->base.ctx.nranks - 1, st->nbufs, dev, da.max_cqe, da.max_qp_wr);
    return papcclInvalidUsage;
  }
  PAP_INFO(PAP_LOG_IB | PAP_LOG_INIT, "ib: rank %d uses %s port %d (%s, lid 0x%x, gid index %d)",
           st->base.ctx.rank, dev, st->port,
           st->linkLayer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB", st->lid, st->gidIndex);
  return papcclSuccess;
}

papcclResult_t papIbReadParams(struct ibState* st) {
  int64_t nbufs = papParamIbNbufs(), bufSize = papParamIbBufSize(), rdmaMin = papParamIbRdmaMin();
  int64_t cache = papParamIbMrCache(), timeout = papParamIbTimeout();
  if (nbufs < 1 || nbufs > 4096 || bufSize < 256 || bufSize > (1 << 24) || rdmaMin < 0 ||
      cache < 0 || cache > (1 << 20) || timeout < 1 || timeout > 31 || papParamIbGidIndex() < -1) {
    PAP_WARN(
        "ib: invalid parameters: PAPCCL_IB_NBUFS %lld (1-4096), PAPCCL_IB_BUF_SIZE %lld "
        "(256-16M), PAPCCL_IB_RDMA_MIN %lld, PAPCCL_IB_MR_CACHE %lld, PAPCCL_IB_TIMEOUT %lld "
        "(1-31), PAPCCL_IB_GID_INDEX %lld",
        (long long)nbufs, (long long)bufSize, (long long)rdmaMin, (long long)cache,
        (long long)timeout, (long long)papParamIbGidIndex());
    return papcclInvalidUsage;
  }
  st->nbufs = (int)nbufs;
  bufSize &= ~(int64_t)63; /* chunks stay whole elements for reducing sinks */
  st->nrecv = (int)nbufs + IB_NCTRL;
  st->bufSize = (size_t)bufSize;
  st->rdmaMin = (size_t)rdmaMin;
  st->timeout = (int)timeout;
  return papcclSuccess;
}
