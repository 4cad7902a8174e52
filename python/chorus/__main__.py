"""``python -m chorus``: what this installation of Chorus holds and the settings in force, for bug
reports (as ``python -m torch.utils.collect_env``): the version, the library file, the torch the
backend was built for and the one running (and whether chorus.torch loads), the CUDA backend,
the algorithms, the reduce kernels' SIMD build and the CHORUS_* variables set.

``collect()`` returns the same facts as a dict."""

import importlib.metadata
import importlib.util
import os
import platform
import sys

import chorus
from chorus import _build_info, _chorus


def _library_path():
    """The libchorus file this process loaded (import chorus loads it), from /proc/self/maps."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip()
                if os.path.basename(path).startswith("libchorus.so"):
                    return os.path.realpath(path)
    except OSError:
        pass
    return None


def _library_build_info():
    """chorusGetBuildInfo() of the loaded library, as a dict."""
    text = _chorus.build_info()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _distribution_version():
    """The installed distribution's version (a wheel's local part names its torch), if any."""
    try:
        return importlib.metadata.version("chorus")
    except importlib.metadata.PackageNotFoundError:
        return None


def _torch():
    """(running torch version or None, whether chorus.torch loads or the reason it does not)."""
    if importlib.util.find_spec("torch") is None:
        return None, "no torch installed (numpy API only)"
    try:
        import torch
        version = torch.__version__
    except Exception as e:  # a broken torch install (or a folder named torch): report it
        return None, f"torch does not import: {e!r}"
    try:
        from chorus import _chorus_torch  # noqa: F401  (the release check, then the backend)
    except Exception as e:
        return version, f"does not load: {e}"
    return version, "loads"


def collect():
    library = _library_path()
    info = _library_build_info()
    torch_version, backend = _torch()
    return {
        "version": chorus.__version__,
        "distribution": _distribution_version(),
        "package": os.path.dirname(os.path.abspath(chorus.__file__)),
        "library": library,
        "python": f"{platform.python_version()} ({sys.executable})",
        "built_for_torch": _build_info.TORCH_VERSION or None,
        "torch": torch_version,
        "torch_backend": backend,
        "cuda": info.get("cuda"),
        "algorithms": [a for a in info.get("algorithms", "").split(",") if a],
        "simd": info.get("simd"),
        "simd_widest": info.get("simd_widest"),
        "simd_cpu": [s for s in info.get("simd_cpu", "").split(",") if s],
        "settings": {k: v for k, v in sorted(os.environ.items()) if k.startswith("CHORUS_")},
    }


def main():
    f = collect()
    dist = f["distribution"]
    print(f"Chorus version:        {f['version']}"
          + (f" (installed distribution chorus {dist})" if dist and dist != f["version"] else ""))
    print(f"Package:               {f['package']}")
    print(f"Library:               {f['library'] or 'not found'}")
    print(f"Python:                {f['python']}")
    print(f"Built for torch:       {f['built_for_torch'] or 'none (numpy API only)'}")
    print(f"Running torch:         {f['torch'] or 'none'}")
    print(f"chorus.torch:          {f['torch_backend']}")
    print(f"CUDA backend built:    {f['cuda'] or 'unknown'}")
    print(f"Algorithms:            {', '.join(f['algorithms']) or 'unknown'}")
    print(f"SIMD (reduce kernels): {f['simd']} (float32 sum), widest in use {f['simd_widest']}; "
          f"this CPU runs {', '.join(f['simd_cpu'])}")
    print("Settings (CHORUS_*):" + ("" if f["settings"] else "   none set"))
    for k, v in f["settings"].items():
        print(f"  {k}={v}")


if __name__ == "__main__":
    main()
