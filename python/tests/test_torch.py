"""torch.distributed backend "chorus": every op x dtype x world size 1..4, init methods,
subgroups, async work and futures, error paths, a killed peer, a hung peer, and DDP training
against gloo. Each job's ranks are real processes with torchrun-style variables: fresh
interpreters started by hand (launch: init methods, killed ranks, shrink, debug wrappers), by
torchrun, by chorusrun and by the examples; the others forked from a server that has imported
torch (forked, as torch.multiprocessing's forkserver starts them; CHORUS_TEST_FRESH=1 makes
those fresh interpreters too)."""

import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("chorus._chorus_torch")

from launch import HERE, forked, fsdp2_skip, launch, report  # noqa: E402

WORKER = os.path.join(HERE, "torch_worker.py")


def ok(results):
    assert all(rc == 0 for rc, _ in results), report(results)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_matrix(world):
    ok(forked(world, [WORKER, "matrix"]))


@pytest.mark.parametrize("mode", ["0", "1"])
def test_collective_inside_a_future_callback(mode):
    ok(forked(2, [WORKER, "callback"], env={"CHORUS_TORCH_ASYNC": mode}, timeout=120))


def test_matrix_async_worker_thread():
    ok(forked(3, [WORKER, "matrix"], env={"CHORUS_TORCH_ASYNC": "1"}))


@pytest.mark.parametrize("method", ["tcp", "file"])
def test_init_methods(method, tmp_path):
    ok(launch(2, [WORKER, "matrix", method], env={"STORE_FILE": str(tmp_path / "store")}))


def test_errors():
    ok(forked(2, [WORKER, "errors"]))


# Fresh interpreters, and ranks forked from a server that has imported torch (as
# torch.multiprocessing's forkserver starts them: the victim's parent is that server, not the
# test).
@pytest.mark.parametrize("victim,start", [(0, "fresh"), (2, "fresh"), (2, "forked")])
def test_killed_peer(victim, start):
    run = forked if start == "forked" else launch
    results = run(4, [WORKER, "kill", str(victim)], timeout=120)
    for r, (rc, text) in enumerate(results):
        if r == victim:
            assert rc == 9, report(results)
        else:
            assert rc == 0, report(results)
            assert f"rank {victim}" in text, report(results)


def test_abort_from_another_thread():
    ok(forked(2, [WORKER, "abort"], timeout=120))


def test_hung_peer_hits_group_timeout():
    results = forked(2, [WORKER, "hang"], env={"WORKER_TIMEOUT": "3"}, timeout=60)
    assert results[0][0] == 0, report(results)


def test_hung_rank_named_across_emulated_nodes_by_hand():
    """scripts/netfault_table.sh's hangmute trial as a torch program (WORKER=torch): 2 emulated
    nodes x 2 ranks started by hand with torchrun's variables, nothing watching them; rank 3
    stops calling, and as the timeouts (10 s) fire its node sends no TCP data for 2 s. No
    survivor's error names another rank than 3 (failed_rank), though rank 2, which found it,
    exits at once."""
    import json
    import shutil
    import subprocess
    import chorus.torch
    from launch import build_dir
    if os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("ip"):
        pytest.skip("needs root, iproute2 and nftables (network namespaces)")
    if not chorus.torch._extended_api():
        pytest.skip("torch 1.13 gives the backend no global ranks: a timeout's culprit is in words")
    b = os.path.abspath(build_dir())
    if not os.path.exists(os.path.join(b, "tests", "chorus_netfault_worker")):
        pytest.skip("the build has no tests (tests/chorus_netfault_worker)")
    script = os.path.join(HERE, "..", "..", "scripts", "netfault_table.sh")
    env = dict(os.environ, WORKER="torch", LAUNCH="hand", TIMEOUT="10", PYTHON=sys.executable)
    r = subprocess.run([script, b, "--trial", "hangmute", "2"], env=env, capture_output=True,
                       text=True, timeout=420)
    assert r.returncode == 0 and r.stdout.strip(), r.stdout + r.stderr
    j = json.loads(r.stdout.strip().splitlines()[-1])
    why = json.dumps(j, indent=1)  # the whole trial (pytest would cut a dict short)
    # Each survivor names rank 3, or no one when the network was too slow for the bound (a
    # late answer waited for twice: heavy load), never another rank (`correct`).
    assert j["correct"] and j["named"] + j["nobody"] == 3, why
    assert not j["hang"] and not j["leftovers"] and not j["setup_errors"], why


@pytest.mark.parametrize("mode", ["inline", "async"])
def test_ddp_matches_gloo(mode):
    env = {"CHORUS_TORCH_ASYNC": "1" if mode == "async" else "0"}
    ok(forked(2, [os.path.join(HERE, "ddp_worker.py")], env=env))


@pytest.mark.parametrize("example", ["ddp_train.py", "sharded_train.py"])
def test_examples_run(example):
    import subprocess
    path = os.path.join(HERE, "..", "..", "examples", "python", example)
    r = subprocess.run([sys.executable, path, "-np", "2", "--steps", "20"], text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0 and "step   0" in r.stdout, r.stdout


def test_under_chorusrun():
    """init_process_group("chorus") with env:// under chorusrun: chorus.torch fills RANK,
    WORLD_SIZE, MASTER_ADDR and MASTER_PORT from chorusrun's variables."""
    from launch import chorusrun
    rc, text = chorusrun(3, [os.path.join(HERE, "..", "..", "examples", "python", "ddp_train.py"),
                             "--steps", "15"])
    assert rc == 0 and "chorus: 3 ranks" in text, text


def test_env_from_launcher():
    import chorus.torch as ct
    env = ct.env_from_launcher({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8",
                                "OMPI_COMM_WORLD_LOCAL_RANK": "1"})
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("3", "8", "1")
    assert "MASTER_ADDR" not in env
    env = ct.env_from_launcher({"CHORUS_RANK": "0", "CHORUS_NRANKS": "2", "RANK": "5",
                                "CHORUS_COMM_ID": "10.0.0.7:4000"})
    assert (env["RANK"], env["WORLD_SIZE"]) == ("5", "2")  # RANK kept, WORLD_SIZE filled
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.7", "4001")
    # srun: the step's first node, and the port src/core/slurm_env.h derives from the job and
    # step ids: 20000 + (1234 * 101 + 3) % 12000 = 20000 + 124637 % 12000 = 24637.
    slurm = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "1234",
             "SLURM_STEP_ID": "3", "SLURM_STEP_NODELIST": "node[07-08],login1"}
    env = ct.env_from_launcher(dict(slurm))
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("2", "4", "0")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("node07", "24637")
    env = ct.env_from_launcher(dict(slurm, MASTER_ADDR="10.1.1.1", MASTER_PORT="29500"))
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.1.1.1", "29500")  # the user's kept
    batch = {k: v for k, v in slurm.items() if "STEP" not in k}  # a batch script: no step
    assert "MASTER_ADDR" not in ct.env_from_launcher(dict(batch, SLURM_JOB_NODELIST="node07"))
    from chorus import _chorus
    assert _chorus.slurm_first_host("rack[1-2]-n[5,7]") == "rack1-n5"
    assert _chorus.slurm_first_host("vm") == "vm"
    assert _chorus.slurm_first_host("bad[") == ""


TORCH2 = int(torch.__version__.split(".")[0]) >= 2


@pytest.mark.skipif(not TORCH2, reason="torch 2.x backend API")
@pytest.mark.parametrize("world", [1, 2, 3])
def test_torch2_features(world):
    ok(forked(world, [WORKER, "torch2"]))


@pytest.mark.skipif(not TORCH2, reason="torch 2.x backend API")
@pytest.mark.parametrize("world,mode", [(2, "0"), (3, "0"), (4, "0"), (3, "1")])
def test_what_gloo_has(world, mode):
    """Recv from any source, sparse all_reduce, get_future, all_reduce_coalesced, object
    collectives, batch_isend_irecv with tags, a per-call timeout (torch_worker.py gloo)."""
    ok(forked(world, [WORKER, "gloo"], env={"CHORUS_TORCH_ASYNC": mode}, timeout=240))


@pytest.mark.skipif(not hasattr(torch.distributed, "shrink_group"), reason="torch has no shrink_group")
@pytest.mark.parametrize("victim", [1, 3])
def test_shrink_after_kill(victim):
    results = launch(4, [WORKER, "shrink", str(victim)], timeout=180)
    for r, (rc, text) in enumerate(results):
        if r == victim:
            assert rc == -9 or rc == 137 or rc == 9, report(results)
        else:
            assert rc == 0, report(results)


EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")
FSDP2_SKIP = fsdp2_skip()  # None where FSDP2 runs on CPU (launch.py)
FSDP2 = FSDP2_SKIP is None


@pytest.mark.skipif(not FSDP2, reason=str(FSDP2_SKIP))
@pytest.mark.parametrize("world,args", [(2, []), (3, []), (2, ["--mp", "bf16"]),
                                        (2, ["--mp", "bf16", "--reduce-dtype", "bf16"])])
def test_fsdp2_matches_single_process(world, args):
    """FSDP2 training on chorus ends with the parameters of the same model trained on the whole
    batch in one process (the example checks every parameter and exits 1 if not)."""
    import subprocess
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "fsdp2_train.py"), "-np",
                        str(world), "--steps", "8"] + args, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0 and "(OK," in r.stdout, r.stdout


def test_wrong_torch_version_is_a_clear_import_error(tmp_path):
    """A chorus built for another torch release: `import chorus.torch` raises ImportError naming
    both versions (before the compiled backend is loaded); `import chorus` still works."""
    import shutil
    import subprocess
    import chorus
    pkg = tmp_path / "chorus"
    shutil.copytree(os.path.dirname(chorus.__file__), pkg)
    (pkg / "_build_info.py").write_text('TORCH_VERSION = "1.0.0"\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", "import chorus.torch"], text=True, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert r.returncode != 0 and "ImportError" in r.stdout, r.stdout
    assert "built for torch 1.0.0" in r.stdout and torch.__version__ in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-c", "import torch, chorus._chorus_torch"], text=True,
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert r.returncode == 1 and "ImportError" in r.stdout and "1.0.0" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-c", "import chorus, numpy; "
                        "print(chorus.Comm.from_env().all_reduce(numpy.ones(3)))"],
                       text=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120)
    assert r.returncode == 0 and "[1. 1. 1.]" in r.stdout, r.stdout


def test_numpy_api_without_torch():
    """`import chorus` (the numpy API) needs no torch at all."""
    import subprocess
    code = ("import sys; sys.modules['torch'] = None; import chorus, numpy; "
            "print(chorus.Comm.from_env().all_reduce(numpy.arange(3.0)))")
    r = subprocess.run([sys.executable, "-c", code], text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    assert r.returncode == 0 and "[0. 1. 2.]" in r.stdout, r.stdout


@pytest.mark.skipif(not hasattr(torch.distributed, "shrink_group"), reason="torch has no shrink_group")
def test_ddp_survives_a_lost_rank():
    """4 ranks train with DDP; one is SIGKILLed at a random step; the survivors shrink to 3,
    rebuild DDP, redo the step and end with the parameters of one process trained on the whole
    batch of every step (examples/python/elastic_ddp.py checks them and exits 1 if not)."""
    import random
    import subprocess
    # Not rank 0: started by hand, rank 0's process hosts torch's TCPStore, which the
    # survivors' shrink_group needs (under torchrun the agent hosts it, but the agent stops
    # every worker once one dies).
    victim, step = random.randrange(1, 4), random.randrange(1, 15)
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "elastic_ddp.py"), "-np", "4",
                        "--kill-rank", str(victim), "--kill-step", str(step)], text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                       start_new_session=True)
    print(f"victim {victim} at step {step}")
    assert r.returncode == 0, r.stdout
    assert r.stdout.count("(OK)") == 3 and "on 3 ranks" in r.stdout, r.stdout


@pytest.mark.skipif(not hasattr(torch.distributed, "shrink_group"), reason="torch has no shrink_group")
def test_fsdp2_survives_a_lost_rank():
    """4 ranks train with FSDP2 in HSDP form (2 replicas x 2 shards); one is SIGKILLed at a
    random step. The errors are raised on FSDP2's subgroups, whose group ranks are not global
    ranks (the error names the global rank at fault), and a survivor may be blocked in a
    subgroup with a live peer that failed elsewhere (released when that peer aborts its other
    groups). The survivors agree on the lost rank, shrink to 3, rebuild the full parameters from
    the surviving shard copies, shard again, and end with the parameters of one process trained
    on the whole batch of every step (examples/python/elastic_fsdp2.py exits 1 if not)."""
    import random
    import subprocess
    victim, step = random.randrange(1, 4), random.randrange(1, 11)
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "elastic_fsdp2.py"), "-np", "4",
                        "--kill-rank", str(victim), "--kill-step", str(step)], text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                       start_new_session=True)
    print(f"victim {victim} at step {step}")
    assert r.returncode == 0, r.stdout
    assert r.stdout.count("(OK)") == 3 and "on 3 ranks" in r.stdout, r.stdout


def test_torchrun_two_emulated_nodes():
    """torchrun --nnodes 2 (two agents, c10d rendezvous on loopback), each node a different
    CHORUS_HOSTID: ranks of different nodes talk over Chorus's TCP transport. FSDP2 training
    ends with the single-process parameters."""
    import shutil
    import subprocess
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("needs torch 2.x's torchrun")
    if not FSDP2:
        pytest.skip(FSDP2_SKIP)
    from launch import free_port
    port = free_port()
    procs = [subprocess.Popen([torchrun, "--nnodes", "2", "--node-rank", str(i),
                               "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                               "--master-port", str(port),
                               os.path.join(EXAMPLES, "fsdp2_train.py"), "--steps", "6"],
                              env=dict(os.environ, CHORUS_HOSTID=f"node{i}"), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for i in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)
    assert "4 ranks" in outs[0] and "(OK," in outs[0], outs[0]


@pytest.mark.parametrize("start", ["fork", "forkserver", "spawn"])
def test_multiprocessing_workers_that_never_destroy_fail_nobody(start):
    """torch.multiprocessing workers on 2 emulated nodes that end without destroy_process_group()
    while others still finish their last Broadcast: fork and forkserver workers end with
    os._exit (no interpreter teardown), spawn's with an ordinary exit; neither may take the data
    its rank sent last with it (chorus.torch destroys the groups at a worker's end)."""
    import subprocess
    from launch import free_port
    r = subprocess.run([sys.executable, os.path.join(HERE, "mp_leave_worker.py"), start,
                        str(free_port())], text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=180)
    assert r.returncode == 0 and r.stdout.count(": DONE") == 4, r.stdout
    assert "all workers exited 0" in r.stdout, r.stdout


@pytest.mark.skipif(not TORCH2, reason="torch 2.x")
@pytest.mark.parametrize("kind", ["size", "dtype"])
def test_mismatch_reported_with_debug_detail(kind):
    """TORCH_DISTRIBUTED_DEBUG=DETAIL wraps the backend in torch's checking wrapper: ranks that
    call all_reduce with different sizes or dtypes get an error, not a hang."""
    ok(launch(2, [WORKER, "mismatch", kind], env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL",
                                                  "WORKER_TIMEOUT": "30"}, timeout=120))


@pytest.mark.parametrize("kind", ["ddp", "fsdp2"])
def test_training_loop_names_a_dead_rank(kind):
    """A rank of a DDP or FSDP2 loop dies: every survivor's step raises naming it."""
    if kind == "fsdp2" and not FSDP2:
        pytest.skip(FSDP2_SKIP)
    victim = 1
    results = launch(3, [WORKER, "train_kill", kind, str(victim)], timeout=120)
    for r, (rc, text) in enumerate(results):
        assert rc == (9 if r == victim else 0), report(results)


PLACEMENT_SCRIPT = r'''
import os, sys, torch, torch.distributed as dist
import chorus.torch  # noqa: F401
dist.init_process_group("chorus")
rank, world = dist.get_rank(), dist.get_world_size()
for i in range(200):  # a reference computed here: the sum over ranks of (rank + 1) * (i + 1)
    t = torch.full((4099,), float((rank + 1) * (i + 1)))
    dist.all_reduce(t)
    want = float(world * (world + 1) // 2 * (i + 1))
    assert torch.equal(t, torch.full((4099,), want)), (i, t[:4])
print(f"cpus rank={rank} list={sorted(os.sched_getaffinity(0))}", flush=True)
dist.destroy_process_group()
'''


def _torchrun_cpus(tmp_path, env_extra, busy=0):
    """2 ranks started by torchrun, or by hand with its variables on torch 1.x (nothing pins
    them), beside `busy` spinning processes: each
    checks 200 all_reduces against its own reference and prints the CPUs it may use."""
    import re
    import subprocess
    from launch import free_port
    script = tmp_path / "placement.py"
    script.write_text(PLACEMENT_SCRIPT)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    port = free_port()
    try:
        if TORCH2:  # torchrun itself (Debian's torch 1.13 launcher fails on Python 3.11)
            p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                                "2", "--master_addr", "127.0.0.1", "--master_port", str(port),
                                str(script)], env=dict(os.environ, **env_extra), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
            rc, out = p.returncode, p.stdout
        else:  # the variables torchrun sets, by hand
            procs = [subprocess.Popen([sys.executable, str(script)], text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r),
                                               WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                                               **env_extra)) for r in range(2)]
            outs = [q.communicate(timeout=300)[0] for q in procs]
            rc, out = max(q.returncode for q in procs), "".join(outs)
    finally:
        for s in spinners:
            s.kill()
    assert rc == 0, out
    cpus = {int(r): set(eval(lst)) for r, lst in re.findall(r"cpus rank=(\d) list=(\[[^]]*\])",
                                                             out)}
    assert set(cpus) == {0, 1}, out
    return cpus


@pytest.mark.parametrize("busy", [0, 1])
def test_torchrun_ranks_take_their_share_of_the_cpus(tmp_path, busy):
    """Placement as torchrun users get it: the two ranks bind to disjoint shares covering the
    CPUs they were given (one each on 2 CPUs), beside a busy process too; CHORUS_BIND=none
    leaves them the whole set."""
    given = set(os.sched_getaffinity(0))
    if len(given) < 2:
        pytest.skip("one CPU: nothing to share")
    cpus = _torchrun_cpus(tmp_path, {"CHORUS_BIND": "auto"}, busy)
    assert not (cpus[0] & cpus[1]) and cpus[0] | cpus[1] == given, cpus
    assert abs(len(cpus[0]) - len(cpus[1])) <= 1, cpus
    cpus = _torchrun_cpus(tmp_path, {"CHORUS_BIND": "none"}, busy)
    assert cpus[0] == given and cpus[1] == given, cpus
