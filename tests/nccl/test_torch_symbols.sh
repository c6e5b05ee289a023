#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every nccl* symbol that PyTorch's libtorch_cuda.so imports is exported by papccl's
# libnccl.so.2, so that torch's ProcessGroupNCCL loads on the drop-in (LD_PRELOAD or
# LD_LIBRARY_PATH). A symbol torch needs and the drop-in lacks fails the test by name.
# usage: test_torch_symbols.sh OUR_LIBNCCL TORCH_LIBDIR
set -u
OURLIB=${1:?usage: test_torch_symbols.sh OUR_LIBNCCL TORCH_LIBDIR}
TORCHLIB=${2:?usage}/libtorch_cuda.so
if [ ! -e "$TORCHLIB" ]; then
  echo "SKIP: $TORCHLIB does not exist (a CPU-only torch has no ProcessGroupNCCL)"
  exit 77
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/torch-symbols.XXXXXX")
trap 'rm -rf "$T"' EXIT
nm -D --undefined-only "$TORCHLIB" | awk '{print $NF}' | sed 's/@.*//' | grep -E '^nccl' |
  sort -u >"$T/imported"
nm -D --defined-only "$OURLIB" | awk '{print $NF}' | sed 's/@.*//' | grep -E '^nccl' |
  sort -u >"$T/exported"
n=$(wc -l <"$T/imported")
if [ "$n" -lt 10 ]; then
  # torch links NCCL dynamically; a handful of symbols means the listing went wrong.
  echo "FAIL: only $n nccl* imports found in $TORCHLIB"
  exit 1
fi
missing=$(comm -23 "$T/imported" "$T/exported")
if [ -n "$missing" ]; then
  echo "FAIL: libtorch_cuda.so imports nccl symbols that $OURLIB does not export:"
  echo "$missing" | sed 's/^/  /'
  exit 1
fi
echo "ok: all $n nccl* symbols imported by $TORCHLIB are exported by $OURLIB"
