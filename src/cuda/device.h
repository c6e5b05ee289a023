/* SPDX-License-Identifier: Apache-2.0 */
/* Device buffers in CUDA stream order (device.c). Without CUDA in the build, or without a
 * usable GPU at run time, papDeviceAvailable() is 0 and every op takes the host path. */
#ifndef PAPCCL_CUDA_DEVICE_H_
#define PAPCCL_CUDA_DEVICE_H_

#include "comm.h"

/* 1 when this process can use a GPU: a CUDA build, a driver and at least one device.
 * Decided once per process; says so in one INFO line. */
int papDeviceAvailable(void);

/* The device this thread uses now, or -1 (no GPU support). */
int papDeviceCurrent(void);

/* Whether d (buffers and byte counts filled in) touches device or managed memory, and so
 * must run in the order of its stream; sets d->sendOnGpu/recvOnGpu. Call only when
 * papDeviceAvailable(). */
int papDeviceOpNeedsStream(struct papOpDesc* d);

/* The stream can take a device op now (it is not being captured into a graph); says why
 * not. Call before the op takes its sequence number. */
papcclResult_t papDeviceCheckStream(struct papComm* comm, struct CUstream_st* stream);

/* API thread: for nops ops of one comm on one stream, enqueues on the stream the copies into
 * pinned staging, the arrival write, the wait for completion and the copies back, then hands
 * the ops (now on the staging buffers) to the progress thread. Returns without waiting. */
papcclResult_t papDeviceSubmit(struct papComm* comm, struct papOpDesc* ops, int nops);

/* Progress thread: waits until the stream has reached the job's arrival write, runs its
 * ops, then releases the stream. Also when the comm is aborted (the stream is released,
 * the result is not defined). */
papcclResult_t papDeviceRunJob(struct papComm* comm, struct papJob* job);

/* A job that will not run (abort, destroy): releases its stream and staging. */
void papDeviceDropJob(struct papComm* comm, struct papJob* job);

/* Frees comm's device state (pinned words, staging pool). After the progress thread ended. */
void papDeviceCommFree(struct papComm* comm);

/* 1 when GPU support is on and some CUDA context exists in the process (papccl never makes
 * the first one for a process that does not use the GPU). */
int papDeviceContextExists(void);
/* This thread uses device dev, when the process uses the GPU and dev exists (else nothing). */
void papDeviceUse(int dev);

/* Makes comm's device current on this thread for a few CUDA calls; papDeviceLeave puts back
 * whatever context was current before (one made with cuCtxCreate too, or none). CUDA builds
 * with GPU support only. */
struct papDevSaved {
  int switched;
  int dev; /* the runtime's device before, or -1 */
  void* ctx;
};
struct papDevSaved papDeviceEnter(const struct papComm* comm);
/* WARNs "<what> failed: <CUDA error>" (err is a cudaError_t), clears the error and returns
 * papcclUnhandledCudaError. CUDA builds only. */
papcclResult_t papDeviceCudaFail(const char* what, int err);
/* The CUDA context current on this thread (NULL: none, or no GPU support). */
void* papDeviceCurrentCtx(void);
void papDeviceLeave(struct papDevSaved sv);

/* CUDA IPC among the ranks of one host (ipc.c). Collective over comm, after its transport and
 * engine are up: when every rank has a GPU, uses it, is on this host (shm) and PAPCCL_CUDA_IPC
 * is 1, each rank gets a device arena that every other rank maps, and comm->engine.dev is set
 * (allreduce then goes through device memory, src/algo/arena_colls.c). Otherwise, or when any rank
 * fails to set it up, nothing changes (one INFO line says why). Fails only when the bootstrap
 * does. */
papcclResult_t papIpcCommInit(struct papComm* comm);
/* Unmaps the peers' arenas and keeps this rank's for a later comm. */
void papIpcCommFree(struct papComm* comm);
/* Bytes of this rank's own device arena while comm uses it (peers map it: it stays while
 * the comm is suspended), else 0. */
size_t papIpcHeldBytes(const struct papComm* comm);

/* A suspended comm's memory (device_mem.c): the bytes the CUDA layer holds for comm now,
 * those suspension gives back (the pinned staging blocks) and those it keeps (the stream
 * words' page, the device arena). */
void papDeviceHeldBytes(struct papComm* comm, size_t* suspendOut, size_t* persistOut);
/* Gives the comm's idle staging blocks back to CUDA (cudaFreeHost, which waits for the
 * device, as NCCL's suspension synchronizes it); a later device op allocates blocks anew.
 * Call with no device job queued. */
papcclResult_t papDeviceRelease(struct papComm* comm);

#endif /* PAPCCL_CUDA_DEVICE_H_ */
