#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# papccl's allreduce between "hosts" (network namespaces on this machine,
# scripts/netns-hosts.sh) over UCX, next to Open MPI over TCP in the same namespaces and to
# the transport's own limit measured in the same run over the same path: ucx_perftest tag
# latency (8 B) and tag bandwidth (4 MiB) between host 0 and host 1. Both libraries run the
# one comparison loop (perf/compare/bench_loop.c): balanced, then the last host's ranks late.
#
# usage: scripts/bench-hosts.sh [--hosts N] [--per-host L] [--build DIR] [--skew US] [--late-host H]
#                               [--iters N] [--warmup N] [--sizes LIST] [--rounds R] [--tls LIST]
#                               [--out DIR]
#   --hosts N    hosts (default 3)
#   --per-host L ranks per host (default 1; above 1 papccl goes through host leaders
#                unless PAPCCL_HIER=0 is in the environment; Open MPI stays on TCP)
#   --build DIR  build directory with perf/compare/papccl_cmp (default build)
#   --skew US    how late the last host is in the late run (default 5000)
#   --late-host H  the host that is late (default the last one). Open MPI's allreduce pairs
#                ranks in a fixed order (3 ranks: rank 0 folds into rank 1 first), so which
#                host is late matters to it; papccl's plans follow the arrivals
#   --iters N    timed calls per cell, at least (default 20; each cell lasts >= 20 ms)
#   --warmup N   untimed calls per cell first, with the cell's arrival pattern (default 20:
#                papccl's selector needs about a dozen calls of a pattern to adapt to it)
#   --sizes LIST allreduce sizes (default 8,64K,1M,4M,16M)
#   --rounds R   repeat everything R times, libraries alternating; the table gives medians
#                over rounds (default 1)
#   --tls LIST   UCX_TLS for papccl and ucx_perftest (default tcp: the namespaces are
#                linked by veth)
#   --out DIR    keep every raw log there, and cells.tsv (for perf/plot.py --hosts)
#                (default: a temporary directory, removed)
# Needs root, iproute2 and ucx_perftest (Debian: ucx-utils); Open MPI's columns need mpirun
# and perf/compare/mpi_cmp (else they say "-"). Prints one table.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
hosts=3
perhost=1
build=build
skew=5000
latehost=""
iters=20
warmup=20
sizes=8,64K,1M,4M,16M
rounds=1
tls=tcp
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
  --sizes) sizes=$2 && shift 2 ;;
  --rounds) rounds=$2 && shift 2 ;;
  --tls) tls=$2 && shift 2 ;;
  --out) out=$2 && shift 2 ;;
  -h | --help)
    sed -n '3,31p' "$0" | sed 's/^# \{0,1\}//'
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
mbin="$build/perf/compare/mpi_cmp"
[ -x "$pbin" ] || {
  echo "bench-hosts: $pbin not found (build first)" >&2
  exit 1
}
command -v ucx_perftest >/dev/null || {
  echo "bench-hosts: ucx_perftest not found (apt-get install ucx-utils)" >&2
  exit 1
}
havempi=0
[ -x "$mbin" ] && command -v mpirun >/dev/null && havempi=1
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

# papccl NAME ARGS...: the comparison loop with perhost ranks on each host (ranks
# h*perhost .. h*perhost+perhost-1 on host h); rank 0's cells are kept.
papccl() {
  local name=$1
  shift
  local pids=()
  for ((r = 0; r < nranks; r++)); do
    local h=$((r / perhost))
    ip netns exec "$prefix-h$h" env PAPCCL_RANK="$r" PAPCCL_NRANKS="$nranks" \
      PAPCCL_LOCAL_RANK=$((r % perhost)) PAPCCL_COMM_ID="$(addr 0):29500" \
      PAPCCL_HOSTID="$prefix-h$h" UCX_TLS="$tls" \
      timeout 900 "$pbin" --sizes "$sizes" -n "$iters" -w "$warmup" "$@" \
      >"$out/papccl_${name}_r${round}_rank$r.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ "$rc" != 0 ]; then
    echo "bench-hosts: papccl ($name) failed; rank 0 said:" >&2
    tail -20 "$out/papccl_${name}_r${round}_rank0.log" >&2
    exit 1
  fi
}

# openmpi NAME ARGS...: the same loop under mpirun started on host 0; its daemons reach the
# other hosts through an agent that enters their namespaces (no ssh). Every namespace has
# this machine's host name, so Open MPI would take the hosts for one node and pick shared
# memory between them: only self and tcp are allowed. It also sees one rank per node and
# would poll without yielding, though the hosts share this machine's CPUs: it yields.
openmpi() {
  local name=$1
  shift
  [ "$havempi" = 1 ] || return 0
  local agent="$out/netns-agent.sh"
  cat >"$agent" <<AGENT
#!/bin/sh
# mpirun's launch agent: AGENT [options] HOST COMMAND... runs COMMAND in HOST's namespace.
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1
shift
exec ip netns exec "$prefix-h\$((\${host##*.} - 1))" sh -c "\$*"
AGENT
  chmod +x "$agent"
  local hl=""
  for ((h = 0; h < hosts; h++)); do hl="$hl${hl:+,}$(addr "$h"):$perhost"; done
  local opts=(--allow-run-as-root --oversubscribe --host "$hl" -np "$nranks" --map-by slot
    --mca plm_rsh_agent "$agent" --mca btl self,tcp --mca btl_tcp_if_include eth0
    --mca oob_tcp_if_include eth0 --mca mpi_yield_when_idle 1 -x PAPCMP_NAME=openmpi)
  if ! ip netns exec "$prefix-h0" timeout 900 mpirun "${opts[@]}" "$mbin" --sizes "$sizes" \
    -n "$iters" -w "$warmup" "$@" >"$out/openmpi_${name}_r${round}.log" 2>&1; then
    echo "bench-hosts: Open MPI ($name) failed (its columns say -):" >&2
    tail -5 "$out/openmpi_${name}_r${round}.log" >&2
  fi
}

read -r lat _ < <(perftest tag_lat 8 20000)
read -r _ bw < <(perftest tag_bw 4194304 200)
if [ -z "$latehost" ] || [ "$latehost" = $((hosts - 1)) ]; then
  latehost=$((hosts - 1))
  late=(--arrival "late-k:$perhost" --skew "$skew")
elif [[ "$latehost" =~ ^[0-9]+$ ]] && [ "$latehost" -lt "$hosts" ] && [ "$perhost" = 1 ]; then
  late=(--arrival "late:$latehost" --skew "$skew")
else
  echo "bench-hosts: --late-host needs a host below $hosts (and --per-host 1 unless it is the last)" >&2
  exit 2
fi
for ((round = 1; round <= rounds; round++)); do
  papccl balanced --arrival balanced --skew 0
  openmpi balanced --arrival balanced --skew 0
  papccl late "${late[@]}"
  openmpi late "${late[@]}"
done

echo "# $hosts hosts (network namespaces, veth + bridge), $perhost rank(s) each, UCX_TLS=$tls," \
  "PAPCCL_HIER=${PAPCCL_HIER:-1}; late: host $latehost ($perhost rank(s)) $skew us late"
echo "# ucx_perftest host0->host1: tag_lat 8 B ${lat} us (median one-way), tag_bw 4 MiB ${bw} MB/s"
echo "# float sum allreduce in place, comparison loop: time = median time in the call (us);"
echo "# tail = median from the last arrival to the last completion (us); Open MPI: btl tcp;"
echo "# medians over $rounds round(s)"
# cell <lib> <ranks> <pattern:skew> <bytes> <incoll_us> <tail_us> <skew_us> <wrong>
python3 - "$out" "$nranks" "$bw" <<'PY'
import glob, os, sys
out, n, bw = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
import re, statistics
cells = {}
tsv = open(os.path.join(out, "cells.tsv"), "w")
for f in sorted(glob.glob(os.path.join(out, "*.log"))):
    base = os.path.basename(f)
    if not (base.startswith("openmpi_") or base.endswith("_rank0.log")):
        continue
    m = re.search(r"_r(\d+)", base)
    rnd = m.group(1) if m else "1"
    for line in open(f, errors="replace"):
        p = line.split()
        if len(p) >= 9 and p[0] == "cell":
            kind = "late" if p[3].startswith("late") else "balanced"
            cells.setdefault((p[1], kind, int(p[4])), []).append(
                (float(p[5]), float(p[6]), int(float(p[8]))))
            tsv.write("\t".join([rnd] + p[1:9]) + "\n")
tsv.close()
sizes = sorted({k[2] for k in cells})
def get(lib, kind, b, i):
    v = cells.get((lib, kind, b))
    if v is None:
        return None
    return sum(x[2] for x in v) if i == 2 else statistics.median(x[i] for x in v)
def f(v):
    return "-" if v is None else ("%.0f" % v if v >= 100 else "%.1f" % v)
def ratio(a, b):
    return "-" if a is None or b is None or b <= 0 else "%.2f" % (a / b)
print("%10s %10s %10s %6s %10s %10s %6s %9s %7s" % ("bytes", "papccl_us", "ompi_us", "ratio",
      "p_tail_us", "o_tail_us", "ratio", "busbw_GBs", "of_tag"))
wrong = 0
for b in sizes:
    pt, ot = get("papccl", "balanced", b, 0), get("openmpi", "balanced", b, 0)
    pl, ol = get("papccl", "late", b, 1), get("openmpi", "late", b, 1)
    for lib in ("papccl", "openmpi"):
        for kind in ("balanced", "late"):
            w = get(lib, kind, b, 2)
            wrong += w or 0
    busbw = 2.0 * (n - 1) / n * b / (pt * 1e3) if pt else None
    print("%10d %10s %10s %6s %10s %10s %6s %9s %6s%%" % (b, f(pt), f(ot), ratio(pt, ot), f(pl),
          f(ol), ratio(pl, ol), "-" if busbw is None else "%.3f" % busbw,
          "-" if busbw is None else "%.0f" % (100 * busbw * 1e3 / bw)))
if wrong:
    print("# %d wrong results" % wrong)
    sys.exit(1)
PY
[ "$keep" = 1 ] && echo "# raw logs: $out"
exit 0
