# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The MPI peers of the comparisons, sourced by perf/compare/run.sh (one host) and
# scripts/bench-hosts.sh (between hosts): where each one is installed, its version, and its
# comparison driver built with its own compiler wrapper. Needs $root (the repository).
#   PEERS: where scripts/setup-peers.sh put the wheels (default <cache>/papccl/peers)
: "${root:?peers.sh: set root to the repository first}"
PEERS=${PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/papccl/peers}
declare -A mpi_prefix=([openmpi5]="$PEERS/openmpi5" [mpich5]="$PEERS/mpich5" [openmpi4]=/usr)

# peer_version LIB: "Open MPI 5.0.11", "MPICH 5.0.2".
peer_version() {
  case $1 in
  mpich5) "${mpi_prefix[$1]}/bin/mpichversion" 2>/dev/null | awk '/MPICH Version/ { print "MPICH " $3 }' ;;
  *) "${mpi_prefix[$1]}/bin/ompi_info" 2>/dev/null | awk '/Open MPI:/ { print "Open MPI " $3; exit }' ;;
  esac
}

# peer_driver LIB DIR: DIR/mpi_cmp-LIB, the comparison loop (mpi_cmp.c + bench_loop.c) built
# against LIB with LIB's own mpicc (once per DIR).
peer_driver() {
  [ -x "$2/mpi_cmp-$1" ] && return 0
  mkdir -p "$2"
  "${mpi_prefix[$1]}/bin/mpicc" -O2 -o "$2/mpi_cmp-$1" "$root/perf/compare/mpi_cmp.c" \
    "$root/perf/compare/bench_loop.c" "$root/perf/arrival.c" -lm
}
