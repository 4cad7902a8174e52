"""Starts the ranks of a test job the way users do: by hand with torchrun-style variables
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), forked from a server that has
imported torch (as torch.multiprocessing's forkserver starts them), or under chorusrun."""

import atexit
import multiprocessing
import os
import runpy
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

PYTHON = sys.executable  # the interpreter running the tests (the venv's, or Debian's)
HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    """MASTER_PORT for a job: P and P + 1 free (Chorus's root listens on MASTER_PORT + 1)."""
    import chorus
    return chorus.free_port_pair()


def fsdp2_skip(custom_comms=False):
    """Why FSDP2 cannot run on CPU with this torch, None if it can: no fully_shard (torch 1.13;
    Debian's 1.13 on Python 3.11 raises a ValueError inside torch.distributed.fsdp), or torch
    2.6, whose torch.cpu.Stream has no record_event (a no-op from torch 2.7 on): its FSDP2 fails
    on CPU with "'Stream' object has no attribute 'record_event'" whatever the backend, gloo
    too. custom_comms: also FSDPModule.set_custom_all_gather (what use_registered_buffers sets;
    torch 2.6 has none)."""
    import torch
    try:
        from torch.distributed.fsdp import FSDPModule, fully_shard  # noqa: F401
    except Exception:
        return "torch has no FSDP2 (fully_shard)"
    if not hasattr(torch.cpu.Stream, "record_event"):
        return (f"torch {torch.__version__}'s FSDP2 does not run on CPU (torch.cpu.Stream has "
                f"no record_event before torch 2.7; gloo fails the same)")
    if custom_comms and not hasattr(FSDPModule, "set_custom_all_gather"):
        return f"torch {torch.__version__}'s FSDP2 has no set_custom_all_gather"
    return None


def build_dir():
    d = os.environ.get("CHORUS_BUILD_DIR")
    if d:
        return d
    return os.path.join(HERE, "..", "..", "build")


def _rank_environ(r, world, port, env, rank_env):
    """Rank r's environment: this one, torchrun's variables, the job's `env`, rank_env(r)."""
    e = dict(os.environ)
    e.update(RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
             MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    e.update(env or {})
    e.update(rank_env(r) if rank_env else {})
    return e


def launch(world, args, timeout=240, env=None, rank_env=None):
    """Runs `python args...` as `world` ranks with torchrun-style variables; returns
    [(exit status, output)] by rank. `rank_env(r)`: variables of rank r only (e.g.
    CHORUS_HOSTID to emulate nodes). Ranks still running after `timeout` are killed (and the
    test fails on their status)."""
    port = free_port()
    procs = []
    for r in range(world):
        e = _rank_environ(r, world, port, env, rank_env)
        procs.append(subprocess.Popen([PYTHON] + args, env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return collect(procs, timeout)


# The fork server of forked(): one per test process, started on first use with torch imported.
_fork_server = None


def forked(world, args, timeout=240, env=None, rank_env=None):
    """launch() with each rank forked from a server process that has already imported torch,
    as torch.multiprocessing.start_processes(..., start_method="forkserver") starts them: the
    same torchrun-style variables, script, arguments, exit statuses and output, without each
    rank's two seconds of CPU importing torch (most of a small torch test's time on 2 cores).
    A job whose `env` sets a TORCH_* variable (torch reads some at import), and every job when
    CHORUS_TEST_FRESH=1, starts fresh interpreters instead (launch())."""
    if os.environ.get("CHORUS_TEST_FRESH") == "1" or any(k.startswith("TORCH_") for k in env or {}):
        return launch(world, args, timeout, env, rank_env)
    global _fork_server
    if _fork_server is None:
        _fork_server = multiprocessing.get_context("forkserver")
        _fork_server.set_forkserver_preload(["torch"])
    port = free_port()
    procs, outs = [], []
    for r in range(world):
        e = _rank_environ(r, world, port, env, rank_env)
        fd, out = tempfile.mkstemp(prefix="chorus-rank-", suffix=".out")
        os.close(fd)
        outs.append(out)
        p = _fork_server.Process(target=_forked_rank, args=([PYTHON] + args, e, out))
        p.start()
        procs.append(p)
    deadline = time.monotonic() + timeout
    killed = False
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.exitcode is None:
            killed = True
            for q in procs:
                q.kill()
            p.join()
    results = []
    for p, out in zip(procs, outs):
        p.join()
        with open(out, errors="replace") as f:
            text = f.read()
        os.unlink(out)
        if killed:
            text += "\n[launch.py: killed after the timeout]"
        results.append((p.exitcode, text))
    return results


def _forked_rank(argv, env, out):
    """A rank of forked(), in the child of the fork server: `python argv[1:]` as the interpreter
    would run it, its output (stdout and stderr) into the file `out`, its exit status the
    script's (exit handlers run, as at a normal interpreter exit)."""
    fd = os.open(out, os.O_WRONLY | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = list(argv[1:])
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[1])))
    code = 0
    try:
        runpy.run_path(argv[1], run_name="__main__")
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # the interpreter's own exit: non-daemon threads first, then atexit
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def chorusrun(world, args, timeout=240, env=None, options=()):
    """Runs `python args...` under chorusrun -np world (and its `options`, e.g. ("--nodes",
    "2")); returns (exit status, output)."""
    run = os.path.join(build_dir(), "chorusrun")
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen([run, "-np", str(world), "--timeout", str(timeout), *options, PYTHON] + args,
                         env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return collect([p], timeout + 30)[0]


def collect(procs, timeout):
    out = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            text, _ = p.communicate()
            text += "\n[launch.py: killed after the timeout]"
        out.append((p.returncode, text))
    return out


def report(results):
    return "\n".join(f"--- rank {r} (exit {rc}) ---\n{text[-6000:]}"
                     for r, (rc, text) in enumerate(results))


sys.path.insert(0, HERE)
