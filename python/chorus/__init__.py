"""Chorus for Python: collectives on numpy arrays over the Chorus library.

    import numpy as np, chorus
    with chorus.Comm.from_env() as comm:          # chorusrun, mpirun, srun or torchrun variables
        x = np.arange(4, dtype=np.float32)
        comm.all_reduce(x)                         # in place; out=... for out of place

Ranks may be processes (``Comm.from_env()`` or ``Comm(nranks, unique_id, rank)``) or threads
of one interpreter (``Comm.init_all(n)``, or ``Comm(n, uid, r)`` called from n threads); the
GIL is released while a collective runs (all_reduce keeps it for messages under 64 KiB when
no other Python thread exists: releasing it would cost more than the call). Errors raise a
subclass of :class:`chorus.Error` that carries the library's result code and message (which
names the rank).

``import chorus.torch`` registers the torch.distributed backend "chorus". ``python -m chorus``
prints what this installation holds (version, library, torch, algorithms, SIMD, settings).
"""

import builtins
import contextlib
import math
import os
import socket
import subprocess
import sys

import numpy as np

from . import _chorus

__all__ = [
    "mem_alloc",
    "Comm", "Error", "InvalidArgumentError", "InvalidUsageError", "RemoteError",
    "TimeoutError", "SystemCallError", "InternalError", "CudaError", "get_unique_id",
    "unique_id_from_env", "group", "version", "spawn_local", "SUM", "PROD", "MAX", "MIN", "AVG",
]

# chorusRedOp_t and chorusResult_t by name, from include/chorus/chorus.h through chorus._chorus.
SUM, PROD, MAX, MIN, AVG = (_chorus.RED_OPS[n] for n in ("chorusSum", "chorusProd", "chorusMax",
                                                         "chorusMin", "chorusAvg"))
_INVALID_ARGUMENT = _chorus.RESULTS["chorusInvalidArgument"]


class Error(RuntimeError):
    """A Chorus call failed. ``code`` is the chorusResult_t, ``message`` the library's text."""

    def __init__(self, code, message):
        super().__init__(f"{_chorus.error_string(code)} ({code}): {message}")
        self.code = code
        self.message = message


class CudaError(Error):
    pass


class SystemCallError(Error):
    pass


class InternalError(Error):
    pass


class InvalidArgumentError(Error, ValueError):
    pass


class InvalidUsageError(Error):
    pass


class RemoteError(Error):
    """A peer failed (died, aborted, timed out); the message names it."""


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 (also a builtins.TimeoutError)
    pass


_BY_CODE = {_chorus.RESULTS[name]: cls for name, cls in [
    ("chorusUnhandledCudaError", CudaError), ("chorusSystemError", SystemCallError),
    ("chorusInternalError", InternalError), ("chorusInvalidArgument", InvalidArgumentError),
    ("chorusInvalidUsage", InvalidUsageError), ("chorusRemoteError", RemoteError),
    ("chorusTimeout", TimeoutError)]}


def _invalid(message):
    """An InvalidArgumentError (chorusInvalidArgument) raised here rather than by the library."""
    return InvalidArgumentError(_INVALID_ARGUMENT, message)


def _make_error(code, message):
    return _BY_CODE.get(code, Error)(code, message)


_chorus._set_error_factory(_make_error)
_np_all_reduce = _chorus.np_all_reduce
_np_reduce = _chorus.np_reduce
_np_broadcast = _chorus.np_broadcast


def version():
    """The library version as (major, minor, patch)."""
    v = _chorus.version()
    return (v // 10000, v // 100 % 100, v % 100)


# The library's version (CMakeLists.txt's project version, which pyproject.toml reads too).
__version__ = "%d.%d.%d" % version()


def get_unique_id():
    """A fresh unique id (bytes): rank 0 creates it and shares it with the others."""
    return _chorus.get_unique_id()


def unique_id_from_env():
    """(unique_id, process_index, process_count) from launcher variables, for programs that run
    several ranks per process as threads (rank = process_index * threads + thread)."""
    return _chorus.unique_id_from_env()


def free_port_pair(host="127.0.0.1"):
    """A free TCP port P on `host` whose neighbour P + 1 is free too: with only torchrun-style
    variables, torch's store listens on MASTER_PORT and Chorus's bootstrap root on
    MASTER_PORT + 1. On loopback both are checked on every address (torch's store binds
    0.0.0.0 and [::])."""
    bind_host = "" if host in ("127.0.0.1", "localhost") else host
    for _ in range(100):
        with socket.socket() as a, socket.socket() as b:
            a.bind((bind_host, 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            try:
                b.bind((bind_host, port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError(f"chorus.free_port_pair: no free ports P, P + 1 found on {host}")


def spawn_local(nprocs, argv=None):
    """Runs `nprocs` local copies of this program (or of `argv`) as the ranks of one job, with
    torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free
    MASTER_PORT); returns the first non-zero exit status, else 0. For examples and tools that
    start themselves when no launcher did."""
    port = free_port_pair()
    cmd = [sys.executable] + (sys.argv if argv is None else list(argv))
    procs = [subprocess.Popen(cmd, env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(nprocs),
                                            LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                                            MASTER_PORT=str(port)))
             for r in range(nprocs)]
    status = 0
    for p in procs:
        status = status or p.wait()
    return status


@contextlib.contextmanager
def group():
    """Operations issued inside run together at the end (chorusGroupStart/End), e.g. a send
    and a recv that would otherwise wait for each other."""
    _chorus.group_start()
    try:
        yield
    finally:
        _chorus.group_end()


def mem_alloc(shape, dtype=np.float32, comm=None):
    """A zeroed numpy array of `shape` and `dtype` in chorusMemAlloc memory (memory the node's
    other processes map). With `comm` it is also registered with it (collective:
    comm.register); comm.deregister(x) (collective) or comm.close() ends that."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape) if np.iterable(shape) else (int(shape),)
    count = math.prod(shape)
    block = _chorus.mem_alloc(max(count * dtype.itemsize, 1))
    x = np.frombuffer(block, dtype=dtype, count=count).reshape(shape)
    if comm is not None:
        comm.register(x)
    return x


class Comm:
    """A communicator: ``Comm(nranks, unique_id, rank, timeout=None)``, ``Comm.from_env()`` or
    ``Comm.init_all(n)``. ``timeout`` (seconds) bounds every wait without progress; None takes
    CHORUS_TIMEOUT, 0 waits without bound."""

    def __init__(self, nranks, unique_id, rank, timeout=None):
        ms = -1 if timeout is None else int(round(float(timeout) * 1000))
        self._h = _chorus.init_rank(int(nranks), bytes(unique_id), int(rank), ms)
        self._setup()

    @classmethod
    def _wrap(cls, handle):
        c = cls.__new__(cls)
        c._h = handle
        c._setup()
        return c

    def _setup(self):
        self._registered = {}  # handle -> the registered array (kept alive while registered)
        self.rank = self._h.rank
        self.size = self._h.size
        self._token = np.zeros(1, dtype=np.int8)

    @classmethod
    def from_env(cls):
        """Rank, size and root address from chorusrun, Open MPI, MPICH, Slurm or torchrun
        variables (the rules of chorusCommInitFromEnv); one rank without any."""
        return cls._wrap(_chorus.init_from_env())

    @classmethod
    def init_all(cls, n):
        """n communicators of one process (ranks 0..n-1), each then driven by its own thread."""
        return [cls._wrap(h) for h in _chorus.init_all(int(n))]

    # -- lifetime --------------------------------------------------------------------------
    @property
    def closed(self):
        return self._h.closed

    def finalize(self):
        """Collective: waits until every rank has finished its operations on this communicator."""
        self._h.finalize()

    def close(self):
        """Frees this rank's resources (local; finalize() first for a collective shutdown)."""
        self._h.destroy()
        self._registered.clear()

    # -- registered memory -----------------------------------------------------------------
    def register(self, x):
        """Collective (every rank, in the same order): registers the contiguous array x with this
        communicator and returns its handle. all_reduce / reduce_scatter on registered arrays
        (mem_alloc's on every rank) run zero-copy: each rank reduces its slice of every rank's
        input in place and writes it into every rank's output. x stays referenced until
        deregister (or close)."""
        h = _chorus.comm_register(self._h, x)
        self._registered[h] = x
        return h

    def deregister(self, x):
        """Collective: every rank passes the same registration (its handle, or the array)."""
        if not isinstance(x, int):
            found = [h for h, a in self._registered.items() if a is x]
            if not found:
                raise _invalid("deregister: the array is not registered here")
            x = found[0]
        _chorus.comm_deregister(self._h, int(x))
        self._registered.pop(int(x), None)

    def abort(self):
        """Stops every operation on this communicator at once (also from another thread); peers
        see this rank's failure."""
        self._h.abort()

    def async_error(self):
        return self._h.async_error()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.closed:
            return False
        if exc_type is None:
            try:
                self.finalize()
            finally:
                self.close()
        else:
            self.abort()
        return False

    def __repr__(self):
        state = "closed" if self.closed else f"rank {self.rank} of {self.size}"
        return f"<chorus.Comm {state}>"

    def split(self, color, key=None):
        """Collective: ranks of the same color form a new communicator ordered by key (default:
        this rank); color None leaves this rank out (returns None)."""
        h = _chorus.split(self._h, -1 if color is None else int(color),
                          self.rank if key is None else int(key))
        return None if h is None else Comm._wrap(h)

    def shrink(self, exclude=None, abort=False):
        """Collective of the ranks that call it: a new communicator without the ranks of
        `exclude` (ranks of this communicator) nor any rank that died or left, its ranks the
        survivors in order (chorusCommShrink). Returns None on a rank of `exclude`. abort=True
        (implied once this communicator failed) stops its operations in flight first. This
        communicator stays open: close() it (abort() once it failed)."""
        ex = [] if exclude is None else [int(r) for r in exclude]
        h = _chorus.shrink(self._h, ex, bool(abort))
        return None if h is None else Comm._wrap(h)

    # -- collectives -----------------------------------------------------------------------
    # Every check of the arguments (array, C-contiguous, writable out, dtype, size, op, root) is
    # made in C++ (python/src/module.cc, npArg); errors name the call, the argument and the rank.
    def all_reduce(self, x, out=None, op=SUM):
        """Reduces x over all ranks into out (x itself when out is None); returns it."""
        return _np_all_reduce(self._h, x, out, op)

    def broadcast(self, x, root=0, out=None):
        """Root's x reaches every rank's out (x itself when out is None)."""
        return _np_broadcast(self._h, x, out, root)

    def reduce(self, x, out=None, op=SUM, root=0):
        """Reduces x over all ranks into root's out (x itself when out is None)."""
        return _np_reduce(self._h, x, out, op, root)

    def all_gather(self, x, out=None):
        """Returns out of shape (size, *x.shape): block r is rank r's x."""
        return _chorus.np_all_gather(self._h, x, out)

    def reduce_scatter(self, x, out=None, op=SUM):
        """x holds size blocks; rank r gets the reduction of block r (shape x.shape[1:] when
        x.shape[0] == size, else a flat block)."""
        return _chorus.np_reduce_scatter(self._h, x, out, op)

    def all_to_all(self, x, out=None):
        """x holds size equal blocks; block p goes to rank p, whose out block r is ours."""
        return _chorus.np_all_to_all(self._h, x, out)

    def gather(self, x, out=None, root=0):
        """Root returns out of shape (size, *x.shape); other ranks return None."""
        return _chorus.np_gather(self._h, x, out, int(root))

    def scatter(self, x=None, out=None, root=0):
        """Root's x holds size blocks; rank r's out (needed on every rank but root, where it is
        made from x's shape) receives block r."""
        return _chorus.np_scatter(self._h, x, out, int(root))

    def send(self, x, peer):
        _chorus.np_send(self._h, x, int(peer))

    def recv(self, x, peer):
        """Receives into x (its size must match the sender's); returns x."""
        return _chorus.np_recv(self._h, x, int(peer))

    def barrier(self):
        """Returns when every rank has called it."""
        _np_all_reduce(self._h, self._token, None, SUM)
