#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The project's check in two tiers, one stage after another, one summary line per stage with
# its seconds, and the total.
#
# Landing tier (the default; what .ci/run runs, at most 40 minutes on a 2-core machine):
#   deps (Debian packages, and the project's virtual environment with torch), build (warnings
#   are errors), test (every suite but soak, valgrind and torch-full; the matrix
#   tests run a pairwise covering of their axes, PAPCCL_TEST_MATRIX=pairwise), pip
#   (scripts/pip-check.sh: pip install of the wheel into a fresh environment, 2 ranks on it),
#   asan-build + asan-test (ASan+UBSan, every suite but soak), tsan-build + tsan-test
#   (ThreadSanitizer, the suites 'concurrency' and 'gpu-sim' but not 'tsan-full'), fuzz (every fuzzer 15 s; the
#   corpus replay runs in the plain and ASan test stages), format, subjects (commit subjects
#   after 6f0927f at most 72 characters, scripts/check-subjects.py). Where nvcc is found every
#   build has CUDA, so suite gpu-sim (the device path on the CUDA stand-in) runs in all three.
# Full tier (--full, nightly): the same stages with every suite in every build (soak and
#   valgrind included, TSan of every suite), the full matrices and every fuzzer 60 s.
#
# usage: scripts/test.sh [--full] [--skip-deps] [--skip-asan] [--skip-tsan] [--skip-fuzz]
#                        [--skip-format] [--format=check|warn] [--skip-subjects]
# environment (same effect as the flags):
#   PAPCCL_TIER=landing|full, PAPCCL_SKIP_DEPS=1, PAPCCL_SKIP_ASAN=1, PAPCCL_SKIP_TSAN=1,
#   PAPCCL_SKIP_FUZZ=1, PAPCCL_SKIP_FORMAT=1, PAPCCL_SKIP_SUBJECTS=1,
#   PAPCCL_FUZZ_SECONDS=N           seconds each fuzzer runs (default 15, full tier 60)
#   PAPCCL_FUZZ_JOBS=N              fuzzers at once (default: the number of cores)
#   PAPCCL_TEST_MATRIX=full|pairwise  overrides the tier's choice for the matrix tests
#   PAPCCL_FORMAT=check|warn|skip   warn: report unformatted files but do not fail
#   PAPCCL_JOBS=N                   parallel compile jobs (default: ninja's choice)
#   PAPCCL_SETUP_ARGS="..."         extra `meson setup` options for every build
#   PAPCCL_SANITIZER_CUDA=disabled  no CUDA in the sanitizer builds (default auto: with nvcc)
#   MESON_TESTTHREADS=N             tests meson runs at once (meson's own variable)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=build
ASAN_BUILD=build-asan
TSAN_BUILD=build-tsan
# "check" fails the run on unformatted files; "warn" lists them and goes on. Switch to check
# once `clang-format -i` has been run over the tree.
FORMAT_DEFAULT=check

tier=${PAPCCL_TIER:-landing}
skip_deps=${PAPCCL_SKIP_DEPS:-0}
skip_asan=${PAPCCL_SKIP_ASAN:-0}
skip_tsan=${PAPCCL_SKIP_TSAN:-0}
skip_fuzz=${PAPCCL_SKIP_FUZZ:-0}
format_mode=${PAPCCL_FORMAT:-$FORMAT_DEFAULT}
skip_subjects=${PAPCCL_SKIP_SUBJECTS:-0}
[ "${PAPCCL_SKIP_FORMAT:-0}" = 1 ] && format_mode=skip
for arg in "$@"; do
  case "$arg" in
  --full) tier=full ;;
  --skip-deps) skip_deps=1 ;;
  --skip-asan) skip_asan=1 ;;
  --skip-tsan) skip_tsan=1 ;;
  --skip-fuzz) skip_fuzz=1 ;;
  --skip-format) format_mode=skip ;;
  --format=*) format_mode=${arg#--format=} ;;
  --skip-subjects) skip_subjects=1 ;;
  -h | --help)
    sed -n '3,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "test.sh: unknown argument '$arg' (try --help)" >&2
    exit 2
    ;;
  esac
done
case "$tier" in
landing | full) ;;
*)
  echo "test.sh: PAPCCL_TIER wants landing or full, got '$tier'" >&2
  exit 2
  ;;
esac
# What each tier leaves out (meson test --no-suite), and the fuzzers' seconds.
if [ "$tier" = full ]; then
  export PAPCCL_TEST_MATRIX=${PAPCCL_TEST_MATRIX:-full}
  plain_skip=()
  asan_skip=(--no-suite guard)
  tsan_only=()
  tsan_perf=true
  fuzz_seconds=${PAPCCL_FUZZ_SECONDS:-60}
else
  # The matrix tests run a pairwise covering of their axes (tests/multirank/harness.h, FullMatrix).
  export PAPCCL_TEST_MATRIX=${PAPCCL_TEST_MATRIX:-pairwise}
  plain_skip=(--no-suite soak --no-suite valgrind --no-suite torch-full)
  asan_skip=(--no-suite soak --no-suite guard)
  tsan_only=(--suite concurrency --suite gpu-sim --no-suite tsan-full)
  tsan_perf=false # those suites run no perf binary
  fuzz_seconds=${PAPCCL_FUZZ_SECONDS:-15}
fi
# The landing tier must finish within 40 minutes on CI's 2-core machine: warn past 35.
landing_warn_s=2100
case "$format_mode" in
check | warn | skip) ;;
*)
  echo "test.sh: --format wants check, warn or skip, got '$format_mode'" >&2
  exit 2
  ;;
esac

read -r -a setup_args <<<"${PAPCCL_SETUP_ARGS:-}"
# Every build of the check treats a compiler warning as an error, and must have its tests:
# a machine without GoogleTest fails the configure instead of passing with no tests.
setup_args=(-Dwerror=true -Dtests=enabled "${setup_args[@]}")
# As root (CI), the between-hosts tests must run with hosts as network namespaces: a
# machine that cannot make them fails those tests rather than skipping them.
if [ "$(id -u)" = 0 ]; then export PAPCCL_TEST_NETNS=${PAPCCL_TEST_NETNS:-require}; fi
compile_args=()
[ -n "${PAPCCL_JOBS:-}" ] && compile_args=(-j "$PAPCCL_JOBS")
ulimit -c 0 # sanitizer aborts must not litter the tree with cores

summary=()
failed=0
stage_note=""    # a stage may set it to qualify its "ok"
current_stage="" # the stage running now
start=$SECONDS

# stage NAME FUNCTION: runs FUNCTION, prints and records one summary line.
stage() {
  local name=$1 fn=$2 t0=$SECONDS res rc=""
  current_stage=$name
  echo
  echo "=== $name"
  stage_note=""
  if "$fn"; then res=${stage_note:-ok}; else
    rc=$?
    res="FAILED (exit $rc)"
    failed=1
  fi
  local line
  line=$(printf '%-11s %-16s %5d s' "$name" "$res" $((SECONDS - t0)))
  summary+=("$line")
  current_stage=""
  echo "=== $line"
  [ "$rc" = "" ]
}
skipped() { # skipped NAME WHY
  summary+=("$(printf '%-11s %-16s (%s)' "$1" skipped "$2")")
  echo
  echo "=== $1: skipped ($2)"
}

# setup_dir DIR OPTIONS...: configures DIR once; later runs reconfigure it with these options
# (a tier may change one) and reuse what is built.
setup_dir() {
  local dir=$1
  shift
  if [ -z "$nccl_ref" ] && [ "$skip_deps" = 1 ]; then
    nccl_ref=$(PAPCCL_SKIP_FETCH=1 scripts/fetch-nccl-ref.sh 2>/dev/null | tail -n 1) || nccl_ref=""
  fi
  [ -n "$nccl_ref" ] && set -- "$@" -Dnccl_ref_dir="$nccl_ref"
  if [ -f "$dir/build.ninja" ]; then
    echo "reusing $dir/"
    meson setup --reconfigure "$dir" "$@" "${setup_args[@]}" >/dev/null
  elif [ -f "$dir/meson-private/coredata.dat" ]; then
    meson setup --wipe "$dir" "$@" "${setup_args[@]}" # an earlier configure did not finish
  else
    meson setup "$dir" "$@" "${setup_args[@]}"
  fi
}

# The project's virtual environment with PyPI's torch (scripts/setup-venv.sh): the plain
# build's PyTorch backend and its tests use it, and must be built (-Dtorch=enabled).
torch_python=""
# NVIDIA's NCCL from its wheel (scripts/fetch-nccl-ref.sh): the drop-in tests' reference.
nccl_ref=""
do_deps() {
  scripts/install-deps.sh || return
  torch_python=$(scripts/setup-venv.sh | tail -n 1) || return
  nccl_ref=$(scripts/fetch-nccl-ref.sh | tail -n 1) || return
  scripts/setup-peers.sh >/dev/null # the comparison's MPI peers (perf/compare/run.sh)
}

do_build() {
  local torch_args=()
  if [ -z "$torch_python" ] && [ "$skip_deps" = 1 ]; then
    torch_python=${PAPCCL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/papccl/venv}/bin/python3
  fi
  [ -x "$torch_python" ] && torch_args=(-Dtorch=enabled -Dtorch_python="$torch_python")
  setup_dir "$BUILD" "${torch_args[@]}" || return
  meson compile -C "$BUILD" "${compile_args[@]}"
}

# run_tests DIR MESON_TEST_ARGS...: runs meson test in DIR, then prints where the stage
# spent its time (scripts/slowest.py reads meson's log, removed first so that a stage that
# ran nothing shows nothing); returns meson test's status.
run_tests() {
  local dir=$1 rc=0
  shift
  rm -f "$dir/meson-logs/testlog.json"
  meson test -C "$dir" --print-errorlogs "$@" || rc=$?
  python3 scripts/slowest.py "$dir" 10 || true
  return $rc
}

do_test() { run_tests "$BUILD" "${plain_skip[@]}"; }

# The wheel (build-wheel/) installed into a fresh environment beside the project's, the one
# the build used (torch_python); scripts/pip-check.sh says what that environment lacks.
do_pip() { PAPCCL_VENV=$(dirname "$(dirname "$torch_python")") scripts/pip-check.sh; }

do_asan_build() {
  setup_dir "$ASAN_BUILD" -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dcuda="${PAPCCL_SANITIZER_CUDA:-auto}" || return
  meson compile -C "$ASAN_BUILD" "${compile_args[@]}"
}

do_asan_test() {
  local lsan=""
  [ -f tests/lsan.supp ] && lsan="suppressions=$ROOT/tests/lsan.supp"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    LSAN_OPTIONS=$lsan \
    run_tests "$ASAN_BUILD" --timeout-multiplier 3 "${asan_skip[@]}"
}

do_tsan_build() {
  setup_dir "$TSAN_BUILD" -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dcuda="${PAPCCL_SANITIZER_CUDA:-auto}" -Dperf="$tsan_perf" || return
  meson compile -C "$TSAN_BUILD" "${compile_args[@]}"
}

do_tsan_test() {
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tests/tsan.supp" \
    run_tests "$TSAN_BUILD" --timeout-multiplier 3 "${tsan_only[@]}"
}

do_fuzz() { scripts/fuzz.sh --seconds "$fuzz_seconds"; }

do_format() {
  local cf
  cf=$(command -v clang-format-14 || command -v clang-format || true)
  if [ -z "$cf" ]; then
    echo "clang-format not found (scripts/install-deps.sh installs it)"
    return 1
  fi
  if ! "$cf" --version | grep -q 'version 14\.'; then
    echo "note: $("$cf" --version) is not version 14; its output may differ from CI's"
  fi
  local files=() dirs=()
  for d in include src kernels transport tests perf python; do [ -d "$d" ] && dirs+=("$d"); done
  mapfile -t files < <(find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' -o \
    -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
  if [ ${#files[@]} -eq 0 ]; then
    echo "no sources to check"
    return 0
  fi
  local log bad=()
  log=$(mktemp)
  "$cf" --dry-run --Werror "${files[@]}" >"$log" 2>&1 || true
  mapfile -t bad < <(grep -oE '^[^:]+:[0-9]+:[0-9]+: error' "$log" | cut -d: -f1 | sort -u)
  if [ ${#bad[@]} -eq 0 ] && grep -q . "$log"; then
    cat "$log" # clang-format itself failed (bad .clang-format, unreadable file)
    rm -f "$log"
    return 1
  fi
  if [ ${#bad[@]} -eq 0 ]; then
    echo "${#files[@]} files formatted"
    rm -f "$log"
    return 0
  fi
  head -n 60 "$log"
  [ "$(wc -l <"$log")" -gt 60 ] && echo "... ($(wc -l <"$log") lines in all)"
  rm -f "$log"
  echo
  echo "${#bad[@]} of ${#files[@]} files need clang-format:"
  printf '  %s\n' "${bad[@]}"
  echo "fix with: $cf -i ${bad[*]}"
  if [ "$format_mode" = warn ]; then
    echo "(format mode is warn: not failing)"
    stage_note="WARN (${#bad[@]} files)"
    return 0
  fi
  return 1
}

# Commit subjects after scripts/check-subjects.py's floor fit in 72 characters; a clone
# without that history (shallow, an export) is said and passes.
do_subjects() { python3 scripts/check-subjects.py; }

print_summary() {
  local total=$((SECONDS - start))
  echo
  echo "=== summary: $tier tier"
  [ ${#summary[@]} -eq 0 ] || printf '%s\n' "${summary[@]}"
  printf '%-28s %5d s (%d min %02d s)\n' total "$total" $((total / 60)) $((total % 60))
  if [ "$tier" = landing ] && [ "$total" -gt "$landing_warn_s" ]; then
    echo "WARNING: the landing tier took more than $((landing_warn_s / 60)) minutes; CI allows 40:"
    echo "         make the slowest tests above cheaper or move them to the full tier"
  fi
}
# A CI timeout or ^C still shows how far the run got.
on_interrupt() {
  trap - INT TERM
  [ -z "$current_stage" ] || summary+=("$(printf '%-11s %-16s' "$current_stage" interrupted)")
  print_summary
  echo "test.sh: interrupted"
  exit 130
}
trap on_interrupt INT TERM

if [ "$skip_deps" = 1 ]; then skipped deps "asked"; else stage deps do_deps || true; fi
if stage build do_build; then
  stage test do_test || true
else
  skipped test "build failed"
fi
if [ -x "$torch_python" ]; then
  stage pip do_pip || true
else
  skipped pip "no torch virtual environment: scripts/setup-venv.sh makes it"
fi
if [ "$skip_asan" = 1 ]; then
  skipped asan-build "asked"
  skipped asan-test "asked"
elif stage asan-build do_asan_build; then
  stage asan-test do_asan_test || true
else
  skipped asan-test "build failed"
fi
if [ "$skip_tsan" = 1 ]; then
  skipped tsan-build "asked"
  skipped tsan-test "asked"
elif stage tsan-build do_tsan_build; then
  stage tsan-test do_tsan_test || true
else
  skipped tsan-test "build failed"
fi
if [ "$skip_fuzz" = 1 ]; then skipped fuzz "asked"; else stage fuzz do_fuzz || true; fi
if [ "$format_mode" = skip ]; then skipped format "asked"; else stage format do_format || true; fi
if [ "$skip_subjects" = 1 ]; then skipped subjects "asked"; else stage subjects do_subjects || true; fi

print_summary
if [ "$failed" != 0 ]; then
  echo "test.sh: FAILED"
  exit 1
fi
echo "test.sh: all stages passed"
