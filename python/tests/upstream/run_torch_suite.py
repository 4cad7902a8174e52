"""Runs PyTorch's own distributed test suite (torch/testing/_internal/distributed/
distributed_test.py, shipped inside torch) against a backend, as upstream's
test/distributed/test_distributed_spawn.py does: one test at a time, each in WORLD_SIZE
spawned processes that init_process_group(BACKEND) through a file store.

    PYTHONPATH=build-t2/python python python/tests/upstream/run_torch_suite.py chorus
    PYTHONPATH=build-t2/python python python/tests/upstream/run_torch_suite.py gloo \
        --world-size 2 --junit gloo.xml [-k all_reduce] [--timeout 300]
    python python/tests/upstream/run_torch_suite.py --summary chorus.xml --baseline gloo.xml

Run as a script it sets BACKEND, WORLD_SIZE, INIT_METHOD=env:// and TEMP_DIR, runs pytest on
this same file in a subprocess, writes a JUnit XML and prints passed / failed / skipped, the
failures (with the first line of each error), the skips whose reason names a backend
(gated by backend name, not by a missing capability) and, with --baseline, the tests that
pass there and not here. --timeout is the per-test limit (torch kills the ranks after it).

Imported (by pytest, and again by every spawned rank) it is the test module: it imports
chorus.torch, which registers the backend, and for BACKEND=chorus adds "chorus" to the
feature sets of torch's DistTestCases before distributed_test.py reads them, as upstream lists
its own backends there (--no-features: leave the sets as torch ships them, so that chorus runs
only what torch runs for an unknown backend).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

BACKEND_NAMES = ("chorus", "gloo", "nccl", "mpi", "ucc", "xccl", "hccl", "custom")


def _results(junit):
    """{test name: (outcome, message)} from a pytest JUnit XML file."""
    out = {}
    for case in ET.parse(junit).iter("testcase"):
        outcome, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                msg = (node.text or "") if tag != "skipped" else node.get("message") or ""
                break
        out[case.get("name")] = (outcome, msg)
    return out


def _first_line(msg):
    """The error of a failure: the exception the first failing rank raised last, else a timeout."""
    block = re.split(r"Process \d+ exited with error code \d+ and exception:", msg)[1:2] or [msg]
    lines = [re.sub(r"^E\s+", "", line).strip() for line in block[0].splitlines()]
    errors = [line for line in lines if re.match(r"[\w.]*(Error|Exception)\b", line)]
    timeouts = [line for line in lines if "timed out" in line or "Timing out" in line]
    found = errors[-1:] or timeouts[:1] or [line for line in lines if line][:1]
    return found[0][:200] if found else ""


def summarize(junit, baseline=None):
    res = _results(junit)
    count = {k: sum(1 for o, _ in res.values() if o == k) for k in ("passed", "failed", "skipped")}
    print(f"\n== {junit}: {count['passed']} passed, {count['failed']} failed, "
          f"{count['skipped']} skipped")
    print("\n-- failures:")
    for name, (o, msg) in sorted(res.items()):
        if o == "failed":
            print(f"  {name}: {_first_line(msg)}")
    reasons = {}
    for name, (o, msg) in res.items():
        if o == "skipped":
            reasons.setdefault((msg.splitlines() or [""])[0][:150], []).append(name)
    print("\n-- skips by reason (count: reason):")
    for why, names in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(names):4d}: {why}")
    print("\n-- skips gated by backend name:")
    for name, (o, msg) in sorted(res.items()):
        if o == "skipped" and any(b in msg.lower() for b in BACKEND_NAMES):
            print(f"  {name}: {msg.splitlines()[0] if msg else ''}")
    if baseline:
        base = _results(baseline)
        print(f"\n-- passed in {baseline}, not here:")
        for name, (o, _) in sorted(base.items()):
            outcome, msg = res.get(name, ("missing", ""))
            if o == "passed" and outcome != "passed":
                print(f"  {name} [{outcome}]: {_first_line(msg) if outcome == 'failed' else msg}")
    return 1 if count["failed"] else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("backend", nargs="?", default="chorus")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--junit", help="JUnit XML to write (default: torch_suite_<backend>.xml)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per test")
    p.add_argument("-k", help="pytest -k expression (select tests)")
    p.add_argument("--unskip", metavar="REGEX", help="run the tests matching REGEX even where "
                   "a decorator skips them (e.g. by backend name); runtime skips still apply")
    p.add_argument("--no-features", action="store_true", help="do not add chorus to torch's "
                   "DistTestCases feature sets (ddp, subgroup, plugin)")
    p.add_argument("--summary", metavar="XML", help="only summarize an existing JUnit XML")
    p.add_argument("--baseline", metavar="XML", help="list tests passing there, not here")
    args = p.parse_args()
    if args.summary:
        return summarize(args.summary, args.baseline)

    junit = os.path.abspath(args.junit or f"torch_suite_{args.backend}.xml")
    temp = tempfile.mkdtemp(prefix=f"torch_suite_{args.backend}_")
    for sub in ("barrier", "test_dir"):
        os.mkdir(os.path.join(temp, sub))
    env = dict(os.environ, BACKEND=args.backend, WORLD_SIZE=str(args.world_size),
               INIT_METHOD="env://", TEMP_DIR=temp,
               DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=str(args.timeout),
               TORCH_SUITE_UNSKIP=args.unskip or "",
               TORCH_SUITE_FEATURES="0" if args.no_features else "1")
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = [sys.executable, "-m", "pytest", os.path.abspath(__file__), "-v", "-p",
           "no:cacheprovider", f"--rootdir={here}", f"--junitxml={junit}"]
    if args.k:
        cmd += ["-k", args.k]
    subprocess.run(cmd, env=env, check=False)
    shutil.rmtree(temp, ignore_errors=True)
    return summarize(junit, args.baseline)


if __name__ == "__main__":
    sys.exit(main())

# ---- the test module: from here on only when imported (by pytest and by each spawned rank) --

import chorus.torch  # noqa: E402,F401  registers the backend "chorus"
import torch  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if os.environ.get("BACKEND") == "chorus" and os.environ.get("TORCH_SUITE_FEATURES", "1") == "1":
    # What chorus implements (CPU only), listed as upstream lists its own backends: DDP,
    # subgroups, and it is a plugin backend, so require_backend_is_available() accepts it. It has
    # no GPU/CUDA path. Receiving from any source, allgather_coalesced, reduce and the CPU barrier
    # are supported (no skip_collective entry).
    for feature in ("ddp", "subgroup", "plugin"):
        DistTestCases.backend_feature[feature].add("chorus")

from torch.testing._internal.distributed import distributed_test as _dt  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False

_unskip = os.environ.get("TORCH_SUITE_UNSKIP")
if _unskip:  # --unskip: lift the skips the decorators set when distributed_test.py was imported
    # unittest.skip replaces the test by a wrapper that raises SkipTest (functools.wraps keeps
    # the test as __wrapped__): put the test itself back, through every such wrapper on top.
    for _name, _fn in list(vars(_dt.DistributedTest._DistTestBase).items()):
        if not re.search(_unskip, _name) or not hasattr(_fn, "__unittest_skip__"):
            continue
        while getattr(getattr(_fn, "__code__", None), "co_name", "") == "skip_wrapper":
            _fn = _fn.__wrapped__
        _fn.__unittest_skip__ = False
        setattr(_dt.DistributedTest._DistTestBase, _name, _fn)


if os.environ.get("BACKEND") == "chorus":
    # A name gate inside torch, not in the suite: DDP's C++ logger records
    # reducer_->process_group_->getBackendName() (torch/csrc/distributed/c10d/logger.cpp), and
    # ProcessGroup::getBackendName() is backendTypeToString(backendType_), which is "custom" for
    # every plugin (ProcessGroup.hpp: BackendType has no value for a plugin; distributed_c10d.py
    # sets BackendType.CUSTOM for a registered backend and builds the ProcessGroup itself).
    _ddp_logging = vars(_dt.DistributedTest._DistTestBase).get("test_ddp_logging_data_cpu")
    if _ddp_logging is not None:
        _ddp_logging.__unittest_skip__ = True
        _ddp_logging.__unittest_skip_why__ = (
            "name gate in torch: DDP's logger names every plugin backend 'custom' "
            "(ProcessGroup::getBackendName)")


class TestDistBackendWithSpawn(_dt.TestDistBackend, _dt.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()
