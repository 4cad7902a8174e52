"""chorus.Comm on numpy arrays: ranks as threads of this interpreter and as processes (under
chorusrun and by hand with torchrun-style variables), every collective x dtype against
references computed independently; errors, closed communicators, abort."""

import os
import threading

import numpy as np
import pytest

import chorus
import numpy_worker
from launch import HERE, chorusrun, launch, report

WORKER = os.path.join(HERE, "numpy_worker.py")


def run_threads(n, fn):
    errors = []
    comms = chorus.Comm.init_all(n)

    def body(c):
        try:
            fn(c)
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    ts = [threading.Thread(target=body, args=(c,)) for c in comms]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    for c in comms:
        c.close()
    assert not errors, errors


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_threads(n):
    numpy_worker.FAIL.clear()
    run_threads(n, numpy_worker.run)
    assert not numpy_worker.FAIL, numpy_worker.FAIL


def test_threads_from_unique_id():
    uid = chorus.get_unique_id()
    out = {}

    def body(r):
        with chorus.Comm(3, uid, r, timeout=30) as c:
            out[r] = c.all_reduce(np.full(5, r + 1.0))

    ts = [threading.Thread(target=body, args=(r,)) for r in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    for r in range(3):
        np.testing.assert_array_equal(out[r], np.full(5, 6.0))


@pytest.mark.parametrize("n", [2, 3])
def test_processes_chorusrun(n):
    rc, text = chorusrun(n, [WORKER])
    assert rc == 0, text


def test_processes_by_hand():
    results = launch(4, [WORKER])
    assert all(rc == 0 for rc, _ in results), report(results)


EXAMPLE = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "python",
                                        "numpy_allreduce.py"))


def test_numpy_example_chorusrun():
    """examples/python/numpy_allreduce.py checks its own results (exit 1 on a mismatch)."""
    rc, text = chorusrun(3, [EXAMPLE, "--count", "100000"])
    assert rc == 0 and "numpy_allreduce: 3 ranks, 100000 floats: OK" in text, text


def test_numpy_example_torchrun_variables():
    results = launch(2, [EXAMPLE, "--count", "100000"])
    assert all(rc == 0 for rc, _ in results), report(results)
    assert "numpy_allreduce: 2 ranks, 100000 floats: OK" in results[0][1], report(results)


def test_single_rank_without_launcher():
    with chorus.Comm.from_env() as c:
        assert (c.rank, c.size) == (0, 1)
        np.testing.assert_array_equal(c.all_gather(np.arange(3)), [[0, 1, 2]])


def test_errors_and_closed():
    c = chorus.Comm(1, chorus.get_unique_id(), 0)
    with pytest.raises(chorus.InvalidArgumentError, match="C-contiguous"):
        c.all_reduce(np.zeros((4, 4))[:, 1])
    with pytest.raises(chorus.InvalidArgumentError, match="numpy array"):
        c.all_reduce([1, 2, 3])
    with pytest.raises(chorus.InvalidArgumentError, match="unknown op"):
        c.all_reduce(np.zeros(3), op="xor")
    with pytest.raises(chorus.InvalidArgumentError, match="expected 3"):
        c.all_reduce(np.zeros(3), out=np.zeros(4))
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError too
        c.all_reduce(np.zeros(3, dtype=bool))
    c.close()
    with pytest.raises(chorus.InvalidUsageError, match="closed"):
        c.all_reduce(np.zeros(3))
    with pytest.raises(chorus.InvalidArgumentError):
        chorus.Comm(2, b"short", 0)


def test_abort_unblocks_a_waiting_thread():
    comms = chorus.Comm.init_all(2)
    err = []

    def waiter():
        try:
            comms[0].all_reduce(np.zeros(10))  # rank 1 never joins
        except chorus.Error as e:
            err.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    t.join(0.5)
    assert t.is_alive()  # really waiting, and the GIL is free: this thread runs
    comms[0].abort()
    t.join(30)
    assert not t.is_alive() and err and "abort" in str(err[0]).lower(), err
    comms[1].close()


def test_shrink_excludes_live_ranks():
    comms = chorus.Comm.init_all(4)
    out = [None] * 4
    errors = []

    def body(c):
        try:
            nc = c.shrink(exclude=[1])
            out[c.rank] = nc
            if nc is not None:
                x = np.full(5, float(c.rank + 1))
                nc.all_reduce(x)
                np.testing.assert_array_equal(x, np.full(5, 1.0 + 3.0 + 4.0))
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    ts = [threading.Thread(target=body, args=(c,)) for c in comms]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    assert out[1] is None
    assert [o.rank for o in out if o is not None] == [0, 1, 2]
    assert all(o.size == 3 for o in out if o is not None)
    for o in out:
        if o is not None:
            o.close()
    for c in comms:
        c.close()
    (one,) = chorus.Comm.init_all(1)
    with pytest.raises(chorus.Error, match="excludeRanksList"):
        one.shrink(exclude=[5])
    one.close()


def test_all_reduce_argument_checks():
    """all_reduce's checks run in C++ (python/src/module.cc, npArg): each names the argument and
    the rank, and raises InvalidArgumentError (a ValueError) with code 4."""
    c = chorus.Comm(1, chorus.get_unique_id(), 0)
    x = np.arange(6, dtype=np.float32)
    cases = [
        (lambda: c.all_reduce(np.zeros((4, 4), np.float32)[:, 1]),
         r"\(rank 0\): x must be C-contig"),
        (lambda: c.all_reduce(x, out=np.zeros((6, 2), np.float32)[:, 0]),
         r"\(rank 0\): out must be C-contig"),
        (lambda: c.all_reduce([1.0, 2.0]), r"x must be a numpy array, got list"),
        (lambda: c.all_reduce(x, out=bytearray(24)), r"out must be a numpy array, got bytearray"),
        (lambda: c.all_reduce(x, out=np.zeros(6, np.int32)),
         r"out has dtype int32, expected float32"),
        (lambda: c.all_reduce(x, out=np.zeros(7, np.float32)), r"out holds 7 elements, expected 6"),
        (lambda: c.all_reduce(np.zeros(3, bool)), r"x: unsupported element type bool"),
        (lambda: c.all_reduce(np.zeros(3, np.complex64)), r"x: unsupported element type complex64"),
        (lambda: c.all_reduce(np.zeros(3, np.int16)), r"x: unsupported element type int16"),
        (lambda: c.all_reduce(np.zeros(3, ">f4")), r"x: unsupported element type >f4"),
        (lambda: c.all_reduce(x, op="xor"), r"unknown op 'xor' \(sum, prod"),
        (lambda: c.all_reduce(x, op=7), r"unknown op 7"),
        (lambda: c.all_reduce(x, op=None), r"unknown op None"),
    ]
    ro = np.zeros(6, np.float32)
    ro.flags.writeable = False
    cases += [(lambda: c.all_reduce(x, out=ro), r"out is read-only"),
              (lambda: c.all_reduce(ro), r"x is read-only")]
    for call, msg in cases:
        with pytest.raises(chorus.InvalidArgumentError, match=msg) as e:
            call()
        assert e.value.code == 4 and "all_reduce (rank 0)" in e.value.message
    np.testing.assert_array_equal(x, np.arange(6, dtype=np.float32))  # untouched by the failures
    # what still works: a read-only x out of place, any shape of out with as many elements,
    # out is x, int64 spelled 'l' or 'q', op as a name in any case, a numpy integer or a float
    out = np.empty((2, 3), np.float32)
    assert c.all_reduce(ro, out=out) is out
    assert c.all_reduce(x, out=x) is x and c.all_reduce(x) is x
    np.testing.assert_array_equal(c.all_reduce(np.arange(3, dtype="l"), out=np.empty(3, "q")),
                                  [0, 1, 2])
    for op in ("MAX", "mean", np.int64(chorus.MIN), 2.0, chorus.PROD):
        np.testing.assert_array_equal(c.all_reduce(x, out=np.empty_like(x), op=op), x)
    np.testing.assert_array_equal(c.all_reduce(np.full((), 3.0)), 3.0)  # 0-d
    assert c.all_reduce(np.zeros(0, np.uint8)).size == 0
    c.close()
    with pytest.raises(chorus.InvalidUsageError, match="closed"):
        c.all_reduce(x)


def test_all_reduce_keeps_the_gil_only_alone():
    """A small all_reduce keeps the GIL when its thread is the only Python thread; with others
    alive it releases it (ranks that are threads, abort from another thread)."""
    comms = chorus.Comm.init_all(2)
    out = [None, None]

    def body(c):
        out[c.rank] = c.all_reduce(np.full(2, c.rank + 1, np.int32))

    ts = [threading.Thread(target=body, args=(c,)) for c in comms]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert [list(o) for o in out] == [[3, 3], [3, 3]]
    for c in comms:
        c.close()


def test_reduce_and_broadcast_argument_checks():
    """reduce and broadcast make their checks in C++ too; broadcast moves bytes of any dtype."""
    c = chorus.Comm(1, chorus.get_unique_id(), 0)
    x = np.arange(6, dtype=np.float64)
    ro = np.zeros(6)
    ro.flags.writeable = False
    for call, msg in [
        (lambda: c.reduce(x, out=np.zeros(5)),
         r"reduce \(rank 0\): out holds 5 elements, expected 6"),
        (lambda: c.reduce(np.zeros(3, bool)),
         r"reduce \(rank 0\): x: unsupported element type bool"),
        (lambda: c.reduce(x, op="xor"), r"reduce \(rank 0\): unknown op 'xor'"),
        (lambda: c.reduce(x, root="0"), r"reduce \(rank 0\): root must be an int, got str"),
        (lambda: c.reduce(ro), r"reduce \(rank 0\): x is read-only"),
        (lambda: c.broadcast(x, out=np.zeros(6, np.float32)),
         r"broadcast \(rank 0\): out has dtype float32, expected float64"),
        (lambda: c.broadcast(x, out=np.zeros(7)),
         r"broadcast \(rank 0\): out holds 7 elements, expected 6"),
        (lambda: c.broadcast(x[::2]), r"broadcast \(rank 0\): x must be C-contiguous"),
        (lambda: c.broadcast(x, out=ro), r"broadcast \(rank 0\): out is read-only"),
        (lambda: c.broadcast(x.tolist()), r"broadcast \(rank 0\): x must be a numpy array"),
        (lambda: c.broadcast(np.array([None, 1])), r"x has dtype object: its elements are point"),
        (lambda: c.broadcast(x, root=3), r"rank 0"),  # the library's check
    ]:
        with pytest.raises(chorus.InvalidArgumentError, match=msg):
            call()
    out = np.empty((3, 2))
    assert c.reduce(x, out=out, op="max", root=np.int32(0)) is out
    np.testing.assert_array_equal(out.ravel(), x)
    for dt in (bool, np.complex128, np.int16, "U3", [("a", "i4"), ("b", "f2")]):
        v = np.ones(4, dtype=dt)
        o = np.zeros_like(v)
        assert c.broadcast(v, out=o) is o and c.broadcast(v) is v
        assert o.tobytes() == v.tobytes(), dt
    c.close()


@pytest.mark.parametrize("n", [2, 3])
def test_mem_alloc_registered_all_reduce(n):
    """mem_alloc arrays registered on every rank: all_reduce / reduce_scatter (the zero-copy
    path) in and out of place, then after deregistration (the fallback)."""

    def body(c):
        count = 100003
        x = chorus.mem_alloc((count,), np.float32, comm=c)
        y = chorus.mem_alloc(count, np.float32, comm=c)
        assert x.shape == (count,) and x.dtype == np.float32 and not x.any()
        vals = [(r * 7 + np.arange(count) * 3) % 5 + 1 for r in range(c.size)]
        ref = sum(vals).astype(np.float32)
        x[:] = (c.rank * 7 + np.arange(count) * 3) % 5 + 1
        c.all_reduce(x, out=y)
        assert np.array_equal(y, ref)
        c.all_reduce(x)  # in place
        assert np.array_equal(x, ref)
        z = chorus.mem_alloc((c.size, 1001), np.float64, comm=c)
        z[:] = c.rank + 1
        out = c.reduce_scatter(z)
        assert np.array_equal(out, np.full(1001, c.size * (c.size + 1) / 2))
        c.deregister(x)
        c.deregister(y)
        x[:] = 1
        c.all_reduce(x, out=y)
        assert np.array_equal(y, np.full(count, c.size, np.float32))
        with pytest.raises(chorus.InvalidArgumentError):
            c.deregister(x)

    run_threads(n, body)


def test_other_calls_argument_checks():
    """all_gather, reduce_scatter, all_to_all, gather, scatter, send and recv are checked in C++
    as all_reduce is (npArg): each error names the call, the rank and the argument."""
    c = chorus.Comm(1, chorus.get_unique_id(), 0)
    ro = np.zeros(4)
    ro.flags.writeable = False
    for call, msg in [
        (lambda: c.all_gather([1]), r"all_gather \(rank 0\): x must be a numpy array, got list"),
        (lambda: c.all_gather(np.zeros(3), out=np.zeros(4)),
         r"all_gather \(rank 0\): out holds 4 elements, expected 3"),
        (lambda: c.all_gather(np.zeros(3), out=np.zeros(3, np.float32)),
         r"all_gather \(rank 0\): out has dtype float32, expected float64"),
        (lambda: c.all_gather(np.zeros(4), out=ro), r"all_gather \(rank 0\): out is read-only"),
        (lambda: c.reduce_scatter(np.zeros(3, bool)),
         r"reduce_scatter \(rank 0\): x: unsupported element type bool"),
        (lambda: c.reduce_scatter(np.zeros(3), op="xor"), r"reduce_scatter \(rank 0\): unknown op"),
        (lambda: c.all_to_all(np.zeros((4, 4))[:, 0]),
         r"all_to_all \(rank 0\): x must be C-contiguous"),
        (lambda: c.gather(np.zeros(2), out=np.zeros(3)),
         r"gather \(rank 0\): out holds 3 elements, expected 2"),
        (lambda: c.scatter(np.zeros(2), out=np.zeros(3)),
         r"scatter \(rank 0\): out holds 3 elements, expected 2"),
        (lambda: c.send("x", 0), r"send \(rank 0\): x must be a numpy array, got str"),
        (lambda: c.recv(ro, 0), r"recv \(rank 0\): x is read-only"),
    ]:
        with pytest.raises(chorus.InvalidArgumentError, match=msg) as e:
            call()
        assert e.value.code == 4
    o = np.empty((1, 3), np.int64)
    assert c.all_gather(np.arange(3), out=o) is o
    assert c.reduce_scatter(np.arange(6.0)).shape == (6,)
    assert c.scatter(np.arange(2)[None]).shape == (2,)
    c.close()
    # checks made before any transfer, so one thread can make them on two ranks
    a, b = chorus.Comm.init_all(2)
    for call, msg in [
        (lambda: a.reduce_scatter(np.zeros(3)),
         r"reduce_scatter \(rank 0\): x holds 3 elements, not 2 equal blocks"),
        (lambda: a.all_to_all(np.zeros(3, np.int8)), r"all_to_all \(rank 0\): x is not 2 equal"),
        (lambda: b.scatter(root=0), r"scatter \(rank 1\): out is required on ranks other than"),
    ]:
        with pytest.raises(chorus.InvalidArgumentError, match=msg):
            call()
    a.close()
    b.close()


@pytest.mark.parametrize("how", ["chorusrun", "by hand beside a busy process"])
def test_idle_ranks_across_emulated_nodes_leave_the_cpu_to_the_program(how):
    """Two emulated nodes (TCP between them): while the program computes between collectives,
    the ranks' threads (the TCP proxy named chorus-proxy among them) use almost no CPU: at most
    10% of a core over a 3 s gap, where a proxy that spun would take most of one. Every thread
    Chorus starts is named chorus-*. Under chorusrun, and started by hand with torchrun's
    variables (CHORUS_HOSTID per node) while a busy process shares the cores."""
    import re
    import subprocess
    import sys
    worker, env = [os.path.join(HERE, "idle_worker.py")], {"GAP": "3"}
    if how == "chorusrun":
        rc, text = chorusrun(4, worker, timeout=120, env=env, options=("--nodes", "2"))
    else:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            results = launch(4, worker, timeout=120, env=env,
                             rank_env=lambda r: {"CHORUS_HOSTID": f"idle-node{r // 2}"})
        finally:
            busy.kill()
            busy.wait()
        rc, text = next((rc for rc, _ in results if rc != 0), 0), report(results)
    assert rc == 0, text
    lines = re.findall(r"IDLE rank=(\d+) gap=\S+ cpu=(\S+) threads=(\S+) ok=(\d)", text)
    assert sorted(int(x[0]) for x in lines) == [0, 1, 2, 3], text
    for rank, cpu, threads, ok in lines:
        assert ok == "1", text
        assert float(cpu) < 0.3, f"rank {rank} used {cpu} s of CPU in a 3 s idle gap\n{text}"
        names = {t.split(":")[0] for t in threads.split(",")}
        assert "chorus-proxy" in names, text
        assert all(n.startswith(("chorus-", "python")) for n in names), names
