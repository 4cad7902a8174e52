"""docs/environment.md lists every CHORUS_* variable the source reads, and nothing else.

Run by ctest (tests/CMakeLists.txt, Docs.environment) or `python3 -m pytest tests/test_env_doc.py`.

A variable counts as read in the source when its name opens a string literal ("CHORUS_X" or
'CHORUS_X': getenv, envInt/envStr/envSize, os.environ, the launcher table, chorusrun's list) in
src/, include/, python/, tools/ or tests/, or is expanded ($CHORUS_X, ${CHORUS_X...}) in
scripts/*.sh or .ci/run. Names #define'd as C macros (CHORUS_SHRINK_ABORT, ...) are not
variables. A variable counts as documented when the first cell of a table row in
docs/environment.md names it.
"""

import os
import re

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DOC = os.path.join(ROOT, "docs", "environment.md")

SOURCE_DIRS = ("src", "include", "python", "tools", "tests")
SOURCE_EXT = (".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".py")
SCRIPT_FILES_RE = re.compile(r"\.sh$")

LITERAL = re.compile(r"""["'](CHORUS_[A-Z0-9_]+)\b""")
EXPANSION = re.compile(r"\$\{?(CHORUS_[A-Z0-9_]+)")
# C macros: #define'd, #ifndef'd (set by the build), or a CMake compile definition.
DEFINE = re.compile(r"#\s*(?:define|ifndef|ifdef)\s+(CHORUS_[A-Z0-9_]+)")
NAME = re.compile(r"CHORUS_[A-Z0-9_]+")


def _files():
    for d in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, d)):
            dirnames[:] = [n for n in dirnames if n not in ("__pycache__", "upstream")]
            for f in filenames:
                if f.endswith(SOURCE_EXT) and f != os.path.basename(__file__):
                    yield os.path.join(dirpath, f), LITERAL
    for f in sorted(os.listdir(os.path.join(ROOT, "scripts"))):
        if SCRIPT_FILES_RE.search(f):
            yield os.path.join(ROOT, "scripts", f), EXPANSION
    ci = os.path.join(ROOT, ".ci", "run")
    if os.path.exists(ci):
        yield ci, EXPANSION


def source_variables():
    """{name: [file:line, ...]} of every CHORUS_* variable read in the source."""
    found, macros = {}, set()
    for path, pattern in _files():
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                macros.update(DEFINE.findall(line))
                for name in pattern.findall(line):
                    found.setdefault(name, []).append(f"{os.path.relpath(path, ROOT)}:{lineno}")
    return {n: w for n, w in found.items() if n not in macros}


CMAKE_OPTION = re.compile(r"^\s*(?:option|set)\((CHORUS_[A-Z0-9_]+)\b(?:.*\bCACHE\b)?")


def cmake_options():
    """CMake's -D options (option() or a CACHE set() in a CMakeLists.txt): a test that reads them
    from CMakeCache.txt names them as strings, but they are no environment variables."""
    names = set()
    for d in (ROOT, os.path.join(ROOT, "python"), os.path.join(ROOT, "tests")):
        path = os.path.join(d, "CMakeLists.txt")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = CMAKE_OPTION.match(line)
                if m and ("option(" in line or "CACHE" in line):
                    names.add(m.group(1))
    return names


def documented_variables():
    """{name: line} of every variable named in the first cell of a table row of the page."""
    names = {}
    with open(DOC, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.startswith("|"):
                continue
            first = line.split("|")[1]
            for name in NAME.findall(first):
                names.setdefault(name, lineno)
    return names


def test_every_variable_read_is_documented():
    src, doc = source_variables(), documented_variables()
    # A CMake option read back from CMakeCache.txt by a test is named like a variable but is none
    # (one that is also an environment variable, as CHORUS_CUDA_IPC, is documented anyway).
    missing = sorted(set(src) - set(doc) - cmake_options())
    assert not missing, "read in the source but missing from docs/environment.md (add a row):\n" + \
        "\n".join(f"  {n}: read at {', '.join(src[n][:3])}" for n in missing)


def test_every_documented_variable_is_read():
    src, doc = source_variables(), documented_variables()
    stale = sorted(set(doc) - set(src))
    assert not stale, "documented in docs/environment.md but read nowhere in src/, include/, " \
        "python/, tools/, tests/, scripts/ (remove the row, or read it):\n" + \
        "\n".join(f"  {n}: docs/environment.md:{doc[n]}" for n in stale)


def test_the_scan_finds_known_reads():
    # The scan itself must work: variables read in known places are found, macros are not.
    src = source_variables()
    for name in ("CHORUS_TIMEOUT", "CHORUS_ALGO", "CHORUS_TORCH_ASYNC", "CHORUS_LOCAL_RANK",
                 "CHORUS_SETUP_TARGETS"):
        assert name in src, name
    assert "CHORUS_SHRINK_ABORT" not in src and "CHORUS_CONFIG_INITIALIZER" not in src
