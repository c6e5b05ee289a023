/* SPDX-License-Identifier: Apache-2.0 */
/* The registry of PAPCCL_* environment parameters: one line each, read once, cached. */
#ifndef PAPCCL_CORE_PARAM_H_
#define PAPCCL_CORE_PARAM_H_

#include <stdint.h>

/* The logging variables, read by log.c when it first logs (not through this registry):
 * X(env name, default as documented, doc). docs/PARAMETERS.md is generated from these lists
 * (scripts/gen-params.py; the unit suite checks it is current). */
#define PAP_PARAM_LOG_LIST(X) \
  X("PAPCCL_DEBUG", "WARN", \
    "log level: `NONE`, `VERSION`, `WARN`, `INFO`, `TRACE` (TRACE needs `-Dtrace=true`)") \
  X("PAPCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV", \
    "subsystems logged at INFO: comma list of " \
    "`INIT,BOOTSTRAP,COLL,PAP,PROXY,NET,SHM,UCX,IB,REG,ALLOC,ENV,ALL`; a leading `^` inverts it") \
  X("PAPCCL_DEBUG_FILE", "stderr", "log file; `%h` becomes the host name, `%p` the pid")

/* X(getter, env name, default, min, max, doc). Integer parameters. A value that is not an integer, or lies outside [min, max], gives a WARN naming the
 * variable and the default. */
#define PAP_PARAM_INT_LIST(X) \
  X(TimeoutS, "PAPCCL_TIMEOUT_S", 600, 1, 31536000, \
    "seconds any wait may last before it fails (dead peer)") \
  X(SpinUs, "PAPCCL_SPIN_US", 50, 0, 10000000, \
    "microseconds a wait polls (yielding the core when ranks outnumber CPUs) before it sleeps") \
  X(ChunkSize, "PAPCCL_CHUNK_SIZE", 262144, 64, 1073741824, \
    "bytes per pipeline chunk in collective plans") \
  X(ShmSlotSize, "PAPCCL_SHM_SLOT_SIZE", 65536, 4096, 67108864, \
    "bytes per shared-memory FIFO slot") \
  X(ShmSlots, "PAPCCL_SHM_NSLOTS", 8, 2, 1024, "slots per peer FIFO (credits)") \
  X(ShmStagingSize, "PAPCCL_SHM_STAGING_SIZE", 1048576, 0, 17179869184, \
    "bytes of each rank's shared staging area, where AC2S publishes final chunks once for every " \
    "local reader (`0`: finals go through the FIFOs)") \
  X(RhdMaxBytes, "PAPCCL_RHD_MAX_BYTES", 262144, 0, 1099511627776, \
    "allreduce below this size uses rhd (recursive halving/doubling), above it ring") \
  X(RdMaxBytes, "PAPCCL_RD_MAX_BYTES", 4096, 0, 1099511627776, \
    "rhd below this size exchanges whole vectors") \
  X(PipelineDepth, "PAPCCL_PIPELINE_DEPTH", 256, 8, 65536, \
    "plan steps scanned ahead by the engine") \
  X(Pap, "PAPCCL_PAP", 1, 0, 1, \
    "`0` turns PAP-aware plans off (arrivals and statistics are still recorded)") \
  X(Hier, "PAPCCL_HIER", 1, 0, 1, \
    "when ranks span hosts and a host has several: allreduce = reduce to the host leader (shared " \
    "memory), allreduce among leaders (network), broadcast; `0`: one flat plan over the network") \
  X(StreamMinBytes, "PAPCCL_STREAM_MIN_BYTES", 67108864, 0, 1099511627776, \
    "from this result size up, the last copy of each piece into the caller's buffer bypasses " \
    "the caches (non-temporal stores); smaller results stay in cache for the caller") \
  X(HierRails, "PAPCCL_HIER_RAILS", 1, 0, 1, \
    "when every host holds as many ranks: a hierarchical allreduce whose count they divide " \
    "reduce-scatters on the host, each local rank allreduces its slice with its peers of the " \
    "other hosts, then allgathers; `0`: only the host leaders cross the network") \
  X(HierMinBytes, "PAPCCL_HIER_MIN_BYTES", 131072, 0, 1099511627776, \
    "allreduces smaller than this take one flat plan over the network instead of the host " \
    "hierarchy: its three collectives in a row cost more than they save on small messages") \
  X(Deterministic, "PAPCCL_DETERMINISTIC", 0, 0, 1, \
    "`1`: allreduce results bitwise identical whatever the arrival order, the commit point and " \
    "the chunking (AC2S with one canonical reduction tree)") \
  X(PapProbe, "PAPCCL_PAP_PROBE", 4, 1, 65536, \
    "over a network (UCX), a collective whose size runs classic plans goes through the arrival " \
    "board only on probe calls (to measure the arrivals); the others need no message to rank " \
    "0. The first gap between probes is this many calls; it doubles after each probe that " \
    "keeps the classic plan, up to 16 times this, and starts over when one chooses a " \
    "PAP-aware plan. `1`: every call") \
  X(PapReport, "PAPCCL_PAP_REPORT", 100, 0, 1000000000, \
    "collectives between the one-line PAP summaries (`PAPCCL_DEBUG=INFO`, subsystem `PAP`); `0` " \
    "= none") \
  X(PapGapUs, "PAPCCL_PAP_GAP_US", 100, 0, 60000000, \
    "least quiet time (no new arrival) before the decider commits an early set") \
  X(FlatMaxBytes, "PAPCCL_FLAT_MAX_BYTES", 4096, 0, 1048576, \
    "allreduce up to this size on one host runs flat: each rank publishes its input in its " \
    "own shared line and reduces every line itself, in rank order (`0`: off)") \
  X(CheckMismatch, "PAPCCL_CHECK_MISMATCH", 1, 0, 1, \
    "`1`: every rank of a collective whose calls differ (kind, count, datatype, op, root) fails " \
    "it with `papcclInvalidUsage`, naming both calls; `0`: no check (mismatched calls may " \
    "return wrong results or hang until `PAPCCL_TIMEOUT_S`)") \
  X(PapSmallMaxBytes, "PAPCCL_PAP_SMALL_MAX_BYTES", 32768, 0, 1099511627776, \
    "at or below this size the PAP allreduce is the small-message variant") \
  X(PapAlphaNs, "PAPCCL_PAP_ALPHA_NS", 1000, 0, 1000000000, \
    "the selector's cost model: latency of one message (ns)") \
  X(PapBetaPs, "PAPCCL_PAP_BETA_PS", 200, 0, 1000000000, \
    "the selector's cost model: transfer time per byte (ps)") \
  X(PapGammaPs, "PAPCCL_PAP_GAMMA_PS", 250, 0, 1000000000, \
    "the selector's cost model: reduction time per byte (ps)") \
  X(Cuda, "PAPCCL_CUDA", 1, 0, 1, \
    "`0` turns GPU support off: no CUDA call at all, host buffers only") \
  X(CudaStagingMb, "PAPCCL_CUDA_STAGING_MB", 1024, 1, 1048576, \
    "device ops: pinned staging per communicator (MiB) past which a caller running ahead of its " \
    "streams waits for a block to come free") \
  X(CudaIpc, "PAPCCL_CUDA_IPC", 1, 0, 1, \
    "`1`: ranks of one host with GPUs run collectives through each other's device memory (CUDA " \
    "IPC); `0`: pinned staging") \
  X(CudaIpcMb, "PAPCCL_CUDA_IPC_MB", 64, 1, 65536, \
    "CUDA IPC: device arena per rank (MiB); larger collectives run in rounds of half of it") \
  X(CudaIpcMinBytes, "PAPCCL_CUDA_IPC_MIN_BYTES", 65536, 0, 1099511627776LL, \
    "CUDA IPC: collectives of fewer bytes per rank take the ordinary path (a guess until " \
    "measured on a GPU: `GpuColls.ReportIpcCrossover`)") \
  X(CudaMemops, "PAPCCL_CUDA_MEMOPS", 1, 0, 1, \
    "device ops: `1` stream memory operations for the arrival write and the wait, `0` one-thread " \
    "kernels") \
  X(IbGidIndex, "PAPCCL_IB_GID_INDEX", -1, -1, 255, \
    "ib: GID index (`-1`: a RoCE v2 GID on Ethernet ports, 0 on InfiniBand)") \
  X(IbMrCache, "PAPCCL_IB_MR_CACHE", 64, 0, 1048576, \
    "ib: idle memory registrations kept (`0`: register per message)") \
  X(IbBufSize, "PAPCCL_IB_BUF_SIZE", 16384, 1024, 67108864, "ib: bytes per eager bounce buffer") \
  X(IbNbufs, "PAPCCL_IB_NBUFS", 8, 2, 1024, "ib: eager buffers (credits) per peer") \
  X(IbRdmaMin, "PAPCCL_IB_RDMA_MIN", 65536, 0, 1099511627776, \
    "ib: larger messages are RDMA-written straight into the receiver's buffer") \
  X(IbTimeout, "PAPCCL_IB_TIMEOUT", 18, 1, 31, \
    "ib: queue-pair ack timeout exponent (4.096 us x 2^n, 7 retries)") \
  X(DumpSignal, "PAPCCL_DUMP_SIGNAL", 0, 0, 64, \
    "a signal number (`10` is SIGUSR1 on Linux): on it every communicator of the process logs " \
    "what it waits for, as `papcclCommDumpState` gives it (hang diagnosis); `0`: none")

/* X(getter, env name, default, doc). String parameters (NULL default = unset). */
#define PAP_PARAM_STR_LIST(X) \
  X(Algo, "PAPCCL_ALGO", NULL, \
    "force an allreduce algorithm: classic `ring` or `rhd`, PAP-aware `ac2s`, `chain` or " \
    "`small`; `pap` lets the selector pick the allreduce and forces the PAP plans of " \
    "ReduceScatter, AllGather, Broadcast and Reduce (any PAP name does; `ring`/`rhd` keep them " \
    "classic)") \
  X(CommId, "PAPCCL_COMM_ID", NULL, "`host:port` of the bootstrap root; launchers set it") \
  X(SocketIfname, "PAPCCL_SOCKET_IFNAME", NULL, "network interface for bootstrap sockets") \
  X(Transport, "PAPCCL_TRANSPORT", NULL, \
    "force a transport by name (`shm`, `ucx`, `ib`); one that cannot start here falls back, with " \
    "a WARN, to the first that reaches every peer") \
  X(HostId, "PAPCCL_HOSTID", NULL, "override the host id (forces the network path in tests)") \
  X(IbHca, "PAPCCL_IB_HCA", NULL, \
    "ib: device`[:port]` (default: the first device with an active port)") \
  X(Fault, "PAPCCL_FAULT", NULL, \
    "builds with tests only: kill, stall or delay a rank at `bootstrap`, `chunk` or `commit` " \
    "(grammar in `src/core/fault.h`; see [TESTING.md](TESTING.md))")

#define PAP_PARAM_DECL_INT(getter, env, def, lo, hi, doc) int64_t papParam##getter(void);
#define PAP_PARAM_DECL_STR(getter, env, def, doc) const char* papParam##getter(void);
PAP_PARAM_INT_LIST(PAP_PARAM_DECL_INT)
PAP_PARAM_STR_LIST(PAP_PARAM_DECL_STR)
#undef PAP_PARAM_DECL_INT
#undef PAP_PARAM_DECL_STR

/* Parses an integer parameter's value s as strtoll base 0 does, the whole string: 0 with
 * *valueOut, -2 with *valueOut when it lies outside [lo, hi], -1 when s is no integer. */
int papParamParseInt(const char* s, int64_t lo, int64_t hi, int64_t* valueOut);

/* Forget cached values (tests that change the environment between comms). */
void papParamReset(void);
/* Counts papParamReset calls: a value derived from parameters is cached with it. */
unsigned papParamGeneration(void);

/* The integer parameters, for tests: count, and the i-th one's name, default and range;
 * papParamIntGet reads it (cached, as its getter does). */
struct papParamIntInfo {
  const char* env;
  int64_t def;
  int64_t min;
  int64_t max;
  int64_t (*get)(void);
};
int papParamIntCount(void);
const struct papParamIntInfo* papParamIntAt(int i);

#endif /* PAPCCL_CORE_PARAM_H_ */
