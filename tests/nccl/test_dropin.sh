#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The drop-in libnccl.so.2 under programs built for NVIDIA's NCCL.
# usage: test_dropin.sh OUR_LIBDIR PROGRAM_OWN [PROGRAM_NVIDIA NVIDIA_LIBNCCL]
#   OUR_LIBDIR      the directory holding papccl's libnccl.so.2
#   PROGRAM_OWN     nccl_program built against papccl's nccl.h, linked to papccl's library
#   PROGRAM_NVIDIA  the same source built against NVIDIA's nccl.h and linked to NVIDIA's
#                   libnccl.so.2 (absent: NVIDIA's NCCL was not found, those checks skip)
#   NVIDIA_LIBNCCL  NVIDIA's libnccl.so.2, for the exported-symbol comparison
# Exit status: 1 when a check failed, else 77 (the test runner's "skipped") when a check
# could not run, so that a run without NVIDIA's NCCL never reads as a pass; 0 otherwise.
set -u
# The test runner may put our library directory on LD_LIBRARY_PATH: each run below chooses
# its own search path.
unset LD_LIBRARY_PATH LD_PRELOAD
LIBDIR=$(cd "${1:?usage}" && pwd)
OWN=${2:?usage}
NV=${3:-}
NVLIB=${4:-}
OURLIB=$LIBDIR/libnccl.so.2
T=$(mktemp -d "${TMPDIR:-/tmp}/dropin-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
LIMIT="timeout -k 5 180"
export PAPCCL_TIMEOUT_S=60

failures=0
count=0
pass() { count=$((count + 1)); echo "ok $count - $1"; }
fail() {
  count=$((count + 1))
  failures=$((failures + 1))
  echo "not ok $count - $1"
  [ -s "$T/out" ] && sed 's/^/#   out: /' "$T/out" | head -20
  [ -s "$T/err" ] && sed 's/^/#   err: /' "$T/err" | head -30
  return 0
}
skipped=0
skip() {
  skipped=1
  echo "ok - # SKIP $1"
}
# The end: failures fail; otherwise a skipped check makes the whole test a skip.
finish() {
  echo "1..$count"
  [ "$failures" = 0 ] || exit 1
  [ "$skipped" = 0 ] || exit 77
  exit 0
}
# runs "$@" with output in $T/out, $T/err and status in $rc
run() {
  $LIMIT "$@" >"$T/out" 2>"$T/err" </dev/null
  rc=$?
}
# ran_on_papccl NAME: the program passed, answered with papccl's version from our
# libnccl.so.2, and no other libnccl was loaded
ran_on_papccl() {
  local lib loaded
  lib=$(awk '/^library:/ {print $3}' "$T/out")
  loaded=$(grep '^loaded:' "$T/out" | tr ' ' '\n' | grep -c libnccl)
  if [ "$rc" != 0 ] || ! grep -qx PASS "$T/out"; then
    fail "$1: the program failed (exit $rc)"
  elif ! grep -q '^library: 22707 ' "$T/out"; then
    fail "$1: ncclGetVersion did not answer papccl's 22707"
  elif [ "$(readlink -f "$lib")" != "$(readlink -f "$OURLIB")" ]; then
    fail "$1: ncclAllReduce resolved to $lib, not $OURLIB"
  elif [ "$loaded" != 1 ]; then
    fail "$1: $loaded libnccl objects were loaded: $(grep '^loaded:' "$T/out")"
  else
    pass "$1"
  fi
}

# --- the library itself -------------------------------------------------------------------
soname=$(readelf -d "$OURLIB" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" = libnccl.so.2 ] && [ -e "$LIBDIR/libnccl.so" ]; then
  pass "soname libnccl.so.2 and a libnccl.so link"
else
  fail "soname is '$soname' (want libnccl.so.2) or libnccl.so is missing"
fi

# --- built against papccl's nccl.h and linked to papccl's library -------------------------
run "$OWN" 4
ran_on_papccl "a program built on papccl's nccl.h, 4 ranks"

# --- (a), (b): built against NVIDIA's nccl.h and libnccl.so.2 -------------------------------
if [ -z "$NV" ]; then
  skip "NVIDIA's NCCL was not found at configure time: (a), (b), (d) need it"
  finish
fi
linked=$(ldd "$NV" | awk '$1 == "libnccl.so.2" {print $3}')
if [ -n "$linked" ] && [ "$(readlink -f "$linked")" = "$(readlink -f "$NVLIB")" ]; then
  pass "the NVIDIA-built program loads NVIDIA's libnccl.so.2 by default ($linked)"
else
  fail "the NVIDIA-built program does not resolve to NVIDIA's library: '$linked'"
fi
run env LD_LIBRARY_PATH="$LIBDIR" "$NV" 4
ran_on_papccl "(a) NVIDIA-built program with LD_LIBRARY_PATH, 4 ranks"
run env LD_LIBRARY_PATH="$LIBDIR" "$NV" 2
ran_on_papccl "(a) NVIDIA-built program with LD_LIBRARY_PATH, 2 ranks"
# A sanitizer build's program needs its sanitizer runtimes first in the preload list.
pre=$(ldd "$NV" | awk '$1 ~ /^lib(asan|ubsan)\.so/ {printf "%s ", $3}')
run env LD_PRELOAD="$pre$OURLIB" "$NV" 3
ran_on_papccl "(b) NVIDIA-built program with LD_PRELOAD, 3 ranks"
# Immediate binding resolves every NCCL symbol the program references at start.
run env LD_PRELOAD="$pre$OURLIB" LD_BIND_NOW=1 "$NV" 2
ran_on_papccl "(b) LD_PRELOAD with LD_BIND_NOW=1"
# NCCL_DEBUG is honoured (copied to PAPCCL_DEBUG): INFO lines appear.
run env LD_LIBRARY_PATH="$LIBDIR" NCCL_DEBUG=INFO "$NV" 2
if [ "$rc" = 0 ] && grep -q "papccl INFO" "$T/err"; then
  pass "NCCL_DEBUG=INFO gives papccl's INFO lines"
else
  fail "NCCL_DEBUG=INFO: exit $rc, no INFO line"
fi

# --- (d): every function NVIDIA's library exports, ours exports --------------------------------
if [ -n "$NVLIB" ] && [ -r "$NVLIB" ]; then
  nm -D --defined-only "$NVLIB" | awk '$2 ~ /^[TW]$/ {print $3}' | sort -u >"$T/nv.syms"
  nm -D --defined-only "$OURLIB" | awk '$2 ~ /^[TW]$/ {print $3}' | sort -u >"$T/ours.syms"
  missing=$(comm -23 "$T/nv.syms" "$T/ours.syms")
  nnv=$(wc -l <"$T/nv.syms")
  if [ "$nnv" -ge 100 ] && [ -z "$missing" ]; then
    pass "(d) all $nnv functions exported by NVIDIA's libnccl.so.2 are exported"
  else
    echo "$missing" >"$T/err"
    fail "(d) $(echo "$missing" | grep -c .) of $nnv NVIDIA exports are missing"
  fi
  # ncclX weak, pncclX strong at the same address, as NVIDIA's (profiling interposition).
  nm -D --defined-only "$OURLIB" >"$T/ours.nm"
  bad=0
  for f in $(awk '$2 == "W" && $3 ~ /^nccl/ {print $3}' "$T/ours.nm"); do
    a=$(awk -v s="$f" '$3 == s {print $1}' "$T/ours.nm")
    b=$(awk -v s="p$f" '$2 == "T" && $3 == s {print $1}' "$T/ours.nm")
    [ -n "$b" ] && [ "$a" = "$b" ] || bad=$((bad + 1))
  done
  nweak=$(awk '$2 == "W" && $3 ~ /^nccl/' "$T/ours.nm" | wc -l)
  if [ "$nweak" -ge 52 ] && [ "$bad" = 0 ]; then
    pass "(d) $nweak weak ncclX, each with a strong pncclX at the same address"
  else
    fail "(d) $nweak weak ncclX; $bad without a matching pncclX"
  fi
  others=$(nm -D --defined-only "$OURLIB" | awk '{print $3}' | grep -v -E '^p?nccl' | head -5)
  if [ -z "$others" ]; then
    pass "(d) nothing but nccl*/pnccl* is exported"
  else
    fail "(d) other symbols exported: $others"
  fi
else
  skip "NVIDIA's libnccl.so.2 not readable: (d) skipped"
fi

finish
