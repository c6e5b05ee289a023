#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# papccl against today's peers on this host: Open MPI 5 and MPICH 5 (PyPI wheels,
# scripts/setup-peers.sh), Debian's Open MPI 4.1, torch.distributed's gloo (the project's
# virtual environment), Debian's Gloo and, on request, DeepSpeed's shared-memory allreduce;
# the same sizes and arrival patterns, the same timing loop and call counts (bench_loop.c),
# libraries alternating within each round. Prints one table of medians over the rounds with
# the ratio papccl/peer per cell, and writes every cell to $OUT/cells.tsv (for plot.py), then
# the goals (goals.py) against the best peer and the floors measured in the run
# ($OUT/floors.tsv). A run that fails (a wrong element, a crash, a timeout) fails the
# benchmark and shows as FAIL in its cell.
#
# Usage: perf/compare/run.sh [--quick]      BUILD=dir (default ./build), OUT=dir (default a
#   temp dir), NRANKS (rank counts, "4"; e.g. "2 4 8"), ROUNDS (3), ITERS (20), WARMUP (16:
#   papccl's selector plans a size with PAP from its 13th call at the earliest),
#   SMALL_MULT (50: sizes under 1 MiB run ITERS x 1 MiB/size calls, at most SMALL_MULT x
#   ITERS; the same counts for every library),
#   PATTERNS ("balanced:0 late:2000 late:20000 staircase:20000"; trace:FILE replays a
#   recorded arrival pattern, e.g. one that papccl.torch.save_trace wrote in training;
#   together:S, every rank S us late, is the balanced call after the same work),
#   OWN_PATTERNS (patterns papccl alone runs, its own references: e.g. "together:20000", which
#   goals.py sets beside the late:20000 tails),
#   LIBS ("papccl openmpi5 mpich5 openmpi4 torch-gloo gloo-ring"; also gloo-halving_doubling
#   and deepspeed-shm: deepspeed.comm.inference_all_reduce, whose CPU op DeepSpeed compiles on
#   first use (a minute); its wheel is not in the environment by default, see perf/README.md),
#   SIZES (all_reduce sizes as -b/-e/-f, "-b 64K -e 16M -f 16"; e.g. "-b 8 -e 64M -f 8", or a
#   list, "--sizes 8,64K,1M,16M"), CELL_TIMEOUT (900 s per library run),
#   MPICH_OVERSUB (0: MPICH runs only where ranks <= CPUs, see perf/README.md; 1: always),
#   PEERS (where scripts/setup-peers.sh put the MPI wheels, <cache>/papccl/peers),
#   PYTHON (the project's virtual environment's, for torch-gloo and deepspeed-shm), REQUIRE
#   ("papccl": libraries that must give cells; one not installed fails the run instead of
#   being left out)
# --quick: one round, 64 KiB and 1 MiB, patterns balanced and late:2000, few calls (CI smoke).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$root/build}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/papccl-compare.XXXXXX")}
NRANKS=${NRANKS:-4}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-20}
SMALL_MULT=${SMALL_MULT:-50}
WARMUP=${WARMUP:-16}
CELL_TIMEOUT=${CELL_TIMEOUT:-900}
PATTERNS=${PATTERNS:-"balanced:0 late:2000 late:20000 staircase:20000"}
OWN_PATTERNS=${OWN_PATTERNS:-}
LIBS=${LIBS:-"papccl openmpi5 mpich5 openmpi4 torch-gloo gloo-ring"}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/papccl
PYTHON=${PYTHON:-${PAPCCL_VENV:-$cache/venv}/bin/python3}
read -r -a SIZES <<<"${SIZES:--b 64K -e 16M -f 16}"
if [ "${1:-}" = --quick ]; then
  ROUNDS=1 ITERS=3 WARMUP=2 SMALL_MULT=1 PATTERNS="balanced:0 late:2000" OWN_PATTERNS=""
  SIZES=(-b 64K -e 1M -f 16)
fi
mkdir -p "$OUT/bin"
C=$BUILD/perf/compare
cells=$OUT/cells.tsv
fails=$OUT/failed.tsv
floorsf=$OUT/floors.tsv
: >"$cells"
: >"$fails"
: >"$floorsf"
cpus=$(nproc)

# shellcheck source=perf/compare/peers.sh
. "$root/perf/compare/peers.sh" # mpi_prefix, peer_version, peer_driver
root_args=()
[ "$(id -u)" = 0 ] && root_args=(--allow-run-as-root)
# Each peer as its documentation has it for one host: Open MPI's shared-memory BTL (sm in
# 5.x, vader in 4.x) with --oversubscribe (it then yields when idle); MPICH's defaults (its
# shared memory within a host; it yields every MPIR_CVAR_POLLS_BEFORE_YIELD polls).
# Open MPI's lines are its one-host defaults (ob1, sm/vader with CMA, tuned), kept as they are
# although its allreduce maps a fresh temporary on every call above 32 MiB: its users get the
# same (perf/README.md, "Open MPI at 64 MiB, 2 ranks").
declare -A mpi_launch=(
  [openmpi5]="mpirun ${root_args[*]} --oversubscribe --mca btl self,sm -np"
  [openmpi4]="mpirun ${root_args[*]} --oversubscribe --mca btl self,vader -np"
  [mpich5]="mpiexec -n")
# DeepSpeed's op is compiled once, here, not inside a timed library run; a peer that does not
# load is left out with the reason.
ds_probe="not requested" ds_ready=""
if [[ " $LIBS " == *" deepspeed-shm "* ]]; then
  ds_probe=$(PAPCMP_TORCH_BACKEND=deepspeed-shm timeout -k 10 "$CELL_TIMEOUT" "$PYTHON" \
    "$root/perf/compare/torch_cmp.py" --probe 2>&1) && ds_ready=1
  ds_probe=$(tail -n 1 <<<"$ds_probe")
  [ -n "$ds_ready" ] || ds_probe="left out, $ds_probe (install: \"$PYTHON\" -m pip install -r python/requirements-deepspeed.txt)"
  [ -n "$ds_ready" ] || echo "# deepspeed-shm: $ds_probe" >&2
fi
settings() { # printed under the table
  echo "# papccl $(git -C "$root" describe --always --dirty 2>/dev/null || echo '?'): defaults (papcclrun)"
  for lib in $LIBS; do
    case $lib in
    openmpi5 | openmpi4 | mpich5)
      [ -x "${mpi_prefix[$lib]}/bin/mpicc" ] &&
        echo "# $lib: $(peer_version "$lib"): ${mpi_launch[$lib]} N" ;;
    torch-gloo) echo "# torch-gloo: torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null), init_process_group(\"gloo\"), one thread per rank" ;;
    gloo-*) echo "# $lib: Debian libgloo, TCP on loopback" ;;
    deepspeed-shm)
      if [ -n "$ds_ready" ]; then
        echo "# deepspeed-shm: $ds_probe; deepspeed.comm.inference_all_reduce on the gloo group, LOCAL_SIZE=N, one thread per rank"
      else echo "# deepspeed-shm: $ds_probe"; fi ;;
    esac
  done
}

run_lib() { # lib pattern skew round nranks
  local lib=$1 pat=$2 skew=$3 n=$5 log="$OUT/$1-${2//\//_}-$3-n$5-r$4.log"
  local args=("${SIZES[@]}" -n "$ITERS" -w "$WARMUP" --small-mult "$SMALL_MULT" --arrival "$pat" --skew "$skew")
  local t=(timeout -k 10 "$CELL_TIMEOUT")
  case $lib in
  papccl) "${t[@]}" "$BUILD/src/launcher/papcclrun" -n "$n" "$C/papccl_cmp" "${args[@]}" ;;
  openmpi5 | openmpi4 | mpich5)
    local p=${mpi_prefix[$lib]}
    if [ ! -x "$p/bin/mpicc" ]; then
      echo "# $lib: not installed (scripts/setup-peers.sh; Debian's openmpi-bin for openmpi4)" >&2
      return 0
    fi
    if [ "$lib" = mpich5 ] && [ "$n" -gt "$cpus" ] && [ "${MPICH_OVERSUB:-0}" != 1 ]; then
      echo "# mpich5: not run at $n ranks on $cpus CPUs (it busy-polls; MPICH_OVERSUB=1 runs it)" >&2
      return 0
    fi
    peer_driver "$lib" "$OUT/bin" || { echo "# $lib: building its driver failed" >&2; return 0; }
    # shellcheck disable=SC2086 # the launch line is words
    PATH="$p/bin:$PATH" PAPCMP_NAME=$lib "${t[@]}" ${mpi_launch[$lib]} "$n" "$OUT/bin/mpi_cmp-$lib" "${args[@]}" ;;
  torch-gloo | deepspeed-shm)
    if [ ! -f "$C/libpapccl_cmp_pyloop.so" ] || ! "$PYTHON" -c 'import torch' 2>/dev/null; then
      echo "# $lib: no torch at $PYTHON (scripts/setup-venv.sh)" >&2
      return 0
    fi
    if [ "$lib" = deepspeed-shm ] && [ -z "$ds_ready" ]; then
      echo "# deepspeed-shm: $ds_probe" >&2
      return 0
    fi
    local store rc=0
    store=$(mktemp -d "$OUT/torch-store.XXXXXX")
    # DeepSpeed names its shm segments after MASTER_ADDR/PORT and never removes them: a token
    # of this run keeps runs apart, and they are removed after it.
    PAPCMP_TORCH_BACKEND=${lib#torch-} LOCAL_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=${store##*.} \
      PAPCMP_LOOP=$C/libpapccl_cmp_pyloop.so PAPCMP_TORCH_STORE=$store "${t[@]}" \
      "$BUILD/src/launcher/papcclrun" -n "$n" "$PYTHON" "$root/perf/compare/torch_cmp.py" "${args[@]}" ||
      rc=$?
    rm -rf "$store" "/dev/shm/deepspeed_allreduce_buffer_$(id -u)_127.0.0.1_${store##*.}_"*
    [ "$rc" = 0 ] ;;
  gloo-*)
    [ -x "$C/gloo_cmp" ] || { echo "# gloo: gloo_cmp not built (libgloo-dev missing)" >&2; return 0; }
    local store rc=0
    store=$(mktemp -d "$OUT/gloo-store.XXXXXX")
    PAPCMP_GLOO_STORE=$store PAPCMP_GLOO_ALGO=${lib#gloo-} "${t[@]}" \
      "$BUILD/src/launcher/papcclrun" -n "$n" "$C/gloo_cmp" "${args[@]}" || rc=$?
    rm -rf "$store"
    [ "$rc" = 0 ] ;; # the run's status, not rm's, decides FAIL
  esac >"$log" 2>&1 || {
    echo "# $lib $pat:$skew n=$n round $4 failed, see $log" >&2
    printf '%s\t%s\t%s\t%s:%s\n' "$4" "$lib" "$n" "$pat" "$skew" >>"$fails"
    return 0
  }
  awk -v r="$4" '$1 == "cell" { print r "\t" $2 "\t" $3 "\t" $4 "\t" $5 "\t" $6 "\t" $7 "\t" $8 "\t" $9 }' \
    "$log" >>"$cells"
}

# This machine's floors, measured at the start of every round next to the libraries (they
# move by 2x between minutes on a shared VM): 2 threads each copying 64 MiB at once (the
# 2-rank memory floor; its rate gives the post-arrival floor of goals.py) and the 2-process
# cache-line exchange (the 2-rank 8 B floor).
floors() { # round
  local m l
  m=$("$BUILD/perf/memfloor" -s 64M -t 2 -r 5 2>/dev/null | awk '$1 == "memfloor_us" { print $2 }')
  l=$("$BUILD/perf/linefloor" -r 5 2>/dev/null | awk '$1 == "exchange_us" { print $2 }')
  if [ -n "$m" ]; then
    printf '%s\tmemfloor64_us\t%s\n' "$1" "$m"
    awk -v r="$1" -v m="$m" 'BEGIN { printf "%s\tcopy_gbps\t%.3f\n", r, 2 * 67108864 / m / 1000 }'
  fi
  [ -n "$l" ] && printf '%s\texchange_us\t%s\n' "$1" "$l"
  return 0
}

start=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
  floors "$round" >>"$floorsf"
  for n in $NRANKS; do
    for p in $PATTERNS; do
      # Alternate the order within each round, so no library always runs first (warm caches,
      # a quieter machine).
      order=$LIBS
      [ $((round % 2)) = 0 ] && order=$(echo "$LIBS" | tr ' ' '\n' | tac | xargs)
      for lib in $order; do
        case $p in
        trace:*) run_lib "$lib" "$p" 0 "$round" "$n" ;; # a recorded pattern: trace:FILE
        *) run_lib "$lib" "${p%%:*}" "${p#*:}" "$round" "$n" ;;
        esac
      done
    done
    for p in $OWN_PATTERNS; do
      run_lib papccl "${p%%:*}" "${p#*:}" "$round" "$n"
    done
  done
done
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $cpus CPUs, $NRANKS ranks, $ROUNDS round(s), $ITERS calls (x up to $SMALL_MULT under 1 MiB), $(($(date +%s) - start)) s"
settings
python3 "$root/perf/compare/table.py" "$cells" "$fails"
rc=$?
python3 "$root/perf/compare/goals.py" "$cells" "$floorsf"
for lib in ${REQUIRE:-papccl}; do
  cut -f2 "$cells" | grep -qx "$lib" || { echo "# required library $lib gave no cells"; rc=1; }
done
echo "# cells: $cells"
exit "$rc"
