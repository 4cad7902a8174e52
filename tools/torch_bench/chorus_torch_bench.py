"""chorus-torch-bench: the "chorus" and "gloo" torch.distributed backends side by side, in one
job on this machine: all_reduce 8 B .. 256 MiB, broadcast, reduce (when --ops names it),
all_gather_into_tensor (gloo in torch 1.13 has none: its list all_gather is timed instead),
reduce_scatter_tensor (torch 2.x),
a DDP training step of a small MLP and an FSDP2 step of the same MLP (torch 2.x). Both backends run in the same processes (a gloo group beside the default "chorus" group),
in rounds that alternate between them, so that both see the same machine; per size it prints
the best and the median time per call over the rounds, and their ratios.

Usage:  chorus-torch-bench [-np N] [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-r ROUNDS]
                           [--ops all_reduce,broadcast,reduce,all_gather,ddp] [--json FILE]
                           [--registered]
Without RANK/WORLD_SIZE in the environment it starts N local ranks itself (torchrun-style
variables); under torchrun it is one of them.
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_arg(s):
    s = s.strip().upper().rstrip("B")
    return int(float(s[:-1]) * UNITS[s[-1]]) if s and s[-1] in UNITS else int(s)


def human(n):
    for u, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f}{u}"
    return str(n)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-np", type=int, default=2, help="ranks to start when not under a launcher")
    p.add_argument("-b", "--minbytes", type=size_arg, default=8)
    p.add_argument("-e", "--maxbytes", type=size_arg, default=256 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=4)
    p.add_argument("-r", "--rounds", type=int, default=5, help="alternating rounds per size")
    p.add_argument("--budget", type=float, default=0.05,
                   help="seconds per timed round and backend (iterations are chosen to fill it)")
    p.add_argument("--ops", default="all_reduce,broadcast,all_gather,reduce_scatter,ddp,fsdp2")
    p.add_argument("--backends", default="chorus,gloo")
    p.add_argument("--registered", action="store_true",
                   help="FSDP2 step: also a column \"chorus-reg\", the model sharded on a chorus "
                        "group of its own with its buffers in registered memory "
                        "(chorus.torch.use_registered_buffers)")
    p.add_argument("--json", help="write the results as JSON here (rank 0)")
    return p.parse_args()


def main():
    args = parse()
    if "RANK" not in os.environ:
        import chorus
        sys.exit(chorus.spawn_local(args.np))

    import torch
    import torch.distributed as dist

    import chorus.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("chorus", timeout=datetime.timedelta(minutes=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {}
    for b in args.backends.split(","):
        groups[b] = None if b == "chorus" else dist.new_group(backend=b)
    ops = args.ops.split(",")
    out = {"world": world, "rounds": args.rounds, "torch": torch.__version__, "results": []}

    def sync_max(x):
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def timed(fn, iters):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return sync_max((time.perf_counter() - t0) / iters)

    def calibrate(fn):
        fn()
        fn()
        t1 = timed(fn, 3)
        return int(max(3, min(20000, args.budget / max(t1, 1e-7))))

    def measure(name, nbytes, makers, columns=None):
        """makers: backend -> (callable or None). Alternating rounds; best/median per backend."""
        fns = {b: m for b, m in makers.items() if m is not None}
        iters = {b: calibrate(f) for b, f in fns.items()}
        samples = {b: [] for b in fns}
        for _ in range(args.rounds):
            for b, f in fns.items():
                samples[b].append(timed(f, iters[b]))
        row = {"op": name, "bytes": nbytes}
        for b in makers:
            s = samples.get(b)
            row[b] = None if not s else {"best_us": min(s) * 1e6,
                                         "median_us": statistics.median(s) * 1e6,
                                         "iters": iters[b]}
        out["results"].append(row)
        if rank == 0:
            print_row(row, columns or list(makers))

    def header(name, backends):
        if rank == 0:
            cols = "".join(f" {b + ' best':>12} {b + ' med':>12}" for b in backends)
            ratio = " gloo/chorus best   med" if "gloo" in backends and "chorus" in backends else ""
            print(f"\n# {name}, {world} ranks, times per call in us (best and median of "
                  f"{args.rounds} alternating rounds)")
            print(f"# {'bytes':>10}{cols}{ratio}", flush=True)

    def print_row(row, backends):
        cols = ""
        for b in backends:
            r = row[b]
            cols += f" {r['best_us']:12.2f} {r['median_us']:12.2f}" if r else f" {'n/a':>12} {'n/a':>12}"
        if row.get("chorus") and row.get("gloo"):
            cols += (f" {row['gloo']['best_us'] / row['chorus']['best_us']:9.1f}x"
                     f" {row['gloo']['median_us'] / row['chorus']['median_us']:6.1f}x")
        label = row["bytes"] if isinstance(row["bytes"], str) else human(row["bytes"])
        print(f"  {label:>10}{cols}", flush=True)

    sizes = []
    n = args.minbytes
    while n <= args.maxbytes:
        sizes.append(n)
        n *= args.stepfactor
    if sizes and sizes[-1] != args.maxbytes:
        sizes.append(args.maxbytes)
    backends = list(groups)
    torch2 = int(torch.__version__.split(".")[0]) >= 2

    if "all_reduce" in ops:
        header("all_reduce float32 sum", backends)
        for nb in sizes:
            t = torch.ones(max(1, nb // 4))
            measure("all_reduce", nb, {b: (lambda g=g: dist.all_reduce(t, group=g))
                                       for b, g in groups.items()})
            del t
    for name, title, rooted in (("broadcast", "broadcast float32 from rank 0", dist.broadcast),
                                ("reduce", "reduce float32 sum to rank 0", dist.reduce)):
        if name not in ops:
            continue
        header(title, backends)
        for nb in sizes:
            t = torch.ones(max(1, nb // 4))
            measure(name, nb, {b: (lambda g=g, f=rooted: f(t, 0, group=g))
                               for b, g in groups.items()})
            del t
    if "all_gather" in ops:
        header("all_gather_into_tensor float32 (bytes = whole output"
               + ("" if torch2 else "; gloo: list all_gather") + ")", backends)
        for nb in sizes:
            per = max(1, nb // 4 // world)
            x = torch.ones(per)
            y = torch.empty(per * world)
            ys = list(y.chunk(world))
            makers = {}
            for b, g in groups.items():
                if b == "gloo" and not torch2:
                    makers[b] = lambda g=g: dist.all_gather(ys, x, group=g)
                else:
                    makers[b] = lambda g=g: dist.all_gather_into_tensor(y, x, group=g)
            measure("all_gather", nb, makers)
    if "reduce_scatter" in ops and torch2:
        header("reduce_scatter_tensor float32 sum (bytes = whole input)", backends)
        for nb in sizes:
            per = max(1, nb // 4 // world)
            x = torch.ones(per * world)
            y = torch.empty(per)
            measure("reduce_scatter", nb,
                    {b: (lambda g=g: dist.reduce_scatter_tensor(y, x, group=g))
                     for b, g in groups.items()})
    def mlp_steps(wrap, extra=()):
        """backend -> one training step of the benchmark MLP, made by wrap(model, group) for each
        backend's group (and each (name, group) of `extra`); "compute": the same step without
        communication, the floor both approach."""
        steps = {}
        for b, g in list(groups.items()) + list(extra) + [("compute", "none")]:
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                        torch.nn.Linear(1024, 10))
            model = model if g == "none" else wrap(model, g)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))

            def step(model=model, opt=opt, x=x, y=y):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            steps[b] = step
        return steps

    if "ddp" in ops:
        from torch.nn.parallel import DistributedDataParallel as DDP
        header("DDP training step: MLP 256-1024-1024-10 (1.3M parameters, 5 MB of gradients), "
               "batch 32; compute: the same step without DDP", backends + ["compute"])
        steps = mlp_steps(lambda model, g: DDP(model, process_group=g))
        measure("ddp_step", "step", steps, backends + ["compute"])
    if "fsdp2" in ops and torch2:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard
        # chorus-reg: a chorus group of its own (registrations on a group make its other large
        # calls on ordinary buffers pay a hand-off first, so the default group stays without).
        extra = [("chorus-reg", dist.new_group(backend="chorus"))] if args.registered else []
        columns = backends + [b for b, _ in extra] + ["compute"]
        header("FSDP2 training step: the same MLP, each Linear and the root fully_shard-ed "
               "(fp32); chorus-reg: its buffers in registered memory; compute: the step without "
               "FSDP", columns)

        def shard(model, g):
            mesh = DeviceMesh.from_group(g if g is not None else dist.group.WORLD, "cpu")
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            if extra and g is extra[0][1]:
                import chorus.torch
                chorus.torch.use_registered_buffers(model)
            return model
        steps = mlp_steps(shard, extra)
        measure("fsdp2_step", "step", steps, columns)
    if args.json and rank == 0:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
