"""Prints what a CMake build of a torch extension needs, as a CMake list (';'-separated).

Usage: torch_flags.py includes|libdirs|defines. torch.utils.cpp_extension adds the same flags
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
    out = [f'PYBIND11_COMPILER_TYPE="{C._PYBIND11_COMPILER_TYPE}"',
           f'PYBIND11_STDLIB="{C._PYBIND11_STDLIB}"',
           f'PYBIND11_BUILD_ABI="{C._PYBIND11_BUILD_ABI}"',
           f"_GLIBCXX_USE_CXX11_ABI={int(C._GLIBCXX_USE_CXX11_ABI)}"]
else:
    sys.exit(f"unknown query {what}")
print(";".join(out), end="")
