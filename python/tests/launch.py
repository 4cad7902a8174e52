"""Starts the ranks of a test job the way users do: by hand with torchrun-style variables
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), or under chorusrun."""

import os
import socket
import subprocess
import sys

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


def launch(world, args, timeout=240, env=None, rank_env=None):
    """Runs `python args...` as `world` ranks with torchrun-style variables; returns
    [(exit status, output)] by rank. `rank_env(r)`: variables of rank r only (e.g.
    CHORUS_HOSTID to emulate nodes). Ranks still running after `timeout` are killed (and the
    test fails on their status)."""
    port = free_port()
    procs = []
    for r in range(world):
        e = dict(os.environ)
        e.update(RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                 LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        e.update(env or {})
        e.update(rank_env(r) if rank_env else {})
        procs.append(subprocess.Popen([PYTHON] + args, env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return collect(procs, timeout)


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
