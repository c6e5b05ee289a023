#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# all_reduce_perf between "hosts" (network namespaces on this machine, scripts/netns-hosts.sh)
# over UCX, next to the transport's own limit measured in the same run over the same path:
# ucx_perftest tag latency (8 B) and tag bandwidth (4 MiB) between host 0 and host 1. Then
# the same all_reduce_perf with one late host (its ranks: --arrival late-k:L --skew US).
#
# usage: scripts/bench-hosts.sh [--hosts N] [--per-host L] [--build DIR] [--skew US]
#                               [--iters N] [--tls LIST] [--out DIR]
#   --hosts N    hosts (default 3)
#   --per-host L ranks per host (default 1; above 1 the allreduce goes through host leaders
#                unless PAPCCL_HIER=0 is in the environment)
#   --build DIR  build directory with perf/all_reduce_perf (default build)
#   --skew US    how late the last host is in the late run (default 5000)
#   --iters N    timed iterations per size (default 20)
#   --tls LIST   UCX_TLS for both (default tcp: the namespaces are linked by veth)
#   --out DIR    keep every raw log there (default: a temporary directory, removed)
# Needs root, iproute2 and ucx_perftest (Debian: ucx-utils). Prints one table.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
hosts=3
perhost=1
build=build
skew=5000
iters=20
tls=tcp
out=""
while [ $# -gt 0 ]; do
  case "$1" in
  --hosts) hosts=$2 && shift 2 ;;
  --per-host) perhost=$2 && shift 2 ;;
  --build) build=$2 && shift 2 ;;
  --skew) skew=$2 && shift 2 ;;
  --iters) iters=$2 && shift 2 ;;
  --tls) tls=$2 && shift 2 ;;
  --out) out=$2 && shift 2 ;;
  -h | --help)
    sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "bench-hosts: unknown argument '$1' (try --help)" >&2
    exit 2
    ;;
  esac
done
[[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 2 ] || {
  echo "bench-hosts: --hosts wants 2 or more" >&2
  exit 2
}
[[ "$perhost" =~ ^[0-9]+$ ]] && [ "$perhost" -ge 1 ] || {
  echo "bench-hosts: --per-host wants 1 or more" >&2
  exit 2
}
nranks=$((hosts * perhost))
cd "$ROOT"
perfbin="$build/perf/all_reduce_perf"
[ -x "$perfbin" ] || {
  echo "bench-hosts: $perfbin not found (build first)" >&2
  exit 1
}
command -v ucx_perftest >/dev/null || {
  echo "bench-hosts: ucx_perftest not found (apt-get install ucx-utils)" >&2
  exit 1
}
scripts/netns-hosts.sh check >/dev/null

prefix="pbench$$"
keep=1
if [ -z "$out" ]; then
  out=$(mktemp -d)
  keep=0
fi
mkdir -p "$out"
cleanup() {
  scripts/netns-hosts.sh down "$prefix" || true
  [ "$keep" = 1 ] || rm -rf "$out"
}
trap cleanup EXIT
scripts/netns-hosts.sh up "$prefix" "$hosts"
addr() { echo "10.99.0.$(($1 + 1))"; }

# ucx_perftest TEST SIZE ITERS: the "Final:" line's median latency (us) and bandwidth (MB/s).
perftest() {
  local test=$1 size=$2 n=$3 log="$out/ucx_perftest_$1.log"
  ip netns exec "$prefix-h1" env UCX_TLS="$tls" timeout 120 ucx_perftest -p 13337 \
    >"$out/ucx_perftest_$1.server.log" 2>&1 &
  local srv=$!
  local ok=0
  for _ in $(seq 50); do # the server needs a moment to listen
    if ip netns exec "$prefix-h0" env UCX_TLS="$tls" timeout 120 ucx_perftest "$(addr 1)" \
      -p 13337 -t "$test" -s "$size" -n "$n" >"$log" 2>&1; then
      ok=1
      break
    fi
    sleep 0.2
  done
  wait "$srv" || true
  [ "$ok" = 1 ] || {
    echo "bench-hosts: ucx_perftest $test failed:" >&2
    cat "$log" >&2
    exit 1
  }
  awk '/^Final:/ {print $3, $6}' "$log"
}

# allreduce NAME ARGS...: all_reduce_perf with perhost ranks on each host (ranks
# h*perhost .. h*perhost+perhost-1 on host h); rank 0's output is kept.
allreduce() {
  local name=$1
  shift
  local pids=()
  for ((r = 0; r < nranks; r++)); do
    local h=$((r / perhost))
    ip netns exec "$prefix-h$h" env PAPCCL_RANK="$r" PAPCCL_NRANKS="$nranks" \
      PAPCCL_LOCAL_RANK=$((r % perhost)) PAPCCL_COMM_ID="$(addr 0):29500" \
      PAPCCL_HOSTID="$prefix-h$h" UCX_TLS="$tls" \
      timeout 600 "$perfbin" -b 8 -e 64M -f 8 -n "$iters" -w 3 -c 1 "$@" \
      >"$out/allreduce_${name}_rank$r.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ "$rc" != 0 ]; then
    echo "bench-hosts: all_reduce_perf ($name) failed; rank 0 said:" >&2
    tail -20 "$out/allreduce_${name}_rank0.log" >&2
    exit 1
  fi
}

read -r lat _ < <(perftest tag_lat 8 20000)
read -r _ bw < <(perftest tag_bw 4194304 200)
allreduce balanced
allreduce late --arrival "late-k:$perhost" --skew "$skew"

echo "# $hosts hosts (network namespaces, veth + bridge), $perhost rank(s) each, UCX_TLS=$tls," \
  "PAPCCL_HIER=${PAPCCL_HIER:-1}; late run: the last host ($perhost rank(s)) $skew us late"
echo "# ucx_perftest host0->host1: tag_lat 8 B ${lat} us (median one-way), tag_bw 4 MiB ${bw} MB/s"
echo "# all_reduce_perf float sum, out of place; time = rank 0's median per call (us)"
printf '%12s %12s %12s %12s %12s %12s\n' bytes time_us busbw_GBs late_time late_tail \
  busbw/tag_bw
# Columns of all_reduce_perf: size count type redop root time algbw busbw #wrong ...; the
# late run adds tail, inColl and skew after each block (see perf/README.md).
join <(awk '/^ +[0-9]/ {print $1, $6, $8}' "$out/allreduce_balanced_rank0.log") \
  <(awk '/^ +[0-9]/ {print $1, $6, $10}' "$out/allreduce_late_rank0.log") |
  awk -v bw="$bw" '{printf "%12s %12s %12s %12s %12s %11.1f%%\n", $1, $2, $3, $4, $5,
    100 * $3 * 1000 / bw}'
[ "$keep" = 1 ] && echo "# raw logs: $out"
exit 0
