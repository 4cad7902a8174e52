"""torch.distributed backend "chorus".

    import torch.distributed as dist
    import chorus.torch                      # registers the backend
    dist.init_process_group("chorus")        # env:// (torchrun), tcp://, file:// or a store
    dist.init_process_group("cpu:chorus")    # the same, as a device map

Every CPU collective of torch.distributed (and their _base, _into_tensor and _coalesced forms),
point to point, barrier and monitored_barrier, with float32/64, float16, bfloat16, bool and
int8/uint8/int32/int64 tensors and every ReduceOp (SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM;
BAND, BOR, BXOR on integers). On torch 2.x it is a c10d Backend for the "cpu" device (so
DTensor, DeviceMesh, functional collectives and FSDP2 reach it); on torch 1.13 a ProcessGroup.
The unique id travels through the store torch gives the backend; the group's timeout bounds
every wait. See docs/python.md.

The compiled part (chorus._chorus_torch_ext) is built against one torch release (major.minor);
chorus._chorus_torch compares it with the running torch first and raises ImportError naming
both when they differ, before anything compiled is loaded.
"""

import inspect
import multiprocessing
import multiprocessing.util
import os

import torch
import torch.distributed as dist

__all__ = ["BACKEND", "abort", "is_async", "env_from_launcher", "backend_of", "sequence_number",
           "monitored_barrier", "failed_rank", "shrink_after_failure", "registered_empty",
           "registered_pool_stats", "FSDPAllGather", "FSDPReduceScatter",
           "use_registered_buffers"]

BACKEND = "chorus"

from . import _chorus_torch  # noqa: E402  (checks the torch release, then loads the compiled part)

from . import _chorus  # noqa: E402

# (rank, size, local rank) variables of the launchers other than torchrun, in the order the C
# library tries them (the one list is src/core/launcher_env.h, exported by chorus._chorus).
_LAUNCHERS = tuple((rank, size, local) for _, rank, size, local in _chorus.LAUNCHER_VARIABLES
                   if rank != "RANK")


def env_from_launcher(env=None):
    """torch's env:// reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. Under chorusrun,
    mpirun (Open MPI, MPICH) or srun, fills the missing ones from that launcher's variables:
    rank, size and local rank always; the address under chorusrun (its CHORUS_COMM_ID host,
    port + 1) and under srun (the step's first node and a port derived from the job and step
    ids, as the C library's launcher form does: src/core/slurm_env.h). Variables already set
    are kept. Called when chorus.torch is imported."""
    env = os.environ if env is None else env
    launcher = None
    if "RANK" not in env or "WORLD_SIZE" not in env:
        for rank, size, local in _LAUNCHERS:
            if rank in env and size in env:
                launcher = rank
                env.setdefault("RANK", env[rank])
                env.setdefault("WORLD_SIZE", env[size])
                if local in env:
                    env.setdefault("LOCAL_RANK", env[local])
                break
    if "MASTER_ADDR" not in env and "CHORUS_COMM_ID" in env:
        host, _, port = env["CHORUS_COMM_ID"].rpartition(":")
        env["MASTER_ADDR"] = host.strip("[]")
        env.setdefault("MASTER_PORT", str(int(port) + 1))
    if launcher == "SLURM_PROCID" and "MASTER_ADDR" not in env:
        # Only in an srun step (a batch script's environment has SLURM_PROCID but no step).
        job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID", "")
        step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID", "")
        host = _chorus.slurm_first_host(env.get("SLURM_STEP_NODELIST", ""))
        if job.isdigit() and step.isdigit() and host:
            env["MASTER_ADDR"] = host
            env.setdefault("MASTER_PORT", str(_chorus.slurm_root_port(int(job), int(step))))
    return env


env_from_launcher()


_exit_watched_pid = None


def _destroy_at_worker_exit():
    if dist.is_initialized():
        dist.destroy_process_group()


def _watch_worker_exit():
    """In a multiprocessing worker: destroys the process groups as the worker ends. Workers
    started by fork or forkserver end with os._exit after multiprocessing's finalizers, skipping
    the interpreter's teardown that destroys them otherwise (a normal exit, spawn's workers); a
    group never destroyed may take the data its rank sent last to other machines with it, and the
    peers still in their last call fail naming it (docs/reliability.md, "A rank leaves")."""
    global _exit_watched_pid
    if _exit_watched_pid == os.getpid() or multiprocessing.parent_process() is None:
        return
    _exit_watched_pid = os.getpid()
    multiprocessing.util.Finalize(None, _destroy_at_worker_exit, exitpriority=0)


def _create(store, rank, size, timeout):
    _watch_worker_exit()
    return _chorus_torch.create_process_group(store, rank, size, timeout)


def _create_extended(opts, _backend_options):
    # The group's global ranks let a failure name the global rank at fault (failed_rank). torch
    # passes none for the default group, whose ranks are the global ones.
    ranks = list(getattr(opts, "global_ranks_in_group", None) or []) or list(range(opts.group_size))
    _watch_worker_exit()
    return _chorus_torch.create_process_group(opts.store, opts.group_rank, opts.group_size,
                                              opts.timeout, ranks)


def _extended_api():
    """Whether the backend registers with torch 2's extended API, which passes each group's
    global ranks (torch 1.13's passes none: its errors name group ranks in words only)."""
    params = inspect.signature(dist.Backend.register_backend).parameters
    return bool(_chorus_torch.BACKEND_API) and "devices" in params


def _register():
    if hasattr(dist.Backend, BACKEND.upper()):  # registering twice asserts in torch
        return
    if _extended_api():
        dist.Backend.register_backend(BACKEND, _create_extended, extended_api=True,
                                      devices=["cpu"])
    else:  # torch 1.13: a ProcessGroup, no device map
        dist.Backend.register_backend(BACKEND, _create)


_register()


def backend_of(group=None):
    """The chorus backend object of `group` (default: the default group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if _chorus_torch.BACKEND_API:
        return pg._get_backend(torch.device("cpu"))
    return pg


def is_async(group=None):
    """Whether the group runs its collectives on a worker thread (CHORUS_TORCH_ASYNC=1)."""
    return _chorus_torch.is_async(backend_of(group))


def abort(group=None):
    """Aborts the group's communicator now (also from another thread while a call waits): that
    call and every later one raise, and the peers see this rank's failure."""
    _chorus_torch.abort(backend_of(group))


def sequence_number(group=None):
    """Collectives issued on the group so far (the number TORCH_DISTRIBUTED_DEBUG compares)."""
    return _chorus_torch.sequence_number(backend_of(group))


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier for a chorus group (torch's own accepts gloo only):
    rank 0 waits up to `timeout` (default: the group's) for every rank to arrive and raises
    naming the first rank that did not (every such rank with wait_all_ranks=True); the ranks
    that arrived raise the same report."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if timeout is None:
        timeout = dist.distributed_c10d._get_default_timeout(BACKEND)
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


_FAILED = None


def failed_rank(error, group=None):
    """The rank of `group` (default: the default group, whose ranks are the global ranks) that a
    chorus error blames for a failure (a rank that died, aborted or stopped), or None. The error
    of any group names the global rank at fault ("...; the rank at fault is global rank 3 (group
    rank 1)"), so an error raised on a subgroup (FSDP2's, DTensor's) serves too; without that
    part (torch 1.13), the group rank its message names ("peer rank 2 (pid 812) died")."""
    import re
    global _FAILED
    if _FAILED is None:
        _FAILED = (re.compile(r"the rank at fault is global rank (\d+)"),
                   re.compile(r"rank (\d+)(?: \(pid \d+\))?(?: \(node \d+\))? (?:died|aborted|"
                              r"exited|stopped|left|failed)"))
    text = str(error)
    m = _FAILED[0].search(text)
    if m:
        g = int(m.group(1))
        if group is None or group is dist.GroupMember.WORLD:
            return g
        try:
            r = dist.get_group_rank(group, g)
        except (ValueError, RuntimeError):
            return None
        return r if r is not None and r >= 0 else None
    m = _FAILED[1].search(text)
    return int(m.group(1)) if m else None


_SHRINKS = 0  # shrinks after a failure made by this process (every survivor counts the same)


def _abort_other_groups(keep):
    """Aborts this process's chorus groups other than `keep`: a peer blocked in one of them,
    waiting for this rank's next call there, is released at once (its call raises) and can join
    the shrink, instead of waiting for its timeout."""
    world = dist.distributed_c10d._world
    for pg in list(getattr(world, "pg_map", {}).keys()):
        if pg is keep:
            continue
        try:
            be = pg._get_backend(torch.device("cpu")) if _chorus_torch.BACKEND_API else pg
            _chorus_torch.abort(be)
        except (RuntimeError, TypeError, AttributeError, ValueError):
            pass  # not a chorus group, or already gone


def shrink_after_failure(error, group=None):
    """After a collective raised `error` because a rank was lost: shrinks `group` (default: the
    default group, which the result then replaces) to the survivors with torch's shrink_group
    (chorusCommShrink underneath: the ranks that died are excluded too) and returns the new
    group. Every survivor calls it; state is kept in memory, only the failed step is lost.

        try:
            train_step(model)
        except RuntimeError as e:
            chorus.torch.shrink_after_failure(e)
            model = DDP(model.module)            # rebuild the wrapper on the new default group

    The survivors agree on the lost rank through the job's store (the first survivor to get
    here names it: a survivor whose own error names a live rank, e.g. one that aborted a
    subgroup on its way here, takes that name), and each aborts its other chorus groups first,
    so that a peer blocked in one of them (FSDP2's and DTensor's subgroups) joins at once.
    """
    global _SHRINKS
    if not hasattr(dist, "shrink_group"):
        raise RuntimeError(f"chorus.torch.shrink_after_failure needs torch >= 2.13 "
                           f"(dist.shrink_group); this is torch {torch.__version__}")
    lost = failed_rank(error)  # a global rank
    if lost is None:
        raise RuntimeError(f"chorus.torch.shrink_after_failure: the error names no lost rank: "
                           f"{error}") from error
    store = dist.distributed_c10d._get_default_store()
    key = f"chorus/shrink_after_failure/{_SHRINKS}"
    _SHRINKS += 1
    agreed = store.compare_set(key, "", str(lost))
    lost = int(agreed.decode() if isinstance(agreed, bytes) else agreed)
    default = dist.distributed_c10d._get_default_group()
    _abort_other_groups(default if group is None else group)
    if group is not None and group is not default:
        lost = dist.get_group_rank(group, lost)
    return dist.shrink_group([lost], group=group)


# -- Registered memory ---------------------------------------------------------------------------
# Tensors in Chorus registered memory (chorusMemAlloc + chorusCommRegister) for one chorus group:
# a collective of that group whose buffers all come from here runs zero-copy (each rank reads its
# peers' inputs and writes their outputs in place; docs/performance.md "Zero copy on registered
# buffers"). The memory comes from a pool per group (python/src/registered_pool.h): a tensor's
# death returns its block to the pool, which keeps it registered until the group is destroyed,
# and a later request of the same size reuses it.


def _chorus_backend(group, what):
    """The chorus backend of `group`, or a ValueError naming `what` and the group's backend."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    try:
        be = backend_of(pg)
        _chorus_torch.registered_stats(be)  # raises for a backend other than chorus
        return be
    except (RuntimeError, ValueError, AttributeError) as e:
        try:
            name = dist.get_backend(pg)
        except (RuntimeError, ValueError):
            name = "?"
        raise ValueError(f"chorus.torch.{what}: the group is not a chorus process group "
                         f"(backend {name!r}); registered memory belongs to a group made with "
                         f"backend \"chorus\" (or \"cpu:chorus\")") from e


def registered_empty(size, dtype=torch.float32, group=None):
    """An uninitialized CPU tensor of `size` and `dtype` in `group`'s registered memory (default:
    the default group, which must be a chorus group). Collective: every rank of the group calls
    it, in the same order, with the same size (the ranks agree whether to register a new block).
    The tensor is ordinary CPU memory to torch; when it dies its block goes back to the group's
    pool, registered, for the next request of that size; destroying the group frees the pool
    (a tensor still alive keeps its memory, no longer registered)."""
    be = _chorus_backend(group, "registered_empty")
    if isinstance(size, int):
        size = (size,)
    size = tuple(int(s) for s in size)
    numel = 1
    for s in size:
        numel *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    return _chorus_torch.registered_empty(be, numel * itemsize).view(dtype).view(size)


def registered_pool_stats(group=None):
    """The group's pool: {"blocks": blocks made (each registered once), "free_blocks": on the
    free list now, "bytes": of all blocks, "reuses": requests served from the free list,
    "open": False once the group is destroyed}."""
    return dict(_chorus_torch.registered_stats(_chorus_backend(group, "registered_pool_stats")))


class _RegisteredComm:
    """What FSDP2's two comm objects share: a chorus group and `allocate` from its registered
    memory (CPU buffers; other devices get torch's own)."""

    def __init__(self, group, what):
        self.group = group
        _chorus_backend(group, what)

    def allocate(self, size, *, dtype, device):
        if torch.device(device).type != "cpu":
            return torch.empty(*size, dtype=dtype, device=device)
        return registered_empty(size, dtype, self.group)


class _AllGatherComm(_RegisteredComm):
    """FSDP2's all-gather (FSDPModule.set_custom_all_gather) with its output buffer in the
    registered memory of `group` (a chorus group: FSDP2's shard group). FSDP2 all-gathers in
    place (the input is this rank's block of the output), so the call runs zero-copy."""

    def __init__(self, group=None):
        super().__init__(group, "FSDPAllGather")

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        # all_gather_single where it exists (FSDP2's default comm calls it; torch 2.13 warns that
        # all_gather_into_tensor is deprecated): the same _allgather_base underneath.
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return gather(output_tensor, input_tensor, group=group, async_op=async_op)


class _ReduceScatterComm(_RegisteredComm):
    """FSDP2's reduce-scatter (FSDPModule.set_custom_reduce_scatter) with its input and output
    in the registered memory of `group` (a chorus group: FSDP2's shard group), so the call runs
    zero-copy (with FSDP2's AVG or SUM; a PREMUL_SUM scales a copy of the input first, which
    is not registered)."""

    def __init__(self, group=None):
        super().__init__(group, "FSDPReduceScatter")

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return scatter(output_tensor, input_tensor, op=op, group=group, async_op=async_op)


_FSDP_COMMS = {}


def _fsdp_comm(name):
    """chorus.torch.FSDPAllGather / FSDPReduceScatter, made on first use as subclasses of torch's
    AllGather / ReduceScatter: importing torch.distributed.fsdp takes most of a second, which
    `import chorus.torch` should not pay. torch 1.13 has no FSDP2 (and Debian's 1.13 under
    Python 3.11 raises a ValueError inside torch.distributed.fsdp): there they subclass object,
    and nothing calls them."""
    if name not in _FSDP_COMMS:
        impl, base = {"FSDPAllGather": (_AllGatherComm, "AllGather"),
                      "FSDPReduceScatter": (_ReduceScatterComm, "ReduceScatter")}[name]
        bases = (impl,)
        if _chorus_torch.TORCH_VERSION.split(".")[0] != "1":
            try:
                from torch.distributed.fsdp._fully_shard import _fsdp_api
                bases = (impl, getattr(_fsdp_api, base))
            except Exception:  # a torch 2.x without FSDP2's custom comms
                pass
        _FSDP_COMMS[name] = type(name, bases, {"__doc__": impl.__doc__, "__module__": __name__,
                                               "__qualname__": name})
    return _FSDP_COMMS[name]


def __getattr__(name):
    if name in ("FSDPAllGather", "FSDPReduceScatter"):
        return _fsdp_comm(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def use_registered_buffers(module):
    """Sets FSDPAllGather and FSDPReduceScatter, on each module's own shard group, on every
    FSDPModule in `module` (itself included): FSDP2's all-gathers and reduce-scatters then run
    zero-copy on registered memory. Call it after fully_shard and before the first step, on
    every rank. Returns the number of FSDPModules set. Raises ValueError if a shard group is
    not a chorus group, RuntimeError on a torch without FSDP2 or without its custom comms."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except Exception as e:  # ImportError; a ValueError inside Debian's torch 1.13 on Python 3.11
        raise RuntimeError(f"chorus.torch.use_registered_buffers needs FSDP2 (torch 2.x); "
                           f"this is torch {torch.__version__}") from e
    if not hasattr(FSDPModule, "set_custom_all_gather"):  # torch 2.6's FSDP2, for one
        raise RuntimeError(f"chorus.torch.use_registered_buffers needs FSDP2's custom comms "
                           f"(FSDPModule.set_custom_all_gather), which torch {torch.__version__} "
                           f"does not have")
    comms = {}  # one pair per group
    count = 0
    for m in module.modules():
        if not isinstance(m, FSDPModule):
            continue
        groups = m._get_fsdp_state()._fsdp_param_groups
        if not groups:  # no parameters of its own: no communication
            continue
        ag_group = groups[0]._all_gather_process_group
        rs_group = groups[0]._reduce_scatter_process_group
        if ag_group not in comms:
            comms[ag_group] = _fsdp_comm("FSDPAllGather")(ag_group)
        if (rs_group, "rs") not in comms:
            comms[(rs_group, "rs")] = _fsdp_comm("FSDPReduceScatter")(rs_group)
        m.set_custom_all_gather(comms[ag_group])
        m.set_custom_reduce_scatter(comms[(rs_group, "rs")])
        count += 1
    return count
