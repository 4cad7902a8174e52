"""The torch backend's compiled module (chorus._chorus_torch_ext), loaded only beside the torch
release it was built for. Torch backends have no stable ABI across torch releases: loading one
built for another release could fail on a missing symbol or, worse, run with another class
layout. So this module compares the release recorded at build time (_build_info) with the
running torch and raises ImportError naming both, and the command that rebuilds it, first."""

import torch

from . import _build_info


def _release(version):
    """'2.13.0+cpu' -> (2, 13)"""
    parts = version.split("+")[0].split(".")
    return int(parts[0]), int(parts[1])


def _check_torch_version():
    built = _build_info.TORCH_VERSION
    if not built:
        raise ImportError(
            "chorus.torch: this chorus was built without the torch backend (no torch was "
            f"importable when it was built); running torch {torch.__version__}. Rebuild it in this "
            "environment: pip install --no-build-isolation --force-reinstall <chorus source>")
    if _release(built) != _release(torch.__version__):
        raise ImportError(
            f"chorus.torch: the chorus torch backend was built for torch {built}, but torch "
            f"{torch.__version__} is running (backends have no stable ABI across torch releases). "
            "Rebuild it against this torch: pip install --no-build-isolation --force-reinstall "
            "<chorus source> (or install the chorus wheel built for this torch).")


_check_torch_version()

from ._chorus_torch_ext import *  # noqa: E402,F401,F403
from ._chorus_torch_ext import BACKEND_API, TORCH_VERSION  # noqa: E402,F401
