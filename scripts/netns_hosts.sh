#!/usr/bin/env bash
# Simulated hosts on one machine for multi-host MPI runs: N Linux network namespaces joined by a
# switch (a bridge in a namespace of its own, so the machine's own network is never touched).
#   netns_hosts.sh up N [NAME]   makes NAME-h0 .. NAME-h<N-1> (NAME defaults to tnd), host i at
#                                10.231.0.<i+1>/24 on its eth0, loopback up, and the names in
#                                /etc/netns/<host>/hosts (what `ip netns exec` shows as /etc/hosts)
#   netns_hosts.sh down [NAME]   SIGKILLs every process left in NAME's namespaces, removes them
#   netns_hosts.sh probe         exit 0 if namespaces, veth pairs and bridges can be made here,
#                                else prints why and exits 1 (tests skip on that)
# Launch into them with scripts/netns_agent.sh as OpenMPI's rsh agent (docs/distributed.md).
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2. Every step is bounded in time.
set -euo pipefail

SUBNET_PREFIX=10.231.0
die() { echo "netns_hosts: error: $*" >&2; exit 1; }
# ip commands can block on a wedged kernel; none should take more than seconds.
ipc() { timeout 20 ip "$@"; }

namespaces_of() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1-(h[0-9]+|sw)\$" || true
}

down() {
  local name=$1 ns
  for ns in $(namespaces_of "$name"); do
    # A namespace outlives its name while a process is inside: end them first.
    local pids
    pids=$(ipc netns pids "$ns" 2>/dev/null || true)
    if [[ -n "$pids" ]]; then
      kill -KILL $pids 2>/dev/null || true
      for _ in $(seq 50); do
        pids=$(ipc netns pids "$ns" 2>/dev/null || true)
        [[ -z "$pids" ]] && break
        sleep 0.1
      done
    fi
    ipc netns del "$ns" || echo "netns_hosts: could not delete namespace $ns" >&2
    rm -rf "/etc/netns/$ns"
  done
}

probe() {
  [[ $(id -u) -eq 0 ]] || { echo "not root (uid $(id -u))"; return 1; }
  command -v ip >/dev/null || { echo "no 'ip' binary (Debian package iproute2)"; return 1; }
  local ns="tndprobe-$$" out
  if ! out=$(ipc netns add "$ns" 2>&1); then
    echo "cannot make a network namespace: $out"
    return 1
  fi
  trap 'ip netns del "$ns" 2>/dev/null || true' RETURN
  if ! out=$(ipc -n "$ns" link add pa type veth peer name pb 2>&1); then
    echo "cannot make a veth pair in a namespace: $out"
    return 1
  fi
  if ! out=$(ipc -n "$ns" link add br0 type bridge 2>&1); then
    echo "cannot make a bridge in a namespace: $out"
    return 1
  fi
  if ! out=$(ipc netns exec "$ns" unshare --uts true 2>&1); then
    echo "cannot enter a network namespace with a UTS namespace of its own (ip netns exec, unshare --uts): $out"
    return 1
  fi
}

up() {
  local n=$1 name=$2 i
  [[ "$n" =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || die "N must be 1..200, got '$n'"
  [[ "$name" =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || die "NAME must be 1-40 of [A-Za-z0-9_.-], got '$name'"
  [[ -z "$(namespaces_of "$name")" ]] || die "namespaces $name-* exist already (netns_hosts.sh down $name)"
  # Half-made hosts are removed again on any failure.
  trap 'down "$name"' ERR
  local sw="$name-sw"
  ipc netns add "$sw"
  ipc -n "$sw" link set lo up
  ipc -n "$sw" link add br0 type bridge
  ipc -n "$sw" link set br0 up
  local hosts="127.0.0.1 localhost"$'\n'
  for ((i = 0; i < n; i++)); do
    hosts+="$SUBNET_PREFIX.$((i + 1)) $name-h$i"$'\n'
  done
  for ((i = 0; i < n; i++)); do
    local h="$name-h$i"
    ipc netns add "$h"
    ipc -n "$h" link set lo up
    ipc -n "$sw" link add "p$i" type veth peer name eth0 netns "$h"
    ipc -n "$sw" link set "p$i" master br0 up
    ipc -n "$h" addr add "$SUBNET_PREFIX.$((i + 1))/24" dev eth0
    ipc -n "$h" link set eth0 up
    mkdir -p "/etc/netns/$h"
    printf '%s' "$hosts" >"/etc/netns/$h/hosts"
  done
  trap - ERR
  for ((i = 0; i < n; i++)); do echo "$name-h$i $SUBNET_PREFIX.$((i + 1))"; done
}

case "${1:-}" in
  up) up "${2:?usage: netns_hosts.sh up N [NAME]}" "${3:-tnd}" ;;
  down) down "${2:-tnd}" ;;
  probe) probe ;;
  *) die "usage: netns_hosts.sh up N [NAME] | down [NAME] | probe" ;;
esac
