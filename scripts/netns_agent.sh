#!/bin/sh
# OpenMPI's rsh agent for the namespace hosts of scripts/netns_hosts.sh, in place of ssh:
# OpenMPI runs `AGENT HOST COMMAND...` to start its daemon on HOST; here HOST is the namespace's
# name and the command runs inside it, in a UTS namespace of its own whose host name is HOST (so
# OpenMPI's and tandem's messages name the host; `ip netns exec` also shows /etc/netns/HOST/hosts
# as /etc/hosts there). Use: mpirun --mca plm_rsh_agent <repo>/scripts/netns_agent.sh ...
# `netns_agent.sh HOST COMMAND...` by hand is "ssh HOST COMMAND..." (e.g. to start mpirun on h0).
set -eu
[ $# -ge 2 ] || { echo "netns_agent: usage: netns_agent.sh HOST COMMAND..." >&2; exit 2; }
host=$1
shift
ip netns list | awk '{print $1}' | grep -qx -- "$host" || {
  echo "netns_agent: no network namespace named '$host' (scripts/netns_hosts.sh up N NAME)" >&2
  exit 1
}
# Like ssh, hand the words to a shell as one command line.
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
