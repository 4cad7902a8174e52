"""One rank of a torch.distributed job on backend "chorus", started by test_torch.py with
torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) as a user would.

Usage: torch_worker.py SCENARIO [args]. Every check compares with a reference computed here from
every rank's inputs (each rank can regenerate them: they are seeded by rank), in float64/int64
arithmetic, never with the backend under test. Exit status 0 when every check passed; failures
are printed as 'FAIL ...' lines.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401  (registers "chorus")

FAILURES = []
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}


def expect(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"FAIL rank {dist.get_rank()}: {what}", flush=True)


def same(got, want, what, exact=True):
    if got.dtype != want.dtype or got.shape != want.shape:
        expect(False, f"{what}: got {got.dtype}{tuple(got.shape)}, want {want.dtype}{tuple(want.shape)}")
        return
    if exact or not got.is_floating_point():
        ok = torch.equal(got, want)
    else:
        tol = 1e-2 if got.dtype in (torch.float16, torch.bfloat16) else 1e-6
        ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    if not ok:
        expect(False, f"{what}: got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}")


def data(rank, n, dtype, salt, op="sum"):
    """Small integers (exact in every dtype, also when summed or multiplied over 4 ranks)."""
    g = torch.Generator().manual_seed(1000003 * rank + 7919 * salt + 17)
    lo, hi = (1, 3) if op == "product" else (0, 8)
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype)


def reduce_ref(inputs, op, dtype):
    stack = torch.stack([t.to(torch.float64 if dtype.is_floating_point else torch.int64)
                         for t in inputs])
    if op == "sum":
        r = stack.sum(0)
    elif op == "product":
        r = stack.prod(0)
    elif op == "min":
        r = stack.min(0).values
    elif op == "max":
        r = stack.max(0).values
    else:  # avg: floats divide; integers: the wrapped sum divided, truncated toward zero
        s = stack.sum(0)
        r = s / len(inputs) if dtype.is_floating_point else torch.div(s, len(inputs),
                                                                       rounding_mode="trunc")
    return r.to(dtype)


def matrix(world, rank, group=None, tag=""):
    """Every op x dtype x count of the backend, in place and out of place where torch has both."""
    grank = dist.get_rank(group) if group is not None else rank
    n = world
    salt = 0
    for dtype in FLOATS + INTS:
        for op in OPS:
            for count in (0, 1, 7, 1000):
                salt += 1
                x = data(grank, count, dtype, salt, op)
                want = reduce_ref([data(r, count, dtype, salt, op) for r in range(n)], op, dtype)
                dist.all_reduce(x, op=OPS[op], group=group)
                same(x, want, f"{tag}all_reduce {op} {dtype} n={count}", exact=op != "avg")
    # bool (SUM is OR, PRODUCT is AND), the bitwise ops on integers, PREMUL_SUM on floats.
    for count in (0, 1, 77):
        salt += 1
        gb = lambda r: data(r, count, torch.int64, salt) > 3  # noqa: E731
        for op, fold in (("sum", torch.logical_or), ("max", torch.logical_or),
                         ("min", torch.logical_and), ("product", torch.logical_and)):
            x = gb(grank)
            want = gb(0)
            for r in range(1, n):
                want = fold(want, gb(r))
            dist.all_reduce(x, op=OPS[op], group=group)
            same(x, want, f"{tag}all_reduce bool {op} n={count}")
        for dtype in (torch.uint8, torch.int32, torch.int64, torch.bool):
            for name, fold in (("BAND", torch.bitwise_and), ("BOR", torch.bitwise_or),
                               ("BXOR", torch.bitwise_xor)):
                gi = lambda r: data(r, count, torch.int64, salt * 3 + r).to(dtype)  # noqa: E731
                want = gi(0)
                for r in range(1, n):
                    want = fold(want, gi(r))
                x = gi(grank)
                dist.all_reduce(x, op=getattr(dist.ReduceOp, name), group=group)
                same(x, want, f"{tag}all_reduce {name} {dtype} n={count}")
                root = salt % n
                x = gi(grank)
                dist.reduce(x, dst=_global(root, group), op=getattr(dist.ReduceOp, name),
                            group=group)
                if grank == root:
                    same(x, want, f"{tag}reduce {name} {dtype} n={count}")
        if hasattr(dist, "_make_nccl_premul_sum"):
            for dtype in FLOATS:
                for factor in (0.5, torch.tensor([0.25], dtype=torch.float64)):
                    premul = dist._make_nccl_premul_sum(
                        factor if isinstance(factor, float) or TORCH2 else [factor])
                    f = float(factor) if isinstance(factor, float) else float(factor.item())
                    ins = [data(r, n * count, dtype, salt) for r in range(n)]
                    want = (torch.stack([t.double() for t in ins]) * f).sum(0).to(dtype)
                    x = ins[grank].clone()
                    dist.all_reduce(x, op=premul, group=group)
                    same(x, want, f"{tag}all_reduce PREMUL_SUM {dtype} n={count}", exact=False)
                    out = torch.empty(count, dtype=dtype)
                    src = ins[grank].clone()
                    dist.reduce_scatter_tensor(out, src, op=premul, group=group)
                    same(out, want[grank * count:(grank + 1) * count],
                         f"{tag}reduce_scatter_tensor PREMUL_SUM {dtype} n={count}", exact=False)
                    same(src, ins[grank], f"{tag}reduce_scatter_tensor PREMUL_SUM keeps input")
    # A large one: the pipelined ring/tree paths.
    x = data(grank, 300001, torch.float32, 999)
    dist.all_reduce(x, group=group)
    same(x, reduce_ref([data(r, 300001, torch.float32, 999) for r in range(n)], "sum",
                       torch.float32), f"{tag}all_reduce large")
    # Non-contiguous (a transposed view): reduced in place like a contiguous one.
    base = data(grank, 12, torch.float32, 5).reshape(3, 4)
    view = base.t()
    dist.all_reduce(view, group=group)
    want = reduce_ref([data(r, 12, torch.float32, 5) for r in range(n)], "sum",
                      torch.float32).reshape(3, 4)
    same(base, want, f"{tag}all_reduce non-contiguous")

    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64):
        for count in (0, 1, 33):
            salt += 1
            gl = lambda r: data(r, count, torch.int64, salt).to(dtype)  # noqa: E731
            mine = gl(grank)
            for root in range(n):
                t = mine.clone()
                dist.broadcast(t, src=_global(root, group), group=group)
                same(t, gl(root), f"{tag}broadcast {dtype} n={count} root={root}")
            outs = [torch.empty(count, dtype=dtype) for _ in range(n)]
            dist.all_gather(outs, mine, group=group)
            for r in range(n):
                same(outs[r], gl(r), f"{tag}all_gather {dtype} n={count} block {r}")
            flat = torch.empty(n * count, dtype=dtype)
            dist.all_gather_into_tensor(flat, mine, group=group)
            same(flat, torch.cat([gl(r) for r in range(n)]), f"{tag}all_gather_into_tensor {dtype}")
            root = n - 1
            glist = [torch.empty(count, dtype=dtype) for _ in range(n)] if grank == root else None
            dist.gather(mine, glist, dst=_global(root, group), group=group)
            if grank == root:
                for r in range(n):
                    same(glist[r], gl(r), f"{tag}gather {dtype} block {r}")
            out = torch.empty(count, dtype=dtype)
            slist = [gl(100 + r) for r in range(n)] if grank == 0 else None
            dist.scatter(out, slist, src=_global(0, group), group=group)
            same(out, gl(100 + grank), f"{tag}scatter {dtype} n={count}")

    for dtype in FLOATS + INTS:
        for op in ("sum", "max", "min", "product", "avg"):
            for count in (0, 1, 5):
                salt += 1
                ins = [data(grank, n * count, dtype, salt, op)]
                want = reduce_ref([data(r, n * count, dtype, salt, op) for r in range(n)], op, dtype)
                mine = want[grank * count:(grank + 1) * count]
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter_tensor(out, ins[0], op=OPS[op], group=group)
                same(out, mine, f"{tag}reduce_scatter_tensor {op} {dtype} n={count}",
                     exact=op != "avg")
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter(out, list(ins[0].chunk(n)) if count else
                                    [torch.empty(0, dtype=dtype) for _ in range(n)],
                                    op=OPS[op], group=group)
                same(out, mine, f"{tag}reduce_scatter {op} {dtype} n={count}", exact=op != "avg")
                root = (salt % n)
                t = data(grank, count, dtype, salt, op)
                dist.reduce(t, dst=_global(root, group), op=OPS[op], group=group)
                if grank == root:
                    same(t, reduce_ref([data(r, count, dtype, salt, op) for r in range(n)], op,
                                       dtype), f"{tag}reduce {op} {dtype} root={root}",
                         exact=op != "avg")

    # all_to_all_single, even and uneven (rank r sends r+p+1 rows of 3 to rank p).
    salt += 1
    rows = 2
    x = data(grank, n * rows * 3, torch.float32, salt).reshape(n * rows, 3)
    y = torch.empty_like(x)
    dist.all_to_all_single(y, x, group=group)
    want = torch.cat([data(r, n * rows * 3, torch.float32, salt).reshape(n * rows, 3)
                      [grank * rows:(grank + 1) * rows] for r in range(n)])
    same(y, want, f"{tag}all_to_all_single even")
    split = lambda src, dst: src + dst + 1  # noqa: E731
    ins = [split(grank, p) for p in range(n)]
    outs = [split(p, grank) for p in range(n)]
    x = torch.cat([torch.full((ins[p], 3), float(100 * grank + p)) for p in range(n)])
    y = torch.empty(sum(outs), 3)
    dist.all_to_all_single(y, x, output_split_sizes=outs, input_split_sizes=ins, group=group)
    want = torch.cat([torch.full((outs[p], 3), float(100 * p + grank)) for p in range(n)])
    same(y, want, f"{tag}all_to_all_single uneven")
    xs = [torch.full((split(grank, p),), float(10 * grank + p)) for p in range(n)]
    ys = [torch.empty(split(p, grank)) for p in range(n)]
    dist.all_to_all(ys, xs, group=group)
    for p in range(n):
        same(ys[p], torch.full((split(p, grank),), float(10 * p + grank)), f"{tag}all_to_all from {p}")

    # Point to point: a ring exchange with isend/irecv (both posted before either waits), and
    # the same through batch_isend_irecv.
    if n > 1:
        right, left = (grank + 1) % n, (grank - 1) % n
        for count in (1, 100000):
            s = torch.full((count,), float(grank))
            r = torch.empty(count)
            reqs = [dist.isend(s, _global(right, group), group=group),
                    dist.irecv(r, _global(left, group), group=group)]
            for q in reqs:
                q.wait()
            same(r, torch.full((count,), float(left)), f"{tag}isend/irecv ring n={count}")
            r2 = torch.empty(count)
            ops = [dist.P2POp(dist.isend, s, _global(right, group), group),
                   dist.P2POp(dist.irecv, r2, _global(left, group), group)]
            for q in dist.batch_isend_irecv(ops):
                q.wait()
            same(r2, torch.full((count,), float(left)), f"{tag}batch_isend_irecv n={count}")
        if grank == 0:
            dist.send(torch.arange(5.0), _global(n - 1, group), group=group)
        elif grank == n - 1:
            t = torch.empty(5)
            dist.recv(t, _global(0, group), group=group)
            same(t, torch.arange(5.0), f"{tag}send/recv")

    # Async work and futures (as DDP communication hooks use them).
    works = []
    for i in range(4):
        t = torch.full((10,), float(grank + i))
        works.append((t, dist.all_reduce(t, async_op=True, group=group), i))
    for t, w, i in works:
        fut = w.get_future().then(lambda f: f.value()[0] * 2)
        w.wait()
        expect(w.is_completed() and w.is_success(), f"{tag}async work completed")
        want = torch.full((10,), float(sum(r + i for r in range(n))))
        same(t, want, f"{tag}async all_reduce {i}")
        same(fut.wait(), want * 2, f"{tag}future.then {i}")
    dist.barrier(group=group)


def _global(grank, group):
    return grank if group is None else dist.distributed_c10d._get_global_rank(group, grank)


def init(method="env"):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=float(os.environ.get("WORKER_TIMEOUT", "60")))
    if method == "env":
        dist.init_process_group("chorus", init_method="env://", timeout=timeout)
    elif method == "tcp":
        addr = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        dist.init_process_group("chorus", init_method=addr, rank=rank, world_size=world,
                                timeout=timeout)
    elif method == "file":
        store = dist.FileStore(os.environ["STORE_FILE"], world)
        dist.init_process_group("chorus", store=store, rank=rank, world_size=world,
                                timeout=timeout)
    return rank, world


def scenario_matrix(method="env"):
    rank, world = init(method)
    expect(dist.get_backend() == "chorus", "backend name")
    matrix(world, rank)
    # Subgroups: the even ranks, and every rank but 0 (if there are such groups).
    evens = list(range(0, world, 2))
    g = dist.new_group(evens)
    if rank in evens:
        matrix(len(evens), rank, group=g, tag="evens: ")
    if world > 2:
        rest = list(range(1, world))
        g2 = dist.new_group(rest)
        if rank in rest:
            t = torch.ones(3)
            dist.all_reduce(t, group=g2)
            same(t, torch.full((3,), float(world - 1)), "subgroup 1..n-1")
    dist.barrier()
    dist.destroy_process_group()


def scenario_errors():
    rank, world = init()
    try:
        dist.all_reduce(torch.zeros(3, dtype=torch.int16))
        expect(False, "int16 all_reduce raised nothing")
    except RuntimeError as e:
        expect("rank" in str(e) and "dtype" in str(e), f"int16 all_reduce message: {e}")
    try:
        dist.all_reduce(torch.zeros(3), op=dist.ReduceOp.BAND)
        expect(False, "BAND on float raised nothing")
    except RuntimeError as e:
        expect("BAND" in str(e) and "integer" in str(e), f"BAND message: {e}")
    try:
        dist.all_gather_into_tensor(torch.zeros(5), torch.zeros(2))
        expect(False, "all_gather_into_tensor size mismatch raised nothing")
    except RuntimeError as e:
        expect("output holds 5" in str(e), f"size mismatch message: {e}")
    try:  # sparse all_reduce: SUM only (as gloo) on torch 2.x; refused whole on 1.13
        dist.all_reduce(torch.zeros(3).to_sparse(), op=dist.ReduceOp.MAX)
        expect(False, "sparse MAX raised nothing")
    except RuntimeError as e:
        want = "SUM only" if TORCH2 else "sparse tensors are not supported"
        expect(want in str(e), f"sparse message: {e}")
    dist.barrier()
    pg = dist.distributed_c10d._get_default_group()
    dist.destroy_process_group()
    try:
        dist.all_reduce(torch.zeros(3))
        expect(False, "all_reduce after destroy raised nothing")
    except (RuntimeError, ValueError) as e:
        print(f"after destroy: {type(e).__name__}: {e}")
    del pg


def scenario_torch2():
    """torch 2.x: the backend under a device map ("cpu:chorus"), the *_tensor_coalesced ops
    through _coalescing_manager, sequence numbers, functional collectives, and monitored_barrier
    passing and then naming a late rank."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("cpu:chorus", timeout=datetime.timedelta(seconds=60))
    n = world
    expect("chorus" in str(dist.get_backend()), f"backend {dist.get_backend()}")
    sizes = (1, 5, 1000)
    ins = [data(rank, k, torch.float32, 50 + k) for k in sizes]
    outs = [torch.empty(n * k) for k in sizes]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    for k, o in zip(sizes, outs):
        same(o, torch.cat([data(r, k, torch.float32, 50 + k) for r in range(n)]),
             f"coalesced all_gather_into_tensor n={k}")
    for op in ("sum", "avg"):
        ins = [data(rank, n * k, torch.float32, 60 + k) for k in sizes]
        outs = [torch.empty(k) for k in sizes]
        with dist._coalescing_manager(async_ops=True) as cm:
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i, op=OPS[op])
        cm.wait()
        for k, o in zip(sizes, outs):
            want = reduce_ref([data(r, n * k, torch.float32, 60 + k) for r in range(n)], op,
                              torch.float32)
            same(o, want[rank * k:(rank + 1) * k], f"coalesced reduce_scatter_tensor {op} n={k}",
                 exact=False)
    ts = [torch.full((k,), float(rank)) for k in sizes]
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for t in ts:
        same(t, torch.full_like(t, float(sum(range(n)))), "coalesced all_reduce")

    s0 = chorus.torch.sequence_number()
    dist.all_reduce(torch.ones(2))
    expect(chorus.torch.sequence_number() == s0 + 1, "sequence number counts collectives")

    import torch.distributed._functional_collectives as fc
    r = fc.wait_tensor(fc.all_reduce(torch.ones(4), "sum", dist.group.WORLD))
    same(r, torch.full((4,), float(n)), "functional all_reduce")
    g = fc.wait_tensor(fc.all_gather_tensor(torch.full((2,), float(rank)), 0, dist.group.WORLD))
    same(g, torch.cat([torch.full((2,), float(r)) for r in range(n)]), "functional all_gather")

    # torch's dist.monitored_barrier accepts gloo only; chorus.torch.monitored_barrier is the
    # same call on a chorus group.
    chorus.torch.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    if n > 1:
        late = n - 1
        if rank == late:
            time.sleep(3)
        try:
            chorus.torch.monitored_barrier(timeout=datetime.timedelta(seconds=1),
                                           wait_all_ranks=True)
            expect(False, "monitored_barrier passed with a late rank")
        except RuntimeError as e:
            expect(f"rank {late}" in str(e) or f"ranks {late}" in str(e) or
                   f"Rank {late}" in str(e), f"monitored_barrier names rank {late}: {e}")
    dist.barrier()
    dist.destroy_process_group()


def scenario_shrink(victim):
    """4 ranks loop on all_reduce; the victim is SIGKILLed mid-loop; the survivors catch the
    error, shrink the default group without it (torch's shrink_group) and go on with 3 ranks."""
    rank, world = init()
    victim = int(victim)
    t = torch.ones(1000)
    try:
        for i in range(1000000):
            if i == 30 and rank == victim:
                os.kill(os.getpid(), 9)
            dist.all_reduce(t)
            t.fill_(1.0)
        expect(False, "the loop ended without an error")
    except RuntimeError as e:
        expect(f"rank {victim}" in str(e), f"error names rank {victim}: {e}")
    dist.shrink_group([victim])
    expect(dist.get_world_size() == world - 1, f"world after shrink {dist.get_world_size()}")
    new_rank = dist.get_rank()
    expect(new_rank == (rank if rank < victim else rank - 1), f"rank after shrink {new_rank}")
    x = torch.full((100,), float(rank))
    dist.all_reduce(x)
    same(x, torch.full((100,), float(sum(r for r in range(world) if r != victim))),
         "all_reduce after shrink")
    dist.barrier()
    dist.destroy_process_group()


def scenario_callback():
    """A future's callback issues a collective and waits for it (as DDP's PowerSGD hook does);
    with CHORUS_TORCH_ASYNC=1 the callback runs on the backend's worker thread."""
    rank, world = init()
    t = torch.full((4,), float(rank))

    def cb(fut):
        u = torch.full((3,), float(rank + 1))
        dist.all_reduce(u, async_op=True).get_future().wait()
        return u

    for _ in range(3):
        got = dist.all_reduce(t, async_op=True).get_future().then(cb).wait()
        same(got, torch.full((3,), float(sum(r + 1 for r in range(world)))), "callback's all_reduce")
    dist.barrier()
    dist.destroy_process_group()


def scenario_mismatch(kind):
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: ranks call all_reduce with different sizes or dtypes;
    every rank must raise a RuntimeError that says so, not hang."""
    rank, world = init()
    if kind == "size":
        t = torch.ones(4 + rank)
    else:
        t = torch.ones(4, dtype=torch.float32 if rank == 0 else torch.float64)
    try:
        dist.all_reduce(t)
        expect(False, f"mismatched {kind} all_reduce returned")
    except RuntimeError as e:
        msg = str(e)
        print(f"rank {rank}: {msg.splitlines()[0][:200]}", flush=True)
        expect("mismatch" in msg.lower() or "detected" in msg.lower() or "differ" in msg.lower(),
               f"mismatch message: {msg[:300]}")
    os._exit(1 if FAILURES else 0)


def scenario_train_kill(kind, victim):
    """A DDP or FSDP2 training loop; the victim dies (os._exit, no goodbye) at step 5; every
    survivor's step raises a RuntimeError naming it, within the group timeout."""
    import torch.nn as nn
    rank, world = init()
    victim = int(victim)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    if kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    else:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = None
    try:
        for step in range(100000):
            if step == 5:
                start = time.monotonic()
                if rank == victim:
                    os._exit(9)
            opt.zero_grad()
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
        expect(False, "training went on without the victim")
    except RuntimeError as e:
        took = time.monotonic() - (start or time.monotonic())
        print(f"rank {rank} error after {took:.2f}s: {str(e)[:300]}", flush=True)
        expect(f"rank {victim}" in str(e), f"{kind} error names rank {victim}: {str(e)[:300]}")
        expect(took < 30, f"detected in {took:.1f}s")
    os._exit(1 if FAILURES else 0)


def scenario_kill(victim):
    """All ranks loop on all_reduce; the victim exits abruptly after a few iterations. Every
    survivor must raise a RuntimeError naming the victim, well within the group timeout."""
    rank, world = init()
    victim = int(victim)
    t = torch.ones(1000)
    start = None
    try:
        for i in range(1000000):
            if i == 50:
                start = time.monotonic()
                if rank == victim:
                    os._exit(9)  # as a crash: no cleanup, no goodbye
            dist.all_reduce(t)
        expect(False, "the loop ended without an error")
    except RuntimeError as e:
        took = time.monotonic() - (start or time.monotonic())
        msg = str(e)
        print(f"rank {rank} error after {took:.3f}s: {msg}", flush=True)
        expect(f"rank {victim}" in msg, f"error names rank {victim}: {msg}")
        expect(took < 30, f"detected in {took:.1f}s")
    os._exit(1 if FAILURES else 0)  # the group cannot be shut down collectively


def scenario_hang():
    """Rank 1 stops calling; rank 0's all_reduce must fail when the group timeout expires."""
    rank, world = init()
    if rank == 1:
        time.sleep(float(os.environ["WORKER_TIMEOUT"]) * 4)
        os._exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
        expect(False, "all_reduce returned while a peer never called it")
    except RuntimeError as e:
        took = time.monotonic() - start
        print(f"rank {rank} timed out after {took:.2f}s: {e}", flush=True)
        expect("timeout" in str(e).lower() or "timed out" in str(e).lower(), f"timeout message: {e}")
        expect(took < float(os.environ["WORKER_TIMEOUT"]) * 3, f"bounded by the timeout ({took:.1f}s)")
        # The default group's error names the global rank at fault, as a subgroup's does (torch 2's
        # registration gives the backend the ranks; under torch 1.13 failed_rank reads wording).
        if chorus.torch._extended_api():
            expect(chorus.torch.failed_rank(e) == 1, f"failed_rank of a timeout: {e}")
    os._exit(1 if FAILURES else 0)


def scenario_abort():
    """Rank 0 waits in an all_reduce that rank 1 never joins; another thread aborts the group:
    the call raises on rank 0, and rank 1's next call fails naming rank 0."""
    import threading
    rank, world = init()
    if rank == 0:
        threading.Timer(0.5, chorus.torch.abort).start()
        try:
            dist.all_reduce(torch.ones(4))
            expect(False, "all_reduce returned after abort")
        except RuntimeError as e:
            expect("abort" in str(e).lower(), f"abort message: {e}")
        time.sleep(1.0)  # let rank 1 see the failure before this process goes
    else:
        time.sleep(1.0)
        try:
            dist.all_reduce(torch.ones(4))
            expect(False, "all_reduce with an aborted peer returned")
        except RuntimeError as e:
            expect("rank 0" in str(e), f"peer's message names rank 0: {e}")
    os._exit(1 if FAILURES else 0)


def scenario_cluster(steps="3"):
    """What a data-parallel job sends across nodes: all_reduce, reduce_scatter_tensor (avg),
    all_gather_into_tensor and broadcast against references from every rank's inputs, at the
    sizes of the recursive doubling and halving (1, 5, 1000 and 16384 float32 elements per rank)
    and where the tuner's choice across nodes changes further up (1, 2 and 4 MiB); then DDP
    (2 MiB buckets) and FSDP2 (each Linear sharded: 1 MiB weights gathered, their gradients
    reduce-scattered) trained STEPS steps, against the same model trained here on every rank's
    batch (the mean of the ranks' losses: the gradient DDP and FSDP2 average). Prints the
    algorithm the communicator chose per size when CHORUS_DEBUG=INFO (the library's lines)."""
    rank, world = init()
    n = world
    sizes = [1, 5, 1000, 16384] + [(mib << 20) // 4 for mib in (1, 2, 4)]
    for i, k in enumerate(sizes):
        what = f"{k * 4 >> 20} MiB" if k >= 1 << 18 else f"{k} elements"
        x = data(rank, k, torch.float32, 700 + i)
        dist.all_reduce(x)
        same(x, reduce_ref([data(r, k, torch.float32, 700 + i) for r in range(n)], "sum",
                           torch.float32), f"all_reduce {what}")
        part = max(1, k // n)
        src = data(rank, part * n, torch.float32, 710 + i)
        out = torch.empty(part)
        dist.reduce_scatter_tensor(out, src, op=dist.ReduceOp.AVG)
        want = reduce_ref([data(r, part * n, torch.float32, 710 + i) for r in range(n)], "avg",
                          torch.float32)
        same(out, want[rank * part:(rank + 1) * part], f"reduce_scatter_tensor avg {what}",
             exact=False)
        out = torch.empty(part * n)
        dist.all_gather_into_tensor(out, data(rank, part, torch.float32, 720 + i))
        same(out, torch.cat([data(r, part, torch.float32, 720 + i) for r in range(n)]),
             f"all_gather_into_tensor {what}")
        root = (3 * i + 1) % n
        x = data(rank, k, torch.float32, 730 + i)
        dist.broadcast(x, src=root)
        same(x, data(root, k, torch.float32, 730 + i), f"broadcast {what} from {root}")

    import torch.nn as nn
    steps = int(steps)

    def net():
        torch.manual_seed(5)
        return nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 8))

    def batch(r, step):
        g = torch.Generator().manual_seed(1000 * step + r)
        return torch.randn(4, 512, generator=g), torch.randn(4, 8, generator=g)

    ref = net()
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for s in range(steps):
        opt.zero_grad()
        loss = sum(nn.functional.mse_loss(ref(x), y) for x, y in (batch(r, s) for r in range(n)))
        (loss / n).backward()
        opt.step()
    want = [p.detach() for p in ref.parameters()]

    def train(model):
        o = torch.optim.SGD(model.parameters(), lr=0.05)
        for s in range(steps):
            x, y = batch(rank, s)
            o.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            o.step()

    moved = max((p.detach() - q.detach()).abs().max().item()
                for p, q in zip(ref.parameters(), net().parameters()))
    diffs = {}
    ddp = nn.parallel.DistributedDataParallel(net(), bucket_cap_mb=2)
    train(ddp)
    for i, (p, w) in enumerate(zip(ddp.parameters(), want)):
        diffs["DDP"] = max(diffs.get("DDP", 0.0), (p.detach() - w).abs().max().item())
        ok = torch.allclose(p.detach(), w, rtol=1e-4, atol=1e-5)
        expect(ok, f"DDP parameter {i} after {steps} steps: max diff "
                   f"{(p.detach() - w).abs().max().item():.3g}")
    try:  # FSDP2 (torch 2.6 and later); Debian's torch 1.13 has none, and its fsdp package
        from torch.distributed.fsdp import fully_shard  # fails to import under Python 3.11
    except (ImportError, ValueError):
        fully_shard = None
    if fully_shard is not None:
        model = net()
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        train(model)
        for i, (p, w) in enumerate(zip(model.parameters(), want)):
            full = p.full_tensor().detach()
            diffs["FSDP2"] = max(diffs.get("FSDP2", 0.0), (full - w).abs().max().item())
            ok = torch.allclose(full, w, rtol=1e-4, atol=1e-5)
            expect(ok, f"FSDP2 parameter {i} after {steps} steps: max diff "
                       f"{(full - w).abs().max().item():.3g}")
    fsdp2 = f"{diffs['FSDP2']:.3g}" if "FSDP2" in diffs else "none (no FSDP2 in this torch)"
    dist.barrier()
    print(f"rank {rank}: cluster scenario {'FAILED' if FAILURES else 'ok'} on {n} ranks; "
          f"training moved the parameters by up to {moved:.3g}, off the reference by up to "
          f"{diffs['DDP']:.3g} (DDP) and {fsdp2} (FSDP2)", flush=True)
    dist.destroy_process_group()


def scenario_gloo():
    """What gloo has, each checked against a reference: recv from any source (recv's return and
    the work's source rank; per sender, messages in the order sent), sparse all_reduce (COO,
    duplicates, an empty rank, hybrid), get_future on every kind of work, all_reduce_coalesced,
    the object collectives, batch_isend_irecv with tags, and a per-call timeout that holds."""
    rank, world = init()
    n = 6
    # -- recv from any source: rank 0 receives 2 messages from every other rank (one with recv,
    # one with irecv), in whatever order they come.
    for it in range(2):
        if rank == 0:
            seen = {}
            for k in range(2 * (world - 1)):
                t = torch.full((n,), -1.0)
                if k % 2 == 0:
                    src = dist.recv(t)
                else:
                    w = dist.irecv(t)
                    w.wait()
                    src = w._source_rank()
                j = seen.get(src, 0)
                seen[src] = j + 1
                same(t, torch.full((n,), float(100 * src + 10 * it + j)),
                     f"recv any source #{k} from {src} (its message {j})")
            expect(seen == {r: 2 for r in range(1, world)}, f"any-source sources {seen}")
        else:
            for j in range(2):
                dist.send(torch.full((n,), float(100 * rank + 10 * it + j)), 0)
        dist.barrier()
    # -- sparse all_reduce (SUM): every rank's COO tensor, uncoalesced, rank 1's empty.
    def sparse_input(r, hybrid):
        g = torch.Generator().manual_seed(31 * r + (7 if hybrid else 0))
        nnz = 0 if r == 1 else 5 + r
        idx = torch.randint(0, 4, (2, nnz), generator=g)
        shape = (nnz, 3) if hybrid else (nnz,)
        val = torch.randint(-5, 6, shape, generator=g).double()
        return torch.sparse_coo_tensor(idx, val, (4, 5, 3) if hybrid else (4, 5))
    for hybrid in (False, True):
        t = sparse_input(rank, hybrid)
        dist.all_reduce(t)
        want = sum(sparse_input(r, hybrid).to_dense() for r in range(world))
        expect(t.is_sparse, "sparse all_reduce keeps the layout")
        same(t.to_dense(), want, f"sparse all_reduce hybrid={hybrid}")
        t = sparse_input(rank, hybrid)
        w = dist.all_reduce(t, async_op=True)
        got = w.get_future().wait()[0]
        same(got.to_dense(), want, f"sparse all_reduce future hybrid={hybrid}")
    # -- get_future on every kind of work: the value is the result tensors.
    x = torch.full((n,), float(rank + 1))
    fut = dist.all_reduce(x, async_op=True).get_future()
    same(fut.wait()[0], torch.full((n,), float(world * (world + 1) // 2)), "future: all_reduce")
    b = torch.full((n,), float(rank))
    same(dist.broadcast(b, 0, async_op=True).get_future().wait()[0], torch.zeros(n),
         "future: broadcast")
    outs = [torch.zeros(n) for _ in range(world)]
    got = dist.all_gather(outs, torch.full((n,), float(rank)), async_op=True).get_future().wait()
    for r in range(world):
        same(outs[r], torch.full((n,), float(r)), f"future: all_gather block {r}")
    expect(isinstance(got, list), "future: all_gather value is a list")
    dist.barrier(async_op=True).get_future().wait()
    if world > 1:
        peer = rank ^ 1
        if peer < world:
            r_ = torch.zeros(n)
            s_ = torch.full((n,), float(rank))
            ws = [dist.isend(s_, peer), dist.irecv(r_, peer)] if rank % 2 == 0 else \
                [dist.irecv(r_, peer), dist.isend(s_, peer)]
            for w in ws:
                w.get_future().wait()
            same(r_, torch.full((n,), float(peer)), "future: isend/irecv")
    # -- all_reduce_coalesced
    a = torch.full((3,), float(rank))
    c = torch.full((2, 2), float(2 * rank))
    dist.all_reduce_coalesced([a, c])
    tot = sum(range(world))
    same(a, torch.full((3,), float(tot)), "all_reduce_coalesced a")
    same(c, torch.full((2, 2), float(2 * tot)), "all_reduce_coalesced c")
    # -- object collectives
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "s": "x" * (rank * 100)})
    expect(objs == [{"rank": r, "s": "x" * (r * 100)} for r in range(world)],
           f"all_gather_object {str(objs)[:80]}")
    gat = [None] * world if rank == 0 else None
    dist.gather_object(("g", rank), gat, dst=0)
    if rank == 0:
        expect(gat == [("g", r) for r in range(world)], f"gather_object {gat}")
    lst = [rank, "b", {"k": rank}] if rank == 0 else [None, None, None]
    dist.broadcast_object_list(lst, src=0)
    expect(lst == [0, "b", {"k": 0}], f"broadcast_object_list {lst}")
    sc = [None]
    dist.scatter_object_list(sc, [("s", r) for r in range(world)] if rank == 0 else None, src=0)
    expect(sc == [("s", rank)], f"scatter_object_list {sc}")
    # -- batch_isend_irecv with tags: a ring both ways, two messages each, distinct tags.
    if world > 1:
        right, left = (rank + 1) % world, (rank - 1) % world
        bufs = [torch.zeros(n) for _ in range(4)]
        ops = [dist.P2POp(dist.isend, torch.full((n,), float(10 * rank + 1)), right, tag=1),
               dist.P2POp(dist.isend, torch.full((n,), float(10 * rank + 2)), left, tag=2),
               dist.P2POp(dist.irecv, bufs[0], left, tag=1),
               dist.P2POp(dist.irecv, bufs[1], right, tag=2),
               dist.P2POp(dist.isend, torch.full((n,), float(10 * rank + 3)), right, tag=3),
               dist.P2POp(dist.irecv, bufs[2], left, tag=3)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(bufs[0], torch.full((n,), float(10 * left + 1)), "batch_isend_irecv tag 1")
        same(bufs[1], torch.full((n,), float(10 * right + 2)), "batch_isend_irecv tag 2")
        same(bufs[2], torch.full((n,), float(10 * left + 3)), "batch_isend_irecv tag 3")
    dist.barrier()
    # -- a per-call timeout (opts.timeout) shorter than the group's 60 s: rank 0's all_reduce
    # with a 2 s timeout fails in about 2 s while the others are late (last: it fails the group).
    if world > 1:
        if rank == 0:
            opts = dist.AllreduceOptions()
            opts.timeout = datetime.timedelta(seconds=2)
            pg = dist.distributed_c10d._get_default_group()
            t0 = time.time()
            try:
                pg.allreduce([torch.ones(4)], opts).wait()
                expect(False, "all_reduce with a 2 s call timeout returned while peers were late")
            except RuntimeError as e:
                took = time.time() - t0
                expect(1.5 < took < 20, f"per-call timeout took {took:.1f} s: {e}")
        else:
            time.sleep(8)
    os._exit(1 if FAILURES else 0)


if __name__ == "__main__":
    globals()["scenario_" + sys.argv[1]](*sys.argv[2:])
    sys.stdout.flush()
    os._exit(1 if FAILURES else 0)
