/* SPDX-License-Identifier: Apache-2.0 */
/* The shm backend's checks of what peers put in shared memory or send in their handles,
 * callable without a segment (the fuzzers use them). */
#ifndef PAPCCL_TRANSPORT_SHM_SHM_H_
#define PAPCCL_TRANSPORT_SHM_SHM_H_

#include <stddef.h>
#include <stdint.h>

#include "transport.h"

#define PAP_SHM_HEADER_BYTES 72 /* struct shmHeader: the start of every segment */
#define PAP_SHM_META_BYTES 16 /* struct shmMeta: tag u64, bytes u32, pad u32 (host order) */
#define PAP_SHM_NAME_PREFIX "/papccl-"

/* The segment name in a peer's listen handle (handleBytes readable), copied to nameOut: 0, or
 * -1 when the handle holds no NUL-terminated PAP_SHM_NAME_PREFIX name of less than nameLen
 * bytes without another '/'. */
int papShmHandleName(const void* handle, size_t handleBytes, char* nameOut, size_t nameLen);

/* Checks a peer's segment header (PAP_SHM_HEADER_BYTES at hdr, as mapped; the magic is read
 * with acquire): 0 when it is the segment of rank peer in a communicator of nranks, -1
 * otherwise. */
int papShmCheckHeader(const void* hdr, int nranks, int peer);

/* Delivers one record of an inbound FIFO, meta (PAP_SHM_META_BYTES, in shared memory: read
 * once) with its slot's data (slotSize bytes), to the receive posted with wantTag for total
 * bytes of which off are done: copied to rbuf + off, or handed to sink when it is not NULL.
 * Returns the bytes delivered, or -1 (nothing touched) when the record carries another tag,
 * claims more than a slot holds or more than the receive has left. *tagOut and *bytesOut get
 * what the record claimed. */
int64_t papShmTakeRecord(const void* meta, const char* slot, uint32_t slotSize, uint64_t wantTag,
                         size_t off, size_t total, char* rbuf, const struct papRecvSink* sink,
                         uint64_t* tagOut, uint32_t* bytesOut);

#endif /* PAPCCL_TRANSPORT_SHM_SHM_H_ */
