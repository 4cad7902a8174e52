#!/bin/sh
# One emulated node's ranks started by hand, as a user's own launcher starts them: chorusrun
# --netns runs this once per node (-np Q, one process per namespace), and it starts P ranks of
# PROGRAM there with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT: Chorus's root at MASTER_PORT + 1, node 0's address), chorusrun's own
# rank variables dropped (CHORUS_HOSTID, the emulated node, is kept). Nothing watches the ranks:
# one that exits, whatever its status, leaves every other running. When its last rank ended the
# node prints "NODE node=K status=S" (S: the first non-zero exit status of its ranks, 128+SIG for
# a signal) and exits 0, so that chorusrun, which ends the job at a failed exit, waits for every
# node.
#   scripts/netns_node_ranks.sh P PROGRAM [ARGS...]
#   build/chorusrun --netns --nodes 2 -np 2 scripts/netns_node_ranks.sh 2 PROGRAM ARGS...
# With --torchrun PYTHON the node runs torchrun itself (PYTHON -m torch.distributed.run, one agent
# per node, static rendezvous at node 0's MASTER_PORT; --no-python where PROGRAM is no .py
# script), as a multi-node torchrun job starts: the agent watches its ranks and stops the others
# (SIGTERM) when one fails. S is then torchrun's exit status.
#   scripts/netns_node_ranks.sh --torchrun PYTHON P PROGRAM [ARGS...]
set -u
torchrun=
if [ "$1" = --torchrun ]; then
  torchrun=$2
  shift 2
fi
p=$1
shift
node=$CHORUS_RANK nnodes=$CHORUS_NRANKS
addr=${CHORUS_COMM_ID%:*} port=${CHORUS_COMM_ID##*:}
unset CHORUS_RANK CHORUS_NRANKS CHORUS_LOCAL_RANK CHORUS_LOCAL_NRANKS CHORUS_COMM_ID CHORUS_NNODES
if [ -n "$torchrun" ]; then
  case $1 in
    *.py) nopython= ;;
    *) nopython=--no_python ;;
  esac
  status=0
  # The underscore spelling: Debian's torch 1.13 takes only that one, 2.x both.
  "$torchrun" -m torch.distributed.run --nnodes "$nnodes" --node_rank "$node" \
    --nproc_per_node "$p" --master_addr "$addr" --master_port $((port - 1)) $nopython "$@" ||
    status=$?
  echo "NODE node=$node status=$status"
  exit 0
fi
export WORLD_SIZE=$((nnodes * p)) LOCAL_WORLD_SIZE="$p" MASTER_ADDR="$addr"
export MASTER_PORT=$((port - 1))
pids=
l=0
while [ "$l" -lt "$p" ]; do
  RANK=$((node * p + l)) LOCAL_RANK=$l "$@" &
  pids="$pids $!"
  l=$((l + 1))
done
status=0
for q in $pids; do
  wait "$q" || { s=$?; [ "$status" -ne 0 ] || status=$s; }
done
echo "NODE node=$node status=$status"
