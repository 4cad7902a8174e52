"""chorus.__version__ and `python -m chorus` against facts found independently: the version pip
gives the package (pyproject.toml's regex on CMakeLists.txt), the running torch, the build's
CMake cache (CUDA), the algorithm table's rows (src/algo/table.cc), the CPU's flags
(/proc/cpuinfo) and the environment the command ran with."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

import chorus
from launch import HERE, build_dir

ROOT = os.path.join(HERE, "..", "..")


def pyproject_version():
    """The version pip builds the package with: pyproject.toml's regex applied to its input."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        spec = tomllib.load(f)["tool"]["scikit-build"]["metadata"]["version"]
    with open(os.path.join(ROOT, spec["input"])) as f:
        return re.search(spec["regex"], f.read()).group("value")


def run_info(**env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
    e.update(env)
    out = subprocess.run([sys.executable, "-m", "chorus"], env=e, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(":", 1) for line in out.stdout.splitlines()
                 if ":" in line and not line.startswith(" "))
    return {k.strip(): v.strip() for k, v in lines.items()}, out.stdout


def test_version_is_the_projects():
    assert chorus.__version__ == pyproject_version()
    assert chorus.__version__ == "%d.%d.%d" % chorus.version()


def test_python_m_chorus_reports_the_build_and_the_settings():
    info, text = run_info(CHORUS_SIMD="portable", CHORUS_TIMEOUT="77")
    assert info["Chorus version"].split()[0] == pyproject_version()
    # The library file the package loads, beside the numpy module or in the build tree.
    lib = info["Library"]
    assert os.path.basename(lib).startswith("libchorus.so") and os.path.isfile(lib), lib
    # The settings in force: exactly the CHORUS_* variables it ran with.
    assert "  CHORUS_SIMD=portable\n" in text and "  CHORUS_TIMEOUT=77\n" in text
    assert len(re.findall(r"^  CHORUS_", text, re.M)) == 2, text
    # CHORUS_SIMD=portable caps the kernels: every build in use is the portable one.
    assert info["SIMD (reduce kernels)"].startswith("portable (float32 sum), widest in use "
                                                    "portable;"), info
    # The algorithms: one per row of the table (src/comm/algo_rows.h), ring and tree among them.
    with open(os.path.join(ROOT, "src", "comm", "algo_rows.h")) as f:
        rows = re.findall(r"^\s+X\(k\w+, k\w+Algo\)", f.read(), re.M)
    algos = [a.strip() for a in info["Algorithms"].split(",")]
    assert len(algos) == len(rows) and {"ring", "tree"} <= set(algos), (algos, rows)
    assert len(set(algos)) == len(algos)


def test_simd_builds_follow_the_cpu():
    info, _ = run_info()
    runs = info["SIMD (reduce kernels)"].split("this CPU runs ")[1].split(", ")
    with open("/proc/cpuinfo") as f:
        flags = set(next(line for line in f if line.startswith("flags")).split(":")[1].split())
    want = ["portable"]
    if os.uname().machine == "x86_64":
        if {"avx2", "f16c"} <= flags:
            want.append("avx2")
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags and "avx2" in want:
            want.append("avx512")
    assert runs == want, (runs, flags & {"avx2", "f16c", "avx512f"})
    widest = info["SIMD (reduce kernels)"].split("widest in use ")[1].split(";")[0]
    assert widest == want[-1]


def test_cuda_and_torch_lines():
    info, _ = run_info()
    # CUDA: built when the build's CMake found a CUDA compiler and CHORUS_CUDA was not OFF.
    cache = os.path.join(build_dir(), "CMakeCache.txt")
    if os.path.isfile(cache) and os.environ.get("CHORUS_BUILD_DIR"):
        with open(cache) as f:
            c = dict(re.findall(r"^(\w+):\w+=(.*)$", f.read(), re.M))
        compiler = c.get("CMAKE_CUDA_COMPILER", "")
        built = c.get("CHORUS_CUDA", "AUTO") != "OFF" and compiler and "NOTFOUND" not in compiler
        assert info["CUDA backend built"] == ("yes" if built else "no")
    else:
        assert info["CUDA backend built"] in ("yes", "no")
    from chorus import _build_info
    if importlib.util.find_spec("torch") is None:
        assert info["Running torch"] == "none"
        assert info["chorus.torch"].startswith("no torch installed")
        return
    import torch
    assert info["Running torch"] == torch.__version__
    if not _build_info.TORCH_VERSION:
        assert info["Built for torch"] == "none (numpy API only)"
        return
    assert info["Built for torch"] == _build_info.TORCH_VERSION
    same = (_build_info.TORCH_VERSION.split(".")[:2] == torch.__version__.split(".")[:2])
    assert (info["chorus.torch"] == "loads") == same, info["chorus.torch"]
