/* SPDX-License-Identifier: Apache-2.0 */
/* An inbound shm FIFO as a broken or hostile local peer may fill it, drained the way
 * progressRecvs drains it, through papShmTakeRecord (the code that reads each record and
 * copies its slot out). Input:
 *   byte 0  nslots - 1 (mod 8), byte 1  slotSize - 1 (mod 64), byte 2  head (records the
 *           peer published, mod 4 * nslots);
 *   nslots records of PAP_SHM_META_BYTES (tag u64, bytes u32, pad u32, host order);
 *   then receives of 4 bytes each, posted in order: tag (u8), total bytes (u16 LE, mod 512),
 *           flags (bit 0: deliver through a sink instead of a copy).
 * The slots' data is a pattern; every buffer is allocated at its exact size, so a record
 * that is delivered beyond its slot or the receive is caught. */
#include <string.h>

#include "fuzz_common.h"
#include "shm/shm.h"

#define MAX_RECVS 16

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzQuietLog();
  return 0;
}

struct sinkState {
  char* dst; /* exact size: total */
  size_t total;
  size_t next; /* pieces come in order */
};

static void sinkFn(void* arg, size_t offset, const void* src, size_t bytes) {
  struct sinkState* s = (struct sinkState*)arg;
  FUZZ_ASSERT(offset == s->next);
  memcpy(s->dst + offset, src, bytes);
  s->next = offset + bytes;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  uint32_t nslots = 1 + data[0] % 8;
  uint32_t slotSize = 1 + data[1] % 64;
  uint64_t head = data[2] % (4 * nslots);
  data += 3;
  size -= 3;
  size_t metaBytes = (size_t)nslots * PAP_SHM_META_BYTES;
  if (size < metaBytes) return 0;
  uint64_t* metas = malloc(metaBytes); /* u64: aligned as in the segment */
  char* slots = malloc((size_t)nslots * slotSize);
  if (metas == NULL || slots == NULL) goto out;
  memcpy(metas, data, metaBytes);
  for (size_t i = 0; i < (size_t)nslots * slotSize; i++)
    slots[i] = (char)(i * 7 + 1);
  data += metaBytes;
  size -= metaBytes;

  uint64_t tail = 0;
  for (int k = 0; k < MAX_RECVS && size >= 4; k++, data += 4, size -= 4) {
    uint64_t tag = data[0];
    size_t total = ((size_t)data[1] | (size_t)data[2] << 8) % 512;
    int useSink = data[3] & 1;
    char* rbuf = malloc(total ? total : 1);
    if (rbuf == NULL) break;
    struct sinkState ss = {rbuf, total, 0};
    struct papRecvSink sink = {sinkFn, &ss};
    size_t off = 0;
    int started = 0;
    int stop = 0;
    while (off < total || !started) {
      if (tail == head) {
        stop = 1; /* nothing more published: the receive stays posted */
        break;
      }
      uint32_t slot = (uint32_t)(tail % nslots);
      uint64_t mtag;
      uint32_t mbytes;
      int64_t n = papShmTakeRecord((const char*)metas + (size_t)slot * PAP_SHM_META_BYTES,
                                   slots + (size_t)slot * slotSize, slotSize, tag, off, total, rbuf,
                                   useSink ? &sink : NULL, &mtag, &mbytes);
      if (n < 0) {
        stop = 1; /* the engine fails the op */
        break;
      }
      FUZZ_ASSERT((uint64_t)n == mbytes && mtag == tag && n <= slotSize);
      FUZZ_ASSERT(off + (size_t)n <= total);
      off += (size_t)n;
      started = 1;
      tail++;
    }
    if (!stop) FUZZ_ASSERT(off == total);
    free(rbuf);
    if (stop) break;
  }
out:
  free(metas);
  free(slots);
  return 0;
}
