"""PyTorch Lightning on CPU over the "chorus" backend (or --backend gloo to compare): a
Trainer(accelerator="cpu", devices=N, strategy=DDPStrategy(process_group_backend=...)) fits a
small regression model on a synthetic dataset, then checks that the loss went down and that every
rank ends with the same parameters; prints the time per step.

    pip install lightning==2.6.6
    python examples/python/lightning_train.py -np 2   # Lightning starts
    torchrun --nproc-per-node 2 examples/python/lightning_train.py
    python examples/python/lightning_train.py -np 2 --start-method spawn

How the ranks come to be (Lightning's LightningEnvironment / DDPStrategy launchers):

  * plain `python lightning_train.py -np N`: no LOCAL_RANK in the environment, so Lightning
    launches the ranks itself. With the default start method "popen" the process running this
    script becomes rank 0 and starts N - 1 copies of it (`sys.executable` + the same argv, with
    LOCAL_RANK, NODE_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set; RANK is not). Each copy
    runs this file from the top, so its `import chorus.torch` registers the backend there
    before the Trainer calls init_process_group("chorus") (a backend registered in the parent
    only would not exist in the children). "spawn"/"forkserver" re-import this file as
    __mp_main__ in each child, which registers it too; "fork" inherits the registration.
  * under torchrun (TORCHELASTIC_RUN_ID set) or any launcher that sets LOCAL_RANK (e.g. chorusrun
    or mpirun, whose variables `import chorus.torch` turns into RANK/WORLD_SIZE/LOCAL_RANK),
    Lightning starts nothing and devices must equal the local world size: taken from
    LOCAL_WORLD_SIZE / WORLD_SIZE.

Chorus's bootstrap listens on MASTER_PORT + 1 next to torch's store on MASTER_PORT, while
Lightning picks a MASTER_PORT that only checks P itself: so when Lightning launches, this script
sets MASTER_PORT to a free pair (chorus.free_port_pair) first, and the children inherit it.

Since Lightning starts the ranks, this script does not (unlike the other examples' -np): -np is
Lightning's `devices`. Exit status 1 if a check fails.

A caveat of --start-method spawn: the ranks receive a multiprocessing semaphore by its
/dev/shm name, and anything that removes "leaked" /dev/shm entries meanwhile (e.g. this
project's C++ tests' ShmCheckedTest running on the same machine) makes them fail in
SemLock._rebuild with FileNotFoundError (with gloo too).
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import lightning as L
from lightning.pytorch.strategies import DDPStrategy

import chorus
import chorus.torch  # noqa: F401  (registers the "chorus" backend, in every rank process)

DIM, HIDDEN, OUT, SAMPLES = 32, 64, 4, 512


def dataset():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(SAMPLES, DIM, generator=g)
    w = torch.randn(DIM, OUT, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(SAMPLES, OUT, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def full_loss(model):
    x, y = dataset().tensors
    with torch.no_grad():
        return nn.functional.mse_loss(model(x), y).item()


class Regressor(L.LightningModule):
    """At module level: "spawn" pickles it to the ranks."""

    def __init__(self, lr, batch, backend):
        super().__init__()
        self.lr, self.batch, self.backend = lr, batch, backend
        self.net = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUT))
        self.t0 = None
        self.step0 = 0
        self.per_step = float("nan")

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

    def train_dataloader(self):  # Lightning adds a DistributedSampler
        return torch.utils.data.DataLoader(dataset(), batch_size=self.batch, shuffle=True)

    def on_train_batch_start(self, batch, batch_idx):
        if self.t0 is None and self.global_step == 3:  # after a few warm-up steps
            self.t0, self.step0 = time.perf_counter(), self.global_step

    def on_train_end(self):
        # Still inside fit, so the process group is up: compare the ranks' parameters.
        if self.t0 is not None:
            self.per_step = (time.perf_counter() - self.t0) / (self.global_step - self.step0)
        flat = torch.cat([q.detach().flatten() for q in self.parameters()])
        hi, lo = flat.clone(), flat.clone()
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        t = torch.tensor([self.per_step])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        # Through trainer.callback_metrics, which Lightning also hands back from spawned
        # ranks to the launching process (--start-method spawn/fork/forkserver).
        self.trainer.callback_metrics.update(
            spread=(hi - lo).abs().max(), ms_per_step=t[0] * 1e3,
            backend_ok=torch.tensor(float(dist.get_backend() == self.backend)),
            world=torch.tensor(float(dist.get_world_size())),
            steps=torch.tensor(float(self.global_step)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="chorus")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=16, help="rows per rank per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--start-method", default="popen", choices=["popen", "spawn", "fork",
                                                                "forkserver"],
                   help="how Lightning starts the ranks when no launcher did")
    p.add_argument("-np", type=int, default=2,
                   help="devices (ranks) when no launcher started them (else the launcher's)")
    a = p.parse_args()

    external = "LOCAL_RANK" in os.environ  # torchrun, chorusrun, mpirun, or a Lightning child
    if external and "RANK" in os.environ:  # a launcher's rank (Lightning's children get none)
        devices = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    else:  # Lightning launches (or this is a child it launched: same argv, same -np)
        devices = a.np
        if "MASTER_PORT" not in os.environ:
            os.environ["MASTER_PORT"] = str(chorus.free_port_pair())

    torch.set_num_threads(1)

    L.seed_everything(0, verbose=False)
    model = Regressor(a.lr, a.batch, a.backend)
    before = full_loss(model)
    trainer = L.Trainer(accelerator="cpu", devices=devices,
                        strategy=DDPStrategy(process_group_backend=a.backend,
                                             start_method=a.start_method),
                        max_epochs=a.epochs, enable_progress_bar=False, logger=False,
                        enable_checkpointing=False, enable_model_summary=False,
                        log_every_n_steps=1)
    trainer.fit(model)
    m = trainer.callback_metrics
    spread, per_step = float(m["spread"]), float(m["ms_per_step"])
    backend_ok, world, steps = bool(m["backend_ok"]), int(m["world"]), int(m["steps"])
    after = full_loss(model)
    rank = trainer.global_rank
    problems = []
    if not spread == 0:  # nan (unknown) counts as a failure too
        problems.append(f"ranks differ by {spread:.3g}")
    if not after < 0.5 * before:
        problems.append(f"loss did not go down enough ({before:.4f} -> {after:.4f})")
    if not backend_ok:
        problems.append(f"the process group's backend was not {a.backend}")
    status = "OK" if not problems else "FAILED: " + "; ".join(problems)
    if rank == 0 or problems:
        print(f"{a.backend}: rank {rank}: {world} ranks (Lightning {L.__version__}, "
              f"{'external launcher' if external else 'started by Lightning: ' + a.start_method}),"
              f" {steps} steps, {per_step:.2f} ms per step, loss {before:.4f} -> "
              f"{after:.4f}, parameters across ranks max |diff| {spread:.3g}: {status}",
              flush=True)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
