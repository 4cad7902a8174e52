"""torch.distributed backend "chorus": every op x dtype x world size 1..4, init methods,
subgroups, async work and futures, error paths, a killed peer, a hung peer, and DDP training
against gloo. Each job's ranks are real processes started with torchrun-style variables."""

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("chorus._chorus_torch")

from launch import HERE, launch, report  # noqa: E402

WORKER = os.path.join(HERE, "torch_worker.py")


def ok(results):
    assert all(rc == 0 for rc, _ in results), report(results)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_matrix(world):
    ok(launch(world, [WORKER, "matrix"]))


def test_matrix_async_worker_thread():
    ok(launch(3, [WORKER, "matrix"], env={"CHORUS_TORCH_ASYNC": "1"}))


@pytest.mark.parametrize("method", ["tcp", "file"])
def test_init_methods(method, tmp_path):
    ok(launch(2, [WORKER, "matrix", method], env={"STORE_FILE": str(tmp_path / "store")}))


def test_errors():
    ok(launch(2, [WORKER, "errors"]))


@pytest.mark.parametrize("victim", [0, 2])
def test_killed_peer(victim):
    results = launch(4, [WORKER, "kill", str(victim)], timeout=120)
    for r, (rc, text) in enumerate(results):
        if r == victim:
            assert rc == 9, report(results)
        else:
            assert rc == 0, report(results)
            assert f"rank {victim}" in text, report(results)


def test_abort_from_another_thread():
    ok(launch(2, [WORKER, "abort"], timeout=120))


def test_hung_peer_hits_group_timeout():
    results = launch(2, [WORKER, "hang"], env={"WORKER_TIMEOUT": "3"}, timeout=60)
    assert results[0][0] == 0, report(results)


@pytest.mark.parametrize("mode", ["inline", "async"])
def test_ddp_matches_gloo(mode):
    env = {"CHORUS_TORCH_ASYNC": "1" if mode == "async" else "0"}
    ok(launch(2, [os.path.join(HERE, "ddp_worker.py")], env=env))


@pytest.mark.parametrize("example", ["ddp_train.py", "sharded_train.py"])
def test_examples_run(example):
    import subprocess
    path = os.path.join(HERE, "..", "..", "examples", "python", example)
    r = subprocess.run(["/usr/bin/python3", path, "-np", "2", "--steps", "20"], text=True,
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
