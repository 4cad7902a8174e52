#!/bin/sh
# One rank of a torch program under chorusrun --netns: torchrun's variables from chorusrun's
# (chorus.torch fills MASTER_ADDR / MASTER_PORT from CHORUS_COMM_ID), and Gloo on this
# namespace's own interface (the hostname, the same in every namespace, would not reach it).
#   build/chorusrun --netns --nodes 2 -np 4 scripts/netns_torch_rank.sh build/chorus-torch-bench ...
export RANK="$CHORUS_RANK" WORLD_SIZE="$CHORUS_NRANKS" LOCAL_RANK="$CHORUS_LOCAL_RANK"
GLOO_SOCKET_IFNAME=$(ip -o -4 addr show | awk '$2 != "lo" {print $2; exit}')
export GLOO_SOCKET_IFNAME
exec "$@"
