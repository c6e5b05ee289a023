#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Several "hosts" on one machine, for real: one network namespace per host, each with its own
# eth0 and address, all plugged into a bridge that lives in a namespace of its own (the
# "switch"). Traffic between hosts crosses the kernel's network stack (veth + bridge), as it
# would between machines; nothing is shared through the root namespace.
#
# usage: scripts/netns-hosts.sh up PREFIX N    PREFIX-sw (bridge br0) and PREFIX-h0..h(N-1),
#                                                host h has eth0 = 10.99.0.(h+1)/24
#        scripts/netns-hosts.sh down PREFIX    removes every namespace named PREFIX-*
#        scripts/netns-hosts.sh cut PREFIX H   takes host H's link down (a cut cable)
#        scripts/netns-hosts.sh heal PREFIX H  brings it back up
#        scripts/netns-hosts.sh exec PREFIX H CMD...  runs CMD on host H: in its network
#                                                namespace and a UTS namespace of its own whose
#                                                host name is PREFIX-hH (so MPI launchers and
#                                                UCX see one node per host, as on real hosts)
#        scripts/netns-hosts.sh check          exit 0 when this machine can do the above
#                                                (root, iproute2, util-linux's unshare,
#                                                network and UTS namespaces, veth)
# The host names resolve nowhere: address hosts by their 10.99.0.x. All of the above needs
# root. `ip netns exec PREFIX-hH CMD` also runs CMD on host H, under this machine's name.
# Namespace names are PREFIX-sw and PREFIX-hN; PREFIX must be at most 20 characters of
# [A-Za-z0-9_.-].
set -euo pipefail

die() {
  echo "netns-hosts: $*" >&2
  exit 1
}
valid_prefix() {
  [[ "$1" =~ ^[A-Za-z0-9_.-]{1,20}$ ]] || die "bad prefix '$1' (1-20 of [A-Za-z0-9_.-])"
}

cmd=${1:-}
case "$cmd" in
check)
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
  command -v ip >/dev/null || die "needs iproute2 (ip)"
  probe="papccl-probe-$$"
  ip netns add "$probe" 2>/dev/null || die "cannot create a network namespace here"
  command -v unshare >/dev/null || die "needs util-linux's unshare"
  ok=1
  ip -n "$probe" link add va type veth peer name vb 2>/dev/null || ok=0
  ip netns exec "$probe" unshare --uts hostname "$probe" 2>/dev/null || ok=2
  ip netns del "$probe"
  [ "$ok" = 1 ] || die "cannot create veth pairs here"
  [ "$ok" != 2 ] || die "cannot give a namespace its own host name (unshare --uts)"
  echo "netns-hosts: ok"
  ;;
up)
  prefix=${2:-}
  n=${3:-}
  valid_prefix "$prefix"
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "bad host count '$n' (1-200)"
  sw="$prefix-sw"
  trap '"$0" down "$prefix" >/dev/null 2>&1 || true' ERR
  ip netns add "$sw"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  ip -n "$sw" link set lo up
  for ((h = 0; h < n; h++)); do
    ns="$prefix-h$h"
    ip netns add "$ns"
    # The pair is made inside the switch; its far end moves straight into the host, so no
    # interface name ever lives in the root namespace (parallel runs cannot collide).
    ip -n "$sw" link add "p$h" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "p$h" master br0
    ip -n "$sw" link set "p$h" up
    ip -n "$ns" addr add "10.99.0.$((h + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  trap - ERR
  ;;
down)
  prefix=${2:-}
  valid_prefix "$prefix"
  for ns in $(ip netns list | awk '{print $1}'); do
    case "$ns" in "$prefix"-*) ip netns del "$ns" || true ;; esac
  done
  ;;
exec)
  prefix=${2:-}
  h=${3:-}
  valid_prefix "$prefix"
  [[ "$h" =~ ^[0-9]+$ ]] || die "bad host '$h'"
  [ $# -ge 4 ] || die "exec: no command"
  shift 3
  # A fresh UTS namespace per command, always given the same name: every process of host H
  # (ranks, MPI daemons) sees the host name PREFIX-hH, and no namespace outlives its processes.
  # shellcheck disable=SC2016 # $0 and $@ are the inner shell's
  exec ip netns exec "$prefix-h$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' \
    "$prefix-h$h" "$@"
  ;;
cut | heal)
  prefix=${2:-}
  h=${3:-}
  valid_prefix "$prefix"
  [[ "$h" =~ ^[0-9]+$ ]] || die "bad host '$h'"
  state=down
  [ "$cmd" = heal ] && state=up
  ip -n "$prefix-h$h" link set eth0 "$state"
  ;;
*)
  sed -n '3,22p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
