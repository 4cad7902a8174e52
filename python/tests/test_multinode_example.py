"""examples/python/multinode_ddp.py across two emulated nodes, started as users start a multi-node
torch job: one torchrun per node with --nnodes 2 --node-rank K and static rendezvous at node 0's
address. The nodes are network namespaces made by chorusrun --netns --nodes 2 (10.213.0.1 and
10.213.0.2 on a bridge; CHORUS_HOSTID node0/node1, so Chorus goes over TCP between them):
chorusrun starts one process per namespace, which becomes that node's torchrun. Needs root and a
working `ip netns`; skipped otherwise. (Under Slurm the same example runs by srun and sbatch:
scripts/slurm_check.sh.)"""

import os
import re
import subprocess

import pytest

from launch import PYTHON, HERE, build_dir, collect

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


def test_torchrun_two_emulated_nodes():
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    run = os.path.join(build_dir(), "chorusrun")
    p = subprocess.Popen([run, "--netns", "--nodes", "2", "-np", "2", "--timeout", "300",
                          "/bin/sh", "-c", NODE, PYTHON, EXAMPLE],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rc, text = collect([p], 330)[0]
    assert rc == 0, text
    for r in range(4):  # node r // 2, local rank r % 2
        assert re.search(rf"rank {r} of 4 local_rank {r % 2} host \S+ ok\b", text, re.M), text
    assert re.search(r"multinode_ddp: 4 ranks on 2 nodes, .* OK$", text, re.M), text
