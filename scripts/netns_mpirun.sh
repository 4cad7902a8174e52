#!/bin/sh
# Open MPI across chorusrun's emulated nodes, over TCP:
#   build/chorusrun --netns [--link-rate R] --nodes Q -np Q scripts/netns_mpirun.sh P PROGRAM [ARGS...]
# chorusrun starts one process per node namespace; the one of node 0 runs mpirun for P ranks per
# node, which starts its daemons in the other namespaces through scripts/netns_rsh_agent.sh;
# the others wait for it (at most 10 minutes). Only the TCP and self BTLs: every namespace has
# the same hostname, so Open MPI would take them for one node and use shared memory (vader)
# between them, around the links.
here=$(cd "$(dirname "$0")" && pwd)
per=$1
shift
flag=/tmp/chorus_netns_mpirun.$(echo "$CHORUS_COMM_ID" | tr -c '0-9a-zA-Z' _)
if [ "$CHORUS_RANK" = 0 ]; then
  hosts=""
  k=1
  while [ "$k" -le "$CHORUS_NRANKS" ]; do
    hosts="$hosts${hosts:+,}10.213.0.$k:$per"
    k=$((k + 1))
  done
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np $((per * CHORUS_NRANKS)) \
    --host "$hosts" --mca plm_rsh_agent "$here/netns_rsh_agent.sh" --mca btl self,tcp \
    --mca btl_tcp_if_include 10.213.0.0/24 --mca oob_tcp_if_include 10.213.0.0/24 "$@"
  rc=$?
  k=1
  while [ "$k" -lt "$CHORUS_NRANKS" ]; do  # one flag per waiting node: each removes its own
    touch "$flag.$k"
    k=$((k + 1))
  done
  exit $rc
fi
i=0
while [ ! -e "$flag.$CHORUS_RANK" ] && [ $i -lt 1200 ]; do
  sleep 0.5
  i=$((i + 1))
done
rm -f "$flag.$CHORUS_RANK"
