#!/usr/bin/env bash
# Results across emulated nodes, through torch: python/tests/torch_worker.py's "cluster"
# scenario (all_reduce, reduce_scatter_tensor, all_gather_into_tensor and broadcast at 4 B-64 KiB
# and 1, 2 and 4 MiB against references; DDP and FSDP2 trained against the same model trained
# locally) under chorusrun --netns, per shape, with the tuner's own choice and with each algorithm forced
# (CHORUS_ALGO). Prints per run the verdict of every rank, the largest distance from the
# reference, and the algorithms rank 0 ran for its calls of 10^4 elements and more.
# Each rank is started by chorusrun with torchrun's variables (scripts/netns_torch_rank.sh), or
# with --torchrun as users start a multi-node job: one torchrun per node (chorusrun starts one
# process per namespace, which becomes that node's torchrun: --nnodes Q --node-rank K
# --nproc-per-node P, static rendezvous at node 0's address).
#
#   scripts/torch_cluster_check.sh [--build build] [--python PY] [--shapes "4x2 8x2"]
#                                  [--algos "default ring tree hier"] [--rate 1gbit]
#                                  [--busy N] [--torchrun] [--out build/torch_cluster]
# --busy N: N busy processes (start_busy, scripts/compare_common.sh; outside the namespaces) run
# for the whole check, as a training job's own computation shares the cores with its collectives.
# Root and iproute2 (chorusrun --netns); PY (default: .venv/bin/python, else python3) with torch
# 2.x and the build's torch backend (PYTHONPATH=BUILD/python).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/compare_common.sh  # start_busy
build=build shapes="4x2 8x2" algos="default ring tree hier" rate=1gbit out=build/torch_cluster
busy=0 torchrun=0
python=.venv/bin/python
[ -x "$python" ] || python=python3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --torchrun) torchrun=1; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "torch_cluster_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
case "$python" in */*) python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python") ;; esac
case "$build" in /*) ;; *) build=$PWD/$build ;; esac  # absolute: the ranks run elsewhere too
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
# torchrun must run a job of nothing first (scripts/torchrun_probe.sh: Debian 12's does not).
if [ "$torchrun" -eq 1 ] && ! scripts/torchrun_probe.sh "$python"; then
  echo "torch_cluster_check: run without --torchrun" >&2
  exit 2
fi
start_busy "$busy"
[ "$busy" -eq 0 ] || echo "torch_cluster_check: $busy busy loops beside the ranks"
# A node's torchrun ($0 python, $1 ranks per node, $2 nodes): chorusrun's rank variables are
# dropped (torchrun sets the ranks'), CHORUS_HOSTID (the emulated node) is kept; Gloo (torch's
# store side) on the namespace's own interface. The flags in their underscore spelling, which
# Debian's torch 1.13 takes as well as 2.x (1.13 refuses --node-rank).
node_cmd='GLOO_SOCKET_IFNAME=$(ip -o -4 addr show | awk '"'"'$2 != "lo" {print $2; exit}'"'"')
export GLOO_SOCKET_IFNAME
exec env -u CHORUS_RANK -u CHORUS_NRANKS -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_NRANKS \
  -u CHORUS_COMM_ID -u CHORUS_NNODES "$0" -m torch.distributed.run --nnodes "$2" \
  --node_rank "$CHORUS_RANK" --nproc_per_node "$1" --master_addr 10.213.0.1 --master_port 29500 \
  python/tests/torch_worker.py cluster'
status=0
for shape in $shapes; do
  q=${shape%x*} p=${shape#*x}
  for algo in $algos; do
    log=$out/${shape}_$algo.log how=
    algo_env=()
    [ "$algo" = default ] || algo_env=(CHORUS_ALGO="$algo")
    start=$(date +%s)
    rc=0
    if [ "$torchrun" -eq 1 ]; then
      log=$out/${shape}_${algo}_torchrun.log how=" (torchrun per node)"
      ranks=("$q" /bin/sh -c "$node_cmd" "$python" "$p" "$q")
    else
      ranks=($((q * p)) scripts/netns_torch_rank.sh "$python" python/tests/torch_worker.py cluster)
    fi
    env "${algo_env[@]}" CHORUS_DEBUG=INFO WORKER_TIMEOUT=120 \
      "$build/chorusrun" --timeout 400 --netns --link-rate "$rate" --nodes "$q" -np "${ranks[@]}" \
      >"$log" 2>&1 || rc=$?
    # The ranks of a node's torchrun share its output, where one rank's line may run into
    # another's: the verdicts are counted, not the lines.
    ok=$(grep -o "rank [0-9]*: cluster scenario ok" "$log" | sort -u | wc -l)
    diff=$(grep "rank 0: cluster scenario ok" "$log" |
      grep -o "off the reference by up to [^ ]* (DDP) and [^ ]* (FSDP2)" | head -n 1 || true)
    # Rank 0's own lines ("host:pid:tid [0] CHORUS INFO ..."), whatever started it.
    coll="(AllReduce|ReduceScatter|AllGather|Broadcast)"
    used=$(grep -E ":[0-9]+ \[0\] CHORUS INFO $coll .* count ([0-9]{5,})" "$log" |
      grep -oE "$coll|algo [a-z_]+" |
      paste -d' ' - - | sort | uniq -c |
      awk '{printf "%s%s:%s x%d", (NR > 1 ? ", " : ""), $2, $4, $1}' || true)
    echo "$shape $algo$how: exit $rc, $ok of $((q * p)) ranks ok, $(($(date +%s) - start)) s;" \
      "${diff:-no figures}; rank 0 ran (calls of 10^4 elements and more): ${used:-none seen}"
    grep -h "FAIL" "$log" | head -n 5 || true
    [ "$rc" -eq 0 ] && [ "$ok" -eq $((q * p)) ] || status=1
  done
done
exit $status
