#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan in build-fuzz/, then
# runs each for N seconds on a copy of its committed corpus (the tree is not modified). One
# summary line per fuzzer (name, executions, result); exits non-zero if any fuzzer found a
# crash, leak or timeout, or if one could not be built or run. An input that fails is left
# in build-fuzz/fuzz-runs/<name>/ (crash-*, leak-*, timeout-*, oom-*): fix the bug, then
# commit the input as tests/fuzz/corpus/<name>/crash-<what> so that the replay tests keep it.
#
# usage: scripts/fuzz.sh [--seconds N] [--jobs J] [--only NAME]...
# environment: PAPCCL_FUZZ_SECONDS=N (default 60), PAPCCL_FUZZ_JOBS=J (fuzzers at once,
# default: the number of cores), PAPCCL_SETUP_ARGS="..." (extra meson options),
# PAPCCL_JOBS=N (compile jobs), CC/CXX (default clang/clang++).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=build-fuzz
seconds=${PAPCCL_FUZZ_SECONDS:-60}
only=()
jobs_at_once=${PAPCCL_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
while [ $# -gt 0 ]; do
  case "$1" in
  --seconds) seconds=${2:?--seconds needs a value}; shift ;;
  --seconds=*) seconds=${1#*=} ;;
  --only) only+=("${2:?--only needs a name}"); shift ;;
  --jobs) jobs_at_once=${2:?--jobs needs a value}; shift ;;
  --jobs=*) jobs_at_once=${1#*=} ;;
  -h | --help) sed -n '3,13p' "$0"; exit 0 ;;
  *) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case "$seconds" in '' | *[!0-9]*) echo "fuzz.sh: --seconds wants a whole number" >&2; exit 2 ;; esac
case "$jobs_at_once" in '' | 0 | *[!0-9]*) echo "fuzz.sh: --jobs wants a number >= 1" >&2; exit 2 ;; esac

export CC=${CC:-clang} CXX=${CXX:-clang++}
if ! command -v "$CC" >/dev/null; then
  echo "fuzz.sh: $CC not found (scripts/install-deps.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
read -r -a setup_args <<<"${PAPCCL_SETUP_ARGS:-}"
opts=(-Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized
  -Dcuda=disabled -Dtests=disabled -Dperf=false)
start=$(date +%s)
if [ -f "$BUILD/build.ninja" ]; then
  meson setup --reconfigure "$BUILD" "${opts[@]}" "${setup_args[@]}" >/dev/null
elif [ -f "$BUILD/meson-private/coredata.dat" ]; then
  meson setup --wipe "$BUILD" "${opts[@]}" "${setup_args[@]}"
else
  meson setup "$BUILD" "${opts[@]}" "${setup_args[@]}"
fi
jobs=()
[ -n "${PAPCCL_JOBS:-}" ] && jobs=(-j "$PAPCCL_JOBS")
# The fuzz targets only (the rest of the library is not needed to fuzz).
targets=$(ninja -C "$BUILD" -t targets all | awk -F: '$1 ~ /^tests\/fuzz\/fuzz_[a-z0-9_]+$/ {print $1}' | sort)
if [ -z "$targets" ]; then
  echo "fuzz.sh: no fuzz targets in $BUILD" >&2
  exit 1
fi
# shellcheck disable=SC2086
ninja -C "$BUILD" "${jobs[@]}" $targets
echo "fuzz.sh: built in $(($(date +%s) - start)) s; each fuzzer runs ${seconds} s, $jobs_at_once at once"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
work=$BUILD/fuzz-runs

# fuzz_one TARGET: runs one fuzzer on a copy of its corpus and writes its summary line to
# $work/NAME/result (first word: ok or FAILED).
fuzz_one() {
  local t=$1 name dir log rc=0 execs cov artifact result what
  name=${t#tests/fuzz/fuzz_}
  dir=$work/$name
  rm -rf "$dir"
  mkdir -p "$dir/corpus"
  if [ -d "tests/fuzz/corpus/$name" ]; then cp -r "tests/fuzz/corpus/$name/." "$dir/corpus/"; fi
  log=$dir/log.txt
  echo "fuzz.sh: running $name for ${seconds} s"
  # -timeout: one input may take 10 s (the slowest seed takes milliseconds); -rss_limit_mb: a
  # parser that allocates without bound shows as oom-*. The outer timeout catches a hang in
  # libFuzzer itself.
  timeout --kill-after=10 $((seconds + 60)) "$BUILD/$t" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 -artifact_prefix="$dir/" \
    "$dir/corpus" >"$log" 2>&1 || rc=$?
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1 || true)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}' || true)
  artifact=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'slow-unit-*' \) | head -1)
  if [ "$rc" = 0 ] && [ -z "$artifact" ]; then
    result=ok
  else
    what=$(grep -m1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer): [a-zA-Z -]+|runtime error: .*' "$log" || true)
    result="FAILED (exit $rc${what:+: $what}${artifact:+; input $artifact}; log $log)"
  fi
  printf '%-16s execs %-10s cov %-6s %s\n' "$name" "${execs:-?}" "${cov:-?}" "$result" >"$dir/result"
}

# Each fuzzer is one thread: run as many at once as there are cores (--jobs), each still
# for the full number of seconds on a core of its own.
names=()
running=0
for t in $targets; do
  name=${t#tests/fuzz/fuzz_}
  if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " == *" $name "* ]]; then continue; fi
  names+=("$name")
  if [ "$running" -ge "$jobs_at_once" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait || true
failed=0
summary=()
for name in "${names[@]}"; do
  line=$(cat "$work/$name/result" 2>/dev/null || printf '%-16s FAILED (no result)' "$name")
  summary+=("$line")
  case "$line" in *" ok") ;; *) failed=1 ;; esac
done
echo "fuzz.sh: done in $(($(date +%s) - start)) s"
for l in "${summary[@]}"; do echo "fuzz: $l"; done
exit $failed
