#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/bench-hosts.sh, briefly (2 network-namespace hosts): a run of papccl and Open MPI 5
# gives cells for both and exit 0; a peer's failed run (Open MPI made to fail: OMPI_MCA_pml=cm
# has no MTL here) and a papccl rank killed mid-call (PAPCCL_FAULT) each show FAIL and exit 1,
# where the script used to print "-" and exit 0. Skips (77) without root, ucx_perftest or
# Open MPI 5 (scripts/setup-peers.sh). Usage: test_bench_hosts.sh BUILD_DIR
set -uo pipefail
B=${1:?build dir}
root=$(cd "$(dirname "$0")/../.." && pwd)
skip() {
  echo "skip: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
command -v ucx_perftest >/dev/null || skip "needs ucx_perftest (ucx-utils)"
"$root/scripts/netns-hosts.sh" check >/dev/null 2>&1 || skip "$("$root/scripts/netns-hosts.sh" check 2>&1)"
peers=${PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/papccl/peers}
[ -x "$peers/openmpi5/bin/mpicc" ] || skip "needs Open MPI 5 (scripts/setup-peers.sh)"
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
# bench NAME ARGS...: a short run; its output in $tmp/NAME.txt, its exit status returned.
bench() {
  local name=$1
  shift
  timeout 240 "$root/scripts/bench-hosts.sh" --build "$B" --hosts 2 --sizes 8,64K --iters 2 \
    --warmup 1 --small-mult 1 --skew 500 --libs "papccl openmpi5" --out "$tmp/$name" "$@" \
    >"$tmp/$name.txt" 2>&1
}

bench good --per-host 2
rc=$?
rows=$(grep -c '^| 4 | ' "$tmp/good.txt")
if [ "$rc" = 0 ] && [ "$rows" = 4 ] && ! grep -q FAIL "$tmp/good.txt" &&
  grep -q 'papccl [0-9a-f]\{7\}' "$tmp/good.txt"; then
  ok "2 x 2: 4 rows, papccl and openmpi5 in each, the commit named"
else
  bad "2 x 2: rc $rc, $rows rows:"
  cat "$tmp/good.txt"
fi
# failed NAME LIB WHAT: the run NAME must exit 1 and say FAIL for LIB.
failed() {
  if [ "$rc" = 1 ] && grep -q "^# FAIL: $2" "$tmp/$1.txt"; then
    ok "$3: FAIL, exit 1"
  else
    bad "$3: rc $rc:"
    cat "$tmp/$1.txt"
  fi
}
OMPI_MCA_pml=cm bench peerfail
rc=$?
failed peerfail openmpi5 "a failed Open MPI run"
PAPCCL_FAULT=kill@chunk:rank=1:nth=3 PAPCCL_TIMEOUT_S=30 bench papfail --libs papccl
rc=$?
failed papfail papccl "a papccl rank killed"
exit $((fails > 0))
