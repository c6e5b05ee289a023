#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what papccl's build, tests and demo need on Debian 12 / Ubuntu. Idempotent: when
# everything is there already it only checks (a few dpkg queries) and touches nothing.
#
# usage: scripts/install-deps.sh
#   needs root (or sudo) only when something is missing.
#   PAPCCL_DEPS_OPTIONAL=0 skips the optional packages.
set -euo pipefail

# Needed by `meson setup/compile/test`, scripts/test.sh and scripts/demo.sh.
required=(
  meson ninja-build pkg-config gcc g++ python3
  python3-venv python3-dev  # the virtual environment with torch (scripts/setup-venv.sh)
  libgtest-dev libgmock-dev # GoogleTest suites
  libucx-dev                # ucx transport (built when found)
  libibverbs-dev            # ib transport (built when found)
  openmpi-bin libopenmpi-dev # running papccl programs under mpirun; MPI comparisons
  clang-format               # the format check in scripts/test.sh (Debian 12: version 14)
  iproute2                   # hosts as network namespaces in the between-hosts tests
  clang libclang-rt-14-dev   # libFuzzer fuzzers (scripts/fuzz.sh) and its sanitizer runtimes
  valgrind                   # memcheck of every collective (the valgrind test)
)
# Nice to have; a missing one is reported, never fatal. libgloo-dev: Gloo, for comparison
# benchmarks (Debian 12 has it; some releases do not). python3-matplotlib: perf/plot.py.
# ucx-utils: ucx_perftest, the transport's own limit in scripts/bench-hosts.sh.
# PyTorch (the torch.distributed backend, python/papccl) comes from PyPI into the project's
# virtual environment: scripts/setup-venv.sh, which scripts/test.sh runs.
optional=(libgloo-dev python3-matplotlib ucx-utils)

log() { echo "install-deps: $*"; }

installed() { # installed PKG: true when dpkg has it fully installed
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = installed ]
}

available() { # available PKG: true when apt knows a candidate version
  local cand
  cand=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')
  [ -n "$cand" ] && [ "$cand" != "(none)" ]
}

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
  log "this script knows Debian/Ubuntu (apt) only; install by hand:"
  log "  ${required[*]} (optional: ${optional[*]})"
  exit 1
fi

missing=()
for p in "${required[@]}"; do installed "$p" || missing+=("$p"); done
# An optional package counts as missing only when apt knows it, so that a machine without
# it does not run `apt-get update` on every call.
missing_optional=()
find_missing_optional() {
  missing_optional=()
  [ "${PAPCCL_DEPS_OPTIONAL:-1}" != 0 ] || return 0
  for p in "${optional[@]}"; do
    installed "$p" || ! available "$p" || missing_optional+=("$p")
  done
}
find_missing_optional

if [ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ]; then
  log "all packages present"
else
  SUDO=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      SUDO=(sudo -n)
    else
      log "missing packages: $(echo "${missing[*]} ${missing_optional[*]}" | xargs)"
      log "run this script as root (or with password-less sudo) to install them"
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  APT=("${SUDO[@]}" apt-get -q -o DPkg::Lock::Timeout=300)
  log "apt-get update"
  "${APT[@]}" update
  find_missing_optional # the lists are fresh now
  to_install=()
  for p in "${missing[@]}"; do
    if available "$p"; then
      to_install+=("$p")
    else
      log "required package $p does not exist in the apt sources of this machine"
      exit 1
    fi
  done
  to_install+=("${missing_optional[@]}")
  for p in "${optional[@]}"; do
    installed "$p" || available "$p" || log "optional package $p is not available here; skipping it"
  done
  if [ ${#to_install[@]} -gt 0 ]; then
    log "installing: ${to_install[*]}"
    "${APT[@]}" install -y --no-install-recommends "${to_install[@]}"
  fi
fi

# gcc's sanitizer runtimes ship with gcc (libgcc-<ver>-dev); the ASan build needs them.
for lib in libasan.so libubsan.so; do
  if [ "$(gcc -print-file-name="$lib")" = "$lib" ]; then
    log "warning: gcc has no $lib; the sanitizer build in scripts/test.sh will fail"
  fi
done
# CUDA is not an apt package here: the build uses it when nvcc is found (PATH or
# /usr/local/cuda) and builds the host-only library otherwise.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  log "CUDA toolkit found"
else
  log "no CUDA toolkit found; building without CUDA"
fi
