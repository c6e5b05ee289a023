#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GPU check for a machine with an NVIDIA GPU but without Debian's test packages: builds the
# library for the given SM (default 90) with meson, builds the GPU tests against GoogleTest
# sources (GTEST_SRC, the googletest/ folder of a GoogleTest source tree) and runs them
# (kernels; collectives on device buffers in stream order, with stream memory operations
# and with the kernel fallback), runs the drop-in libnccl.so.2 under an NCCL program and
# under PyTorch's ProcessGroupNCCL (when torch is installed), builds the papccl backend
# against that torch and runs it on CUDA tensors, then the host perf binaries. Results go to OUTDIR
# (default ./gpu-check-out), the short table to OUTDIR/summary.txt. QUICK=1 skips the
# kernel-fallback pass.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH="${ARCH:-90}"
GTEST_SRC="${GTEST_SRC:-/usr/src/googletest/googletest}"
OUTDIR="${OUTDIR:-$PWD/gpu-check-out}"
B="${BUILD:-/tmp/papccl-gpu-build}"
case "$B" in /*) ;; *) B="$PWD/$B" ;; esac
mkdir -p "$OUTDIR"
log() { echo "== $*" | tee -a "$OUTDIR/summary.txt"; }

log "machine: $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo 'nvidia-smi failed')"
log "nvcc: $(nvcc --version | tail -1)"
MESON="meson"
command -v meson >/dev/null || MESON="python3 -m mesonbuild.mesonmain"
$MESON setup "$B" -Dgpu_archs="$ARCH" -Dtests=disabled -Dbuildtype=release -Ducx=disabled -Dverbs=disabled -Dtorch=disabled >"$OUTDIR/setup.log" 2>&1
t0=$(date +%s)
ninja -C "$B" >"$OUTDIR/build.log" 2>&1
log "library + perf built for sm_$ARCH in $(( $(date +%s) - t0 )) s"

G=/tmp/papccl-gtest
mkdir -p "$G"
g++ -O2 -std=c++17 -I"$GTEST_SRC/include" -I"$GTEST_SRC" -c "$GTEST_SRC/src/gtest-all.cc" -o "$G/gtest-all.o"
g++ -O2 -std=c++17 -I"$GTEST_SRC/include" -I"$GTEST_SRC" -c "$GTEST_SRC/src/gtest_main.cc" -o "$G/gtest_main.o"
CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}"
g++ -O2 -std=c++17 -DPAPCCL_HAVE_CUDA -Iinclude -Isrc/core -Ikernels -Itransport -Isrc/engine -Isrc/algo -Isrc/comm -Isrc/arrival \
  -Isrc/enqueue -Isrc/cuda -Isrc/bootstrap -Isrc/api -I. -I"$GTEST_SRC/include" \
  -I"$CUDA_HOME/include" tests/gpu/test_gpu_kernels.cc "$G/gtest-all.o" \
  "$B/src/libpapccl.a" -L"$CUDA_HOME/lib64" -lcudart -lpthread -lrt -lm -o "$G/papccl_gpu"
log "GPU tests"
"$G/papccl_gpu" >"$OUTDIR/gpu-tests.txt" 2>&1 && log "GPU tests passed" || log "GPU tests FAILED"
grep -E "OK \]|FAILED|PASSED|figure|SKIPPED \]" "$OUTDIR/gpu-tests.txt" | tee -a "$OUTDIR/summary.txt" || true

gcc -O2 -DPAPCCL_HAVE_CUDA -Iinclude -Isrc/core -Ikernels -Itransport -Isrc/engine -Isrc/algo -Isrc/comm -Isrc/arrival \
  -Isrc/enqueue -Isrc/cuda -Isrc/bootstrap -Isrc/api -I. -I"$CUDA_HOME/include" \
  -c tests/internal/shim_ipc.c -o "$G/shim_ipc.o"
g++ -O2 -std=c++17 -DPAPCCL_HAVE_CUDA -Iinclude -Isrc/core -Ikernels -Itransport -Isrc/engine -Isrc/algo -Isrc/comm -Isrc/arrival \
  -Isrc/enqueue -Isrc/cuda -Isrc/bootstrap -Isrc/api -I. -I"$GTEST_SRC/include" \
  -I"$CUDA_HOME/include" tests/gpu/test_gpu_colls.cc "$G/shim_ipc.o" "$G/gtest-all.o" \
  "$B/src/libpapccl.a" -L"$CUDA_HOME/lib64" -lcudart -lpthread -lrt -lm -o "$G/papccl_gpu_colls"
log "GPU collectives (device buffers in stream order, ranks sharing the GPU)"
for memops in 1 0; do
  PAPCCL_CUDA_MEMOPS=$memops timeout 300 "$G/papccl_gpu_colls" >"$OUTDIR/gpu-colls-memops$memops.txt" 2>&1 &&
    log "GPU collectives passed (PAPCCL_CUDA_MEMOPS=$memops)" ||
    log "GPU collectives FAILED (PAPCCL_CUDA_MEMOPS=$memops)"
  grep -E "OK \]|FAILED|PASSED|figure|SKIPPED \]|Failure|differs" "$OUTDIR/gpu-colls-memops$memops.txt" |
    head -40 | tee -a "$OUTDIR/summary.txt" || true
  [ "$memops" = 1 ] && [ "${QUICK:-0}" = 1 ] && break
done

log "drop-in libnccl.so.2 under a program built on papccl's nccl.h (host buffers)"
cc -O2 -Iinclude tests/nccl/nccl_program.c -L"$B/src/nccl" -lnccl -ldl -o "$G/nccl_program" &&
  LD_LIBRARY_PATH="$B/src/nccl" timeout 120 "$G/nccl_program" 4 2>/dev/null | tail -3 |
  tee -a "$OUTDIR/summary.txt" || log "drop-in program FAILED"

if python3 -c "import torch, torch.distributed" 2>/dev/null; then
  log "PyTorch torch.distributed 'nccl' on papccl's libnccl.so.2 (2 processes, one GPU)"
  LD_PRELOAD="$B/src/nccl/libnccl.so.2" LD_LIBRARY_PATH="$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}" \
    timeout 300 python3 scripts/gpu-torch-check.py >"$OUTDIR/torch.txt" 2>&1 &&
    log "PyTorch check passed" || log "PyTorch check FAILED"
  grep -E "^rank|PASS|FAILED|Error" "$OUTDIR/torch.txt" | head -20 | tee -a "$OUTDIR/summary.txt" || true
  # The papccl backend itself, built against this torch (the same build folder, only the
  # extension is new), on CUDA tensors: 2 ranks sharing the GPU.
  log "papccl torch.distributed backend on CUDA tensors (torch $(python3 -c 'import torch; print(torch.__version__)'), 2 processes, one GPU)"
  t0=$(date +%s)
  if $MESON configure "$B" -Dtorch=enabled -Dtorch_python="$(command -v python3)" >"$OUTDIR/torch-setup.log" 2>&1 &&
    ninja -C "$B" >"$OUTDIR/torch-build.log" 2>&1; then
    log "backend built in $(( $(date +%s) - t0 )) s"
    PYTHONPATH="$B/python" OMP_NUM_THREADS=1 timeout 300 python3 scripts/gpu-torch-backend.py \
      >"$OUTDIR/torch-backend.txt" 2>&1 && log "papccl backend check passed" ||
      log "papccl backend check FAILED"
    grep -E "^rank|PASS|FAILED|Error" "$OUTDIR/torch-backend.txt" | head -30 | tee -a "$OUTDIR/summary.txt" || true
  else
    log "papccl backend build FAILED (torch-setup.log, torch-build.log)"
    grep -E "error|ERROR" "$OUTDIR/torch-setup.log" "$OUTDIR/torch-build.log" | head -10 |
      tee -a "$OUTDIR/summary.txt" || true
  fi
else
  log "PyTorch not found: its checks are skipped"
fi

log "host perf on this machine (memory floor, then papccl allreduce 2/4/8 ranks)"
"$B/perf/memfloor" 2>&1 | tee -a "$OUTDIR/summary.txt"
"$B/perf/memfloor" -t 1 2>&1 | tail -1 | sed "s/^/one thread: /" | tee -a "$OUTDIR/summary.txt"
for n in 2 4 8; do
  "$B/src/launcher/papcclrun" -n "$n" "$B/perf/all_reduce_perf" -b 8 -e 8 -n 2000 -w 100 \
    >"$OUTDIR/allreduce_n${n}_8B.txt" 2>&1 || log "all_reduce_perf -n $n 8 B failed"
  "$B/src/launcher/papcclrun" -n "$n" "$B/perf/all_reduce_perf" -b 64M -e 64M -n 10 -w 3 \
    >"$OUTDIR/allreduce_n${n}_64M.txt" 2>&1 || log "all_reduce_perf -n $n 64 MiB failed"
  cat "$OUTDIR/allreduce_n${n}_8B.txt" "$OUTDIR/allreduce_n${n}_64M.txt" |
    grep -E "^ +(8|67108864) " | sed "s/^/n=$n /" | tee -a "$OUTDIR/summary.txt"
done
# The host comparison where ranks have a core each (8 and 16 ranks on 16 cores): papccl
# against Open MPI 5 and MPICH 5, whose wheels come along in build-peers/ (this machine has no
# network: scripts/setup-peers.sh here, then copy its prefixes there and carry the folder).
peers=${PEERS:-$PWD/build-peers}
if [ -x "$peers/openmpi5/bin/mpicc" ] || [ -x "$peers/mpich5/bin/mpicc" ]; then
  log "host comparison, 8 and 16 ranks (perf/compare/run.sh)"
  BUILD=$B OUT="$OUTDIR/compare" PEERS=$peers NRANKS="8 16" ROUNDS=3 ITERS=10 WARMUP=16 \
    LIBS="papccl openmpi5 mpich5" \
    PATTERNS="balanced:0 late:2000 late:20000" SIZES="--sizes 8,64K,1M,16M" CELL_TIMEOUT=120 \
    perf/compare/run.sh 2>&1 | grep -v "^# cells" | tee -a "$OUTDIR/summary.txt" || log "host comparison FAILED"
else
  log "no MPI peers in $peers: host comparison skipped (scripts/setup-peers.sh, then carry them)"
fi
