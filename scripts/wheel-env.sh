# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts that install PyPI wheels into papccl's cache (fetch-nccl-ref.sh,
# setup-peers.sh, setup-ucx.sh): CACHE (the cache folder), VENV (the project's virtual
# environment, scripts/setup-venv.sh) and PIP (its pip where it exists, else python3's).
# shellcheck disable=SC2034 # used by the scripts that source it
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/papccl
VENV=${PAPCCL_VENV:-$CACHE/venv}
PIP=(python3 -m pip)
[ -x "$VENV/bin/python3" ] && PIP=("$VENV/bin/python3" -m pip)
