#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# papccl's allreduce between "hosts" (network namespaces on this machine, each with its own
# host name: scripts/netns-hosts.sh exec) over UCX, next to today's MPI peers in the same
# namespaces: Open MPI 5 and MPICH 5 (PyPI wheels, scripts/setup-peers.sh) and Debian's Open
# MPI 4.1, each with its shared memory within a host and TCP on eth0 between hosts, and to
# the transport's own limit measured in the same run over the same path: ucx_perftest tag
# latency (8 B) and tag bandwidth (4 MiB) between host 0 and host 1. Every library runs the
# one comparison loop (perf/compare/bench_loop.c) with the same warm-up and call counts:
# balanced, then the late host's ranks late; libraries alternate within each round.
#
# usage: scripts/bench-hosts.sh [--hosts N] [--per-host L] [--build DIR] [--skew US] [--late-host H]
#                               [--iters N] [--warmup N] [--small-mult M] [--sizes LIST]
#                               [--rounds R] [--tls LIST] [--libs LIST] [--papccl-uts] [--out DIR]
#   --hosts N    hosts (default 3)
#   --per-host L ranks per host (default 1; above 1 papccl goes through host leaders
#                unless PAPCCL_HIER=0 is in the environment)
#   --build DIR  build directory with perf/compare/papccl_cmp (default build)
#   --skew US    how late the late host is in the late run (default 5000)
#   --late-host H  the host that is late (default the last one). Open MPI's allreduce pairs
#                ranks in a fixed order (3 ranks: rank 0 folds into rank 1 first), so which
#                host is late matters to it; papccl's plans follow the arrivals
#   --iters N    timed calls per cell (default 20; sizes under 1 MiB run N x 1 MiB/size,
#                at most M x N: --small-mult M, default 50)
#   --warmup N   untimed calls per cell first, with the cell's arrival pattern (default 20:
#                papccl's selector needs about a dozen calls of a pattern to adapt to it)
#   --sizes LIST allreduce sizes (default 8,64K,1M,16M)
#   --rounds R   repeat everything R times, libraries alternating; the table gives medians
#                over rounds (default 1)
#   --tls LIST   UCX_TLS for papccl, MPICH (ch4:ucx) and ucx_perftest (default tcp)
#   --libs LIST  libraries (default "papccl openmpi5 mpich5 openmpi4"); a peer that is not
#                installed is left out with a line saying so, papccl is required
#   --papccl-uts papccl's ranks too under their host's own name. By default they keep this
#                machine's name (hosts from PAPCCL_HOSTID): papccl has no setting that says
#                "these hosts share CPUs", it finds that from the machine's identity (host
#                name and boot id) and then yields on every empty poll, as the MPIs are told
#                to do here by their settings
#   --out DIR    keep every raw log there, cells.tsv (perf/plot.py --hosts) and failed.tsv
#                (default: a temporary directory, removed)
# Needs root, iproute2, util-linux's unshare and ucx_perftest (Debian: ucx-utils). Prints one
# table (perf/compare/table.py), the commit and every peer's settings. A run that fails (a
# crash, a timeout, a wrong element) shows FAIL and makes the exit status 1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=$ROOT
hosts=3
perhost=1
build=build
skew=5000
latehost=""
iters=20
warmup=20
smallmult=50
sizes=8,64K,1M,16M
rounds=1
tls=tcp
libs="papccl openmpi5 mpich5 openmpi4"
paputs=0
out=""
while [ $# -gt 0 ]; do
  case "$1" in
  --hosts) hosts=$2 && shift 2 ;;
  --per-host) perhost=$2 && shift 2 ;;
  --build) build=$2 && shift 2 ;;
  --skew) skew=$2 && shift 2 ;;
  --late-host) latehost=$2 && shift 2 ;;
  --iters) iters=$2 && shift 2 ;;
  --warmup) warmup=$2 && shift 2 ;;
  --small-mult) smallmult=$2 && shift 2 ;;
  --sizes) sizes=$2 && shift 2 ;;
  --rounds) rounds=$2 && shift 2 ;;
  --tls) tls=$2 && shift 2 ;;
  --libs) libs=$2 && shift 2 ;;
  --papccl-uts) paputs=1 && shift ;;
  --out) out=$2 && shift 2 ;;
  -h | --help)
    sed -n '3,41p' "$0" | sed 's/^# \{0,1\}//'
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
build=$(cd "$build" && pwd)
pbin="$build/perf/compare/papccl_cmp"
[ -x "$pbin" ] || {
  echo "bench-hosts: $pbin not found (build first)" >&2
  exit 1
}
command -v ucx_perftest >/dev/null || {
  echo "bench-hosts: ucx_perftest not found (apt-get install ucx-utils)" >&2
  exit 1
}
# shellcheck source=perf/compare/peers.sh
. "$ROOT/perf/compare/peers.sh" # mpi_prefix, peer_version, peer_driver
scripts/netns-hosts.sh check >/dev/null

prefix="pbench$$"
keep=1
if [ -z "$out" ]; then
  out=$(mktemp -d)
  keep=0
fi
mkdir -p "$out"
# kill_tree PID: PID and every process under it (an MPI launcher's daemons and ranks).
kill_tree() {
  local c
  for c in $(pgrep -P "$1"); do kill_tree "$c"; done
  kill -TERM "$1" 2>/dev/null || true
}
cleanup() {
  # Interrupted: the run under way ends too, before its hosts go.
  local c
  for c in $(pgrep -P $$); do kill_tree "$c"; done
  scripts/netns-hosts.sh down "$prefix" || true
  [ "$keep" = 1 ] || rm -rf "$out"
}
trap cleanup EXIT
scripts/netns-hosts.sh up "$prefix" "$hosts"
addr() { echo "10.99.0.$(($1 + 1))"; }
# on H CMD...: CMD on host H (its network namespace, its host name $prefix-hH).
on() { scripts/netns-hosts.sh exec "$prefix" "$@"; }
# The MPI launchers' remote shell (no ssh): AGENT [options] ADDR COMMAND... runs COMMAND on
# the host whose address is ADDR, as `on` does.
agent="$out/netns-agent.sh"
cat >"$agent" <<AGENT
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1
shift
exec "$ROOT/scripts/netns-hosts.sh" exec "$prefix" "\$((\${host##*.} - 1))" sh -c "\$*"
AGENT
chmod +x "$agent"
hostlist=""
for ((h = 0; h < hosts; h++)); do hostlist="$hostlist${hostlist:+,}$(addr "$h"):$perhost"; done

# ucx_perftest TEST SIZE ITERS: the "Final:" line's median latency (us) and bandwidth (MB/s).
perftest() {
  local test=$1 size=$2 n=$3 log="$out/ucx_perftest_$1.log"
  on 1 env UCX_TLS="$tls" timeout 120 ucx_perftest -p 13337 \
    >"$out/ucx_perftest_$1.server.log" 2>&1 &
  local srv=$!
  local ok=0
  for _ in $(seq 50); do # the server needs a moment to listen
    if on 0 env UCX_TLS="$tls" timeout 120 ucx_perftest "$(addr 1)" \
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

# Each MPI as its documentation has it for several hosts: its shared memory within a host,
# TCP between hosts on eth0 only (every namespace also has its own lo), and, as every
# "host" shares this machine's CPUs, told to yield when idle (Open MPI would poll without
# yielding with one rank per node; MPICH's default polls 1,000 times per yield).
declare -A launch=(
  [openmpi4]="mpirun --allow-run-as-root --host $hostlist -np $nranks --map-by slot
    --mca plm_rsh_agent $agent --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0
    --mca mpi_yield_when_idle 1 -x PAPCMP_NAME"
  [openmpi5]="mpirun --allow-run-as-root --host $hostlist -np $nranks --map-by slot
    --prtemca plm_ssh_agent $agent --prtemca oob_tcp_if_include eth0
    --mca btl_tcp_if_include eth0 --mca mpi_yield_when_idle 1 -x PAPCMP_NAME"
  [mpich5]="mpiexec -launcher ssh -launcher-exec $agent -hosts $hostlist -n $nranks
    -genv UCX_TLS $tls -genv UCX_NET_DEVICES eth0 -genv MPIR_CVAR_ENABLE_HEAVY_YIELD 1")
declare -A shown=(
  [openmpi4]="btl self,vader,tcp (its default), btl_tcp and oob on eth0, mpi_yield_when_idle 1"
  [openmpi5]="pml ob1, btl self,sm,tcp (its default), btl_tcp and oob on eth0, mpi_yield_when_idle 1"
  [mpich5]="ch4:ucx (its default netmod) with UCX_TLS=$tls on eth0, ch4 shm within a host, MPIR_CVAR_ENABLE_HEAVY_YIELD=1")
todo=""
for lib in $libs; do
  case $lib in
  papccl) todo="$todo papccl" ;;
  openmpi4 | openmpi5 | mpich5)
    if [ ! -x "${mpi_prefix[$lib]}/bin/mpicc" ]; then
      echo "# $lib: not installed (scripts/setup-peers.sh; Debian's openmpi-bin for openmpi4)" >&2
    else
      peer_driver "$lib" "$out/bin" || {
        echo "bench-hosts: building $lib's driver failed" >&2
        exit 1
      }
      todo="$todo $lib"
    fi
    ;;
  *)
    echo "bench-hosts: unknown library '$lib' (papccl openmpi5 mpich5 openmpi4)" >&2
    exit 2
    ;;
  esac
done

# sent: bytes host 0 has sent through its eth0 so far (each run logs its share: the proof
# that a library's traffic between hosts went through the kernel's TCP).
sent() { ip netns exec "$prefix-h0" cat /sys/class/net/eth0/statistics/tx_bytes; }
# papccl's rank R on host H (ranks h*perhost .. on host h): under the host's name with
# --papccl-uts, else under this machine's with PAPCCL_HOSTID naming the host.
papccl_rank() {
  local h=$1
  shift
  if [ "$paputs" = 1 ]; then
    on "$h" "$@"
  else
    ip netns exec "$prefix-h$h" env PAPCCL_HOSTID="$prefix-h$h" "$@"
  fi
}

# run LIB PATTERN SKEW: one run of LIB's loop; its cells go to cells.tsv, a failure to
# failed.tsv.
run() {
  local lib=$1 pat=$2 sk=$3 log="$out/$1_$2_r${round}.log"
  local args=(--sizes "$sizes" -n "$iters" -w "$warmup" --small-mult "$smallmult" --arrival "$pat"
    --skew "$sk")
  local rc=0 before
  before=$(sent)
  if [ "$lib" = papccl ]; then
    local pids=()
    for ((r = 0; r < nranks; r++)); do
      papccl_rank $((r / perhost)) env PAPCCL_RANK="$r" PAPCCL_NRANKS="$nranks" \
        PAPCCL_LOCAL_RANK=$((r % perhost)) PAPCCL_COMM_ID="$(addr 0):29500" UCX_TLS="$tls" \
        timeout -k 10 900 "$pbin" "${args[@]}" >"$out/papccl_${pat}_r${round}_rank$r.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    cp "$out/papccl_${pat}_r${round}_rank0.log" "$log"
  else
    # shellcheck disable=SC2086 # the launch line is words
    PATH="${mpi_prefix[$lib]}/bin:$PATH" PAPCMP_NAME=$lib on 0 timeout -k 10 900 \
      ${launch[$lib]} "$out/bin/mpi_cmp-$lib" "${args[@]}" >"$log" 2>&1 || rc=1
  fi
  echo "eth0 $lib $(($(sent) - before))" >>"$log"
  awk -v r="$round" '$1 == "cell" { print r "\t" $2 "\t" $3 "\t" $4 "\t" $5 "\t" $6 "\t" $7 "\t" $8 "\t" $9 }' \
    "$log" >>"$out/cells.tsv"
  if [ "$rc" != 0 ]; then
    echo "bench-hosts: $lib ($pat) round $round failed; it said:" >&2
    tail -5 "$log" >&2
    printf '%s\t%s\t%s\t%s:%s\n' "$round" "$lib" "$nranks" "$pat" "$sk" >>"$out/failed.tsv"
  fi
}

read -r lat _ < <(perftest tag_lat 8 20000)
read -r _ bw < <(perftest tag_bw 4194304 200)
if [ -z "$latehost" ] || [ "$latehost" = $((hosts - 1)) ]; then
  latehost=$((hosts - 1))
  late="late-k:$perhost"
elif [[ "$latehost" =~ ^[0-9]+$ ]] && [ "$latehost" -lt "$hosts" ] && [ "$perhost" = 1 ]; then
  late="late:$latehost"
else
  echo "bench-hosts: --late-host needs a host below $hosts (and --per-host 1 unless it is the last)" >&2
  exit 2
fi
: >"$out/cells.tsv"
: >"$out/failed.tsv"
start=$(date +%s)
for ((round = 1; round <= rounds; round++)); do
  order=$todo
  [ $((round % 2)) = 0 ] && order=$(echo "$todo" | tr ' ' '\n' | tac | xargs)
  for lib in $order; do run "$lib" balanced 0; done
  for lib in $order; do run "$lib" "$late" "$skew"; done
done

echo "# $(date -u +%Y-%m-%dT%H:%MZ), papccl $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?'), $(nproc) CPUs, $(($(date +%s) - start)) s"
echo "# $hosts hosts (network namespaces with their own host names, veth + bridge), $perhost rank(s)" \
  "each; late: host $latehost ($perhost rank(s)) $skew us late; $rounds round(s), libraries alternating"
echo "# $warmup warm-up and $iters timed calls per cell for every library (x up to $smallmult under 1 MiB)"
echo "# ucx_perftest host0->host1: tag_lat 8 B ${lat} us (median one-way), tag_bw 4 MiB ${bw} MB/s"
echo "# papccl: UCX_TLS=$tls between hosts, shared memory within one, PAPCCL_HIER=${PAPCCL_HIER:-1}$([ "$paputs" = 1 ] || echo ", PAPCCL_HOSTID per host")"
[ "$paputs" = 1 ] && echo "# papccl's ranks under their hosts' names (--papccl-uts): it does not know they share CPUs"
for lib in $todo; do
  [ "$lib" = papccl ] || echo "# $lib: $(peer_version "$lib"): ${shown[$lib]}"
done
echo "# sent through host 0's eth0, MB per run (median):$(for lib in $todo; do
  awk -v l="$lib" '$1 == "eth0" && $2 == l { print $3 }' "$out/${lib}"_*.log | sort -n |
    awk -v l="$lib" '{ v[NR] = $1 } END { if (NR) printf " %s %.1f", l, v[int((NR + 1) / 2)] / 1e6 }'
done)"
rc=0
python3 "$ROOT/perf/compare/table.py" "$out/cells.tsv" "$out/failed.tsv" || rc=1
cut -f2 "$out/cells.tsv" | grep -qx papccl || {
  echo "# papccl gave no cells"
  rc=1
}
[ "$keep" = 1 ] && echo "# raw logs: $out"
exit "$rc"
