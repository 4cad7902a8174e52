"""Registered memory in the torch backend (chorus.torch.registered_empty, FSDPAllGather,
FSDPReduceScatter, use_registered_buffers, Backend.allocateTensor): FSDP2 training on 2 ranks with
its buffers in registered memory ends with the parameters of the default comms (bit for bit) and
of one process on the whole batch, its all-gathers and reduce-scatters run zero-copy, the pool
stops growing after the first step, and its memory is released at destroy_process_group. Each
job's ranks are real processes started with torchrun-style variables (registered_worker.py)."""

import json
import os
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("chorus._chorus_torch")

from launch import HERE, fsdp2_skip, forked, report  # noqa: E402

WORKER = os.path.join(HERE, "registered_worker.py")

# None where FSDP2 runs on CPU with custom comms (set_custom_all_gather), else why not.
FSDP2_SKIP = fsdp2_skip(custom_comms=True)
FSDP2 = FSDP2_SKIP is None


def ok(results):
    assert all(rc == 0 for rc, _ in results), report(results)


def test_registered_empty_runs_zero_copy_and_is_released():
    results = forked(2, [WORKER, "basic"], env={"CHORUS_DEBUG": "INFO"})
    ok(results)
    for _, text in results:
        # The 256 KiB all_reduce and reduce_scatter on registered tensors choose zerocopy and run
        # it (a fallback says so).
        assert re.search(r"AllReduce opCount \d+ count 65536 .*algo zerocopy", text), text[-4000:]
        assert re.search(r"ReduceScatter opCount \d+ count 32768 .*algo zerocopy", text)
        assert "zerocopy falls back" in text  # the references on ordinary tensors fall back


def test_not_a_chorus_group_is_a_clear_error():
    ok(forked(2, [WORKER, "bad"]))


def zero_copy_calls(text):
    """(zero-copy choices, fallbacks) of the training's AllGathers and ReduceScatters."""
    text = text.split("== TRAINED ==")[0]
    chosen = len(re.findall(r"(?:AllGather|ReduceScatter) opCount .*algo zerocopy", text))
    fallbacks = len(re.findall(r"(?:AllGather|ReduceScatter): zerocopy falls back", text))
    return chosen, fallbacks


@pytest.mark.skipif(not FSDP2, reason=str(FSDP2_SKIP))
def test_fsdp2_registered_buffers_match_default_and_run_zero_copy(tmp_path):
    runs = {}
    # registered_async: the same with the group's worker thread (CHORUS_TORCH_ASYNC=1), where the
    # pool's requests queue behind the collectives issued before them.
    for name, mode, env in (("default", "default", {}), ("registered", "registered", {}),
                            ("pg_alloc", "pg_alloc", {}),
                            ("registered_async", "registered", {"CHORUS_TORCH_ASYNC": "1"})):
        out = str(tmp_path / f"{name}.pt")
        env = dict(env, CHORUS_DEBUG="INFO", OUT_FILE=out)
        results = forked(2, [WORKER, "fsdp", mode], env=env)
        ok(results)
        with open(out + ".json") as f:
            info = json.load(f)
        runs[name] = (torch.load(out), info, results)

    # The parameters: the same bits with registered buffers as with the default comms, and
    # those of one process trained on the whole batch up to float32 rounding.
    import registered_worker as w
    ref_model = w.make_model()
    opt = torch.optim.SGD(ref_model.parameters(), lr=0.05)
    for step in range(6):
        x, y = w.batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref_model(x), y).backward()
        opt.step()
    ref = dict(ref_model.named_parameters())
    default = runs["default"][0]
    for mode in ("registered", "pg_alloc", "registered_async"):
        params = runs[mode][0]
        for name, p in default.items():
            assert torch.equal(params[name], p), (mode, name)
            assert torch.allclose(params[name], ref[name].detach(), atol=1e-5), (mode, name)

    # Zero copy: with the default comms no call runs it; with registered buffers every
    # all-gather and reduce-scatter of the training chooses it and none falls back.
    for _, text in runs["default"][2]:
        assert zero_copy_calls(text)[0] == 0
    for mode in ("registered", "pg_alloc", "registered_async"):
        for _, text in runs[mode][2]:
            chosen, fallbacks = zero_copy_calls(text)
            # 6 steps x the three 256x256 layers (257 KiB of float32 each): an all-gather in
            # forward and one in backward, a reduce-scatter in backward. (The last layer's 8 KiB
            # ones are below the tuner's zero-copy sizes: ring, on the same pool.)
            assert chosen >= 6 * 3 * 3, (mode, chosen, text[-3000:])
            assert fallbacks == 0, (mode, fallbacks)

        # The pool: made in the first step, reused unchanged after; open until destroy; after
        # destroy only blocks held by tensors (the gradients) live, none once they go.
        info = runs[mode][1]
        stats = info["stats"]
        assert stats[0]["blocks"] > 0
        if mode == "registered_async":
            # The worker thread drops its references to a call's tensors when it has run it,
            # which may come after the next request on one rank and not on the other: then
            # every rank makes one more block (the agreement), so the pool may grow by the
            # calls in flight, not more.
            assert all(s["blocks"] <= 2 * stats[0]["blocks"] for s in stats), stats
        else:
            assert all(s["blocks"] == stats[1]["blocks"] for s in stats[1:]), (mode, stats)
        assert stats[-1]["reuses"] > stats[1]["reuses"]
        assert info["live_after_release"] == 0, info


@pytest.mark.skipif(not FSDP2, reason=str(FSDP2_SKIP))
@pytest.mark.parametrize("world,args", [(3, []), (2, ["--mp", "bf16", "--reduce-dtype", "bf16"])])
def test_fsdp2_example_with_registered_buffers(world, args):
    """examples/python/fsdp2_train.py --registered (3 ranks; bf16 parameters and reduction) ends
    with the parameters of one process on the whole batch (the example checks, exit 1 if not)."""
    import subprocess
    import sys
    example = os.path.join(HERE, "..", "..", "examples", "python", "fsdp2_train.py")
    r = subprocess.run([sys.executable, example, "-np", str(world), "--steps", "8",
                        "--registered"] + args, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0 and "(OK," in r.stdout, r.stdout
