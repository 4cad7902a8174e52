"""Prints what a CMake build of a torch extension needs, as a CMake list (';'-separated).

Usage: torch_flags.py includes|libdirs|defines|version. torch.utils.cpp_extension adds the same flags
when it builds an extension; libtorch_python's pybind11 ABI defines must match ours."""
import sys

import torch._C as C
from torch.utils import cpp_extension as ce

what = sys.argv[1]
if what == "includes":
    out = ce.include_paths()
elif what == "libdirs":
    out = ce.library_paths()
elif what == "defines":
    # torch 1.x publishes the pybind11 ABI it was built with; torch 2.x (pybind11 3, whose
    # headers it ships) needs no such defines: cpp_extension adds none there.
    out = [f"_GLIBCXX_USE_CXX11_ABI={int(C._GLIBCXX_USE_CXX11_ABI)}"]
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        value = getattr(C, f"_PYBIND11_{name}", None)
        if value is not None:
            out.append(f'PYBIND11_{name}="{value}"')
elif what == "version":  # the release, without a local tag: 2.13.0+cpu -> 2.13.0
    import torch
    out = [torch.__version__.split("+")[0]]
else:
    sys.exit(f"unknown query {what}")
print(";".join(out), end="")
