"""examples/python/multinode_ddp.py across two emulated nodes, started as users start a multi-node
torch job: one torchrun per node with --nnodes 2 --node-rank K and static rendezvous at node 0's
address. The nodes are network namespaces made by chorusrun --netns --nodes 2 (10.213.0.1 and
10.213.0.2 on a bridge; CHORUS_HOSTID node0/node1, so Chorus goes over TCP between them):
chorusrun starts one process per namespace, which becomes that node's torchrun. Needs root and a
working `ip netns`; skipped otherwise. (Under Slurm the same example runs by srun and sbatch:
scripts/slurm_check.sh.) And torch_worker.py's "cluster" scenario on the same emulated nodes:
collectives of 1-4 MiB, DDP and FSDP2 against references computed in the test."""

import os
import re
import subprocess

import pytest

from launch import PYTHON, HERE, build_dir, collect, fsdp2_skip

EXAMPLE = os.path.join(HERE, "..", "..", "examples", "python", "multinode_ddp.py")

# One node's torchrun; chorusrun's own rank variables are dropped (torchrun sets the ranks'),
# CHORUS_HOSTID (the emulated node) is kept.
NODE = ('exec env -u CHORUS_RANK -u CHORUS_NRANKS -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_NRANKS '
        '-u CHORUS_COMM_ID -u CHORUS_NNODES "$0" -m torch.distributed.run --nnodes 2 '
        '--node-rank "$CHORUS_RANK" --nproc-per-node 2 --master-addr 10.213.0.1 '
        '--master-port 29500 "$1" --steps 10')


def netns_unavailable():
    if os.geteuid() != 0:
        return "not root"
    probe = f"chorus-probe-{os.getpid()}"
    add = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None if add.returncode == 0 else "ip netns add failed: " + add.stderr


def run_nodes(nodes, node_cmd):
    """The example on `nodes` emulated nodes of 2 ranks, one `node_cmd` (a node's torchrun) per
    namespace; asserts that it passed and that every rank reported its place."""
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    run = os.path.join(build_dir(), "chorusrun")
    p = subprocess.Popen([run, "--netns", "--nodes", str(nodes), "-np", str(nodes), "--timeout",
                          "300", "/bin/sh", "-c", node_cmd, PYTHON, EXAMPLE],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rc, text = collect([p], 330)[0]
    assert rc == 0, text
    world = 2 * nodes
    for r in range(world):  # node r // 2, local rank r % 2
        assert re.search(rf"rank {r} of {world} local_rank {r % 2} host \S+ ok\b", text, re.M), text
    assert re.search(rf"multinode_ddp: {world} ranks on {nodes} nodes, .* OK$", text, re.M), text


def test_torchrun_two_emulated_nodes():
    run_nodes(2, NODE)


# Four nodes by torchrun's dynamic (c10d) rendezvous, as elastic jobs start: every node names
# the same endpoint and job id, node 0's agent hosts the store (is_host: the emulated nodes share
# one hostname, so torch cannot tell which is 10.213.0.1 by name), and --local-addr gives each
# agent its node's address (what rank 0's agent publishes as MASTER_ADDR). torchrun assigns the
# node ranks in order of arrival.
NODE_C10D = ('h=0; [ "$CHORUS_RANK" = 0 ] && h=1; a=10.213.0.$((CHORUS_RANK + 1)); '
             'exec env -u CHORUS_RANK -u CHORUS_NRANKS -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_NRANKS '
             '-u CHORUS_COMM_ID -u CHORUS_NNODES "$0" -m torch.distributed.run --nnodes 4 '
             '--nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 10.213.0.1:29500 '
             '--rdzv-id chorus-test --rdzv-conf is_host=$h --local-addr $a "$1" --steps 10')


def test_torchrun_four_emulated_nodes_c10d_rendezvous():
    run_nodes(4, NODE_C10D)


def test_torch_collectives_ddp_and_fsdp2_across_emulated_nodes():
    """What a data-parallel job sends across nodes, through torch: all_reduce,
    reduce_scatter_tensor, all_gather_into_tensor and broadcast of 4 B-64 KiB per rank (the
    recursive doubling and halving) and of 1, 2 and 4 MiB against references, then DDP and
    FSDP2 trained against the same model trained locally on every rank's batch (torch_worker.py cluster), on 2 emulated nodes of 2 ranks under chorusrun
    --netns with torchrun's variables (scripts/netns_torch_rank.sh).
    scripts/torch_cluster_check.sh runs it on larger shapes and with each algorithm forced."""
    why = netns_unavailable() or fsdp2_skip()
    if why:
        pytest.skip(why)
    run = os.path.join(build_dir(), "chorusrun")
    rank_sh = os.path.join(HERE, "..", "..", "scripts", "netns_torch_rank.sh")
    worker = os.path.join(HERE, "torch_worker.py")
    p = subprocess.Popen([run, "--netns", "--nodes", "2", "-np", "4", "--timeout", "300", rank_sh,
                          PYTHON, worker, "cluster"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rc, text = collect([p], 330)[0]
    assert rc == 0, text
    assert len(re.findall(r"cluster scenario ok on 4 ranks", text)) == 4, text
