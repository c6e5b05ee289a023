#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests papcclrun with small shell programs: environment, failures, signals, timeout, output.
# usage: test_papcclrun.sh PATH/TO/papcclrun [PATH/TO/rankenv_probe]
# shellcheck disable=SC2016 # the rank programs are single-quoted on purpose: ranks expand them
set -u

RUN=${1:?usage: $0 PATH/TO/papcclrun [PATH/TO/rankenv_probe]}
PROBE=${2:-}
T=$(mktemp -d "${TMPDIR:-/tmp}/papcclrun-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
export TESTDIR=$T # the rank programs below write their marker files there
# every launcher run below is bounded, so a broken launcher fails the test instead of hanging it
LIMIT="timeout -k 5 60"

failures=0
count=0
pass() { count=$((count + 1)); echo "ok $count - $1"; }
fail() {
  count=$((count + 1))
  failures=$((failures + 1))
  echo "not ok $count - $1"
  shift
  for line in "$@"; do echo "#   $line"; done
  for f in "$T"/out "$T"/err; do
    [ -s "$f" ] && sed "s|^|#   $(basename "$f"): |" "$f" | head -20
  done
  return 0
}
check() { # check NAME CONDITION-COMMAND...
  local name=$1
  shift
  if "$@"; then pass "$name"; else fail "$name" "failed: $*"; fi
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# alive PID: the process exists and is not a zombie
alive() {
  [ -r "/proc/$1/stat" ] || return 1
  local state
  state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
# wait_files N GLOB: wait up to 10 s until N files match GLOB
wait_files() {
  local files
  for _ in $(seq 100); do
    files=$(compgen -G "$2" | wc -l)
    [ "$files" -ge "$1" ] && return 0
    sleep 0.1
  done
  return 1
}
# start_bg ARGS...: starts papcclrun in the background (output in $T/out, $T/err), its pid in
# $pid, with a watchdog that kills it after 60 s; finish_bg waits for it and sets $rc.
start_bg() {
  "$RUN" "$@" >"$T/out" 2>"$T/err" </dev/null &
  pid=$!
  (
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    sleep 60 &
    s=$!
    wait "$s"
    kill -KILL "$pid"
  ) >/dev/null 2>&1 &
  dog=$!
}
finish_bg() {
  wait "$pid" 2>/dev/null
  rc=$?
  kill "$dog" 2>/dev/null
  wait "$dog" 2>/dev/null
}
run() { # run ARGS...: runs papcclrun, output in $T/out and $T/err, status in $rc, time in $ms
  local t0
  t0=$(now_ms)
  $LIMIT "$RUN" "$@" >"$T/out" 2>"$T/err" </dev/null
  rc=$?
  ms=$(($(now_ms) - t0))
}

# --- arguments ---------------------------------------------------------------------------
run --help
check "--help exits 0 and prints usage" test "$rc" = 0 -a -n "$(grep -i usage "$T/out")"
run --version
check "--version exits 0" test "$rc" = 0 -a -s "$T/out"
for args in "" "-n" "-n 0 true" "-n 1025 true" "-n abc true" "-n 2" "--bogus -n 2 true" \
  "-n 2 --timeout 0 true" "-n 2 --timeout x true" "-n 2 --timeout"; do
  # shellcheck disable=SC2086
  run $args
  check "bad arguments '$args' exit 2 with a message" test "$rc" = 2 -a -s "$T/err"
done
run -n 1 /nonexistent/program
check "a missing program exits 127" test "$rc" = 127 -a -n "$(grep 'cannot run' "$T/err")"
printf 'not a program\n' >"$T/noexec"
chmod -x "$T/noexec"
run -n 2 "$T/noexec"
check "a program that cannot be executed exits 126" test "$rc" = 126

# --- environment -------------------------------------------------------------------------
run -n 4 -- /bin/sh -c \
  'echo "$PAPCCL_RANK $PAPCCL_NRANKS $PAPCCL_LOCAL_RANK $PAPCCL_LOCAL_SIZE $PAPCCL_COMM_ID"'
check "4 ranks exit 0" test "$rc" = 0
check "4 distinct ranks 0..3" test "$(cut -d' ' -f1 "$T/out" | sort -n | tr '\n' ' ')" = "0 1 2 3 "
check "NRANKS, LOCAL_RANK, LOCAL_SIZE" \
  test "$(awk '$2 == 4 && $3 == $1 && $4 == 4' "$T/out" | wc -l)" = 4
check "one PAPCCL_COMM_ID, 127.0.0.1:PORT" \
  test "$(cut -d' ' -f5 "$T/out" | sort -u | grep -cE '^127\.0\.0\.1:[0-9]+$')" = 1
# The port must lie below the kernel's ephemeral range: inside it, any connection's source
# port or any bind to port 0 on the host could take it before rank 0 binds it.
eph_lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
port=$(head -1 "$T/out" | cut -d' ' -f5 | cut -d: -f2)
if [ "$eph_lo" -gt 10064 ]; then
  check "the PAPCCL_COMM_ID port ($port) lies below the ephemeral range ($eph_lo)" \
    test "${port:-0}" -ge 10000 -a "${port:-0}" -lt "$eph_lo"
fi
run -np 2 /bin/sh -c 'echo "[$1]"' sh -n --tag-output
check "-np works and the program's own options are left alone" \
  test "$rc" = 0 -a "$(grep -c '^\[-n\]$' "$T/out")" = 2
run -n 3 /bin/sh -c '[ "$PAPCCL_RANK" = 0 ] && exit 0; sleep 0.3'
check "a rank that exits 0 early does not stop the others" test "$rc" = 0

# --- failures ----------------------------------------------------------------------------
run -n 3 /bin/sh -c 'sleep 30 & echo $! > "$TESTDIR/gc.$PAPCCL_RANK"
  if [ "$PAPCCL_RANK" = 1 ]; then sleep 0.2; exit 3; fi; wait'
check "a rank exiting 3 makes papcclrun exit 3" test "$rc" = 3
check "... promptly (${ms} ms)" test "$ms" -lt 5000
check "... and says which rank" test -n "$(grep 'rank 1 .*exited with code 3' "$T/err")"
sleep 0.2
left=""
for f in "$T"/gc.*; do alive "$(cat "$f")" && left="$left $(cat "$f")"; done
check "... and the sleeping siblings (and their children) are gone" test -z "$left"

run -n 2 /bin/sh -c '[ "$PAPCCL_RANK" = 1 ] && kill -USR1 $$; sleep 30'
check "a rank killed by SIGUSR1 makes papcclrun exit 138" test "$rc" = 138
check "... and names the signal" test -n "$(grep 'rank 1 .*SIGUSR1' "$T/err")"

t0=$(now_ms)
run --timeout 1 -n 2 sleep 30
check "--timeout 1 exits 124" test "$rc" = 124
check "... after about 1 s (${ms} ms)" test "$ms" -ge 900 -a "$ms" -lt 6000

# --- signals -----------------------------------------------------------------------------
rm -f "$T"/ready.* "$T"/term.*
start_bg -n 3 /bin/sh -c 'trap "touch \"\$TESTDIR/term.\$PAPCCL_RANK\"; exit 0" TERM
  touch "$TESTDIR/ready.$PAPCCL_RANK"; while :; do sleep 0.05; done'
wait_files 3 "$T/ready.*"
sleep 0.1
kill -TERM "$pid"
finish_bg
check "SIGTERM to papcclrun exits 143" test "$rc" = 143
check "... after every rank got SIGTERM" test "$(compgen -G "$T/term.*" | wc -l)" = 3

rm -f "$T"/ready.*
start_bg -n 2 /bin/sh -c 'trap "" TERM INT; touch "$TESTDIR/ready.$PAPCCL_RANK"; exec sleep 30'
wait_files 2 "$T/ready.*"
sleep 0.1
t0=$(now_ms)
kill -INT "$pid"
finish_bg
ms=$(($(now_ms) - t0))
check "ranks that ignore SIGINT are killed after the grace period (rc $rc)" test "$rc" = 130
check "... about 2 s later (${ms} ms)" test "$ms" -ge 1500 -a "$ms" -lt 8000

rm -f "$T"/pid.*
exec 3>&2 2>/dev/null # bash would report the killed job
start_bg -n 2 /bin/sh -c 'echo $$ > "$TESTDIR/pid.$PAPCCL_RANK"; exec sleep 30'
wait_files 2 "$T/pid.*"
sleep 0.1
kill -KILL "$pid"
finish_bg
exec 2>&3 3>&-
sleep 0.3
left=""
for f in "$T"/pid.*; do alive "$(cat "$f")" && left="$left $(cat "$f")"; done
check "SIGKILL to papcclrun takes its ranks along" test -z "$left"
for p in $left; do kill -KILL "$p" 2>/dev/null; done

# --- input and output --------------------------------------------------------------------
printf 'line1\nline2\n' >"$T/in"
$LIMIT "$RUN" -n 2 /bin/sh -c 'echo "$PAPCCL_RANK:$(cat | wc -l)"' <"$T/in" >"$T/out" 2>"$T/err"
check "rank 0 reads stdin, rank 1 reads /dev/null" \
  test "$(sort "$T/out" | tr '\n' ' ')" = "0:2 1:0 "

run -n 2 --tag-output /bin/sh -c 'echo out$PAPCCL_RANK; echo err$PAPCCL_RANK >&2; printf tail'
check "--tag-output exits 0" test "$rc" = 0
check "--tag-output prefixes stdout lines" \
  test "$(sort "$T/out" | tr '\n' ' ')" = "[0] out0 [0] tail [1] out1 [1] tail "
check "--tag-output prefixes stderr lines" test "$(sort "$T/err" | tr '\n' ' ')" = "[0] err0 [1] err1 "
run -n 1 --tag-output /bin/sh -c 'head -c 20000 /dev/zero | tr "\0" x; echo'
check "--tag-output passes a long line on with one prefix" \
  test "$(wc -l <"$T/out")" = 1 -a "$(wc -c <"$T/out")" = 20005 -a "$(head -c 4 "$T/out")" = "[0] "

# --- perf/rankenv.h ----------------------------------------------------------------------
# --- CPU binding -------------------------------------------------------------------------
# Each rank prints the CPUs it may run on (from /proc, as a list like 0-3 or 2).
ncpu=$(nproc)
cpus_of() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status; }
allowed=$(cpus_of)
run -n 1 /bin/sh -c 'sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status'
check "--bind-to default: one rank gets one CPU" test "$(cat "$T/out")" = "${allowed%%[-,]*}"
run -n 1 --bind-to none /bin/sh -c 'sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status'
check "--bind-to none: the launcher's CPUs" test "$(cat "$T/out")" = "$allowed"
run -n $((ncpu + 1)) /bin/sh -c 'sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status'
check "more ranks than CPUs: not bound by default" test "$(sort -u "$T/out")" = "$allowed"
run -n "$ncpu" --tag-output /bin/sh -c 'sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status'
check "as many ranks as CPUs: each its own" test "$(sed 's/^\[[0-9]*\] //' "$T/out" | sort -u | wc -l)" = "$ncpu"
run -n 2 --bind-to socket true
check "--bind-to rejects an unknown value" test "$rc" = 2

if [ -n "$PROBE" ]; then
  run -n 3 "$PROBE"
  check "rankenv under papcclrun" test "$(sort "$T/out" | cut -d' ' -f1-4 | tr '\n' ' ')" = \
    "PAPCCL_RANK 0 3 0 PAPCCL_RANK 1 3 1 PAPCCL_RANK 2 3 2 "
  out=$(env -i OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=0 \
    SLURM_PROCID=3 SLURM_NTASKS=8 "$PROBE")
  check "rankenv: Open MPI before Slurm" test "$out" = "OMPI_COMM_WORLD_RANK 1 4 0 -"
  out=$(env -i PMI_RANK=2 PMI_SIZE=3 MPI_LOCALRANKID=1 "$PROBE")
  check "rankenv: PMI" test "$out" = "PMI_RANK 2 3 1 -"
  out=$(env -i PMIX_RANK=5 SLURM_NTASKS=6 "$PROBE")
  check "rankenv: PMIx with the Slurm size" test "$out" = "PMIX_RANK 5 6 5 -"
  out=$(env -i SLURM_PROCID=2 SLURM_NTASKS=4 SLURM_LOCALID=0 "$PROBE")
  check "rankenv: Slurm" test "$out" = "SLURM_PROCID 2 4 0 -"
  out=$(env -i "$PROBE")
  check "rankenv: nothing set" test "$out" = "none -"
  out=$(env -i PAPCCL_RANK=4 PAPCCL_NRANKS=4 "$PROBE")
  check "rankenv: a rank beyond the count is an error" test "$out" = "none PAPCCL_RANK"
  out=$(env -i SLURM_PROCID=1 SLURM_NTASKS=x "$PROBE")
  check "rankenv: a malformed count is an error" test "$out" = "none SLURM_NTASKS"
fi

echo "1..$count"
if [ "$failures" -ne 0 ]; then
  echo "# $failures of $count checks failed"
  exit 1
fi
