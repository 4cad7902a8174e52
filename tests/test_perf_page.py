"""docs/performance.md's generator (scripts/perf_page.py) renders a small recorded run
(tests/perf_page_fixture/: a real 2-round run of scripts/perf_page.sh over 3 sizes, trimmed), so
that it cannot rot between full runs; and the committed page is a generated one whose charts
exist. No MPI needed: the fixture holds the peers' printed tables. Run by ctest
(Docs.perf_page) with Debian's python3 and pytest.
"""

import glob
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FIXTURE = os.path.join(ROOT, "tests", "perf_page_fixture")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import nccl_table  # noqa: E402

HAVE_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    run = str(tmp_path_factory.mktemp("run"))
    shutil.copytree(FIXTURE, run, dirs_exist_ok=True)
    page, plots = os.path.join(run, "page.md"), os.path.join(run, "perf")
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "perf_page.py"), "render", run,
           "--page", page, "--plots", plots,
           "--plot", os.path.join(ROOT, "tools", "plot", "chorus_plot.py")]
    if not HAVE_MPL:
        cmd.append("--no-plots")
    env = dict(os.environ, MPLCONFIGDIR=os.path.join(run, "mpl"))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "chorus-plot failed" not in r.stderr, r.stderr
    return run, open(page, encoding="utf-8").read(), plots


def table_rows(page, heading):
    """The rows of the first table after `heading`, as lists of cells."""
    part = page.split(heading, 1)[1]
    rows = []
    for line in part.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def test_every_placeholder_filled_and_sections_present(rendered):
    _, page, _ = rendered
    assert not re.findall(r"@[A-Z]+@", page)
    assert "<!--" not in page
    for h in ("## The machine and the method", "## Summary",
              "## C library against Open MPI, MPICH and oneCCL", "## PyTorch against gloo",
              "## numpy against mpi4py", "### AllReduce", "### Broadcast (in place)"):
        assert h in page, h
    assert page.count("\n") <= 400


def test_peer_ratios_match_the_printed_tables(rendered):
    """The AllReduce table's best ratio per size, recomputed from the raw tables."""
    run, page, _ = rendered
    meta = json.load(open(os.path.join(run, "run.json")))
    rounds = meta["rounds"]
    raw = {lib: [nccl_table.times(os.path.join(run, "peers", "%s_allreduce_%d.txt" % (lib, r)))
                 for r in range(rounds)] for lib in ("ompi", "mpich", "ccl", "chorus")}
    rows = table_rows(page, "### AllReduce")
    assert rows, "no AllReduce table"
    names = {"ompi": "Open MPI", "mpich": "MPICH", "ccl": "oneCCL"}
    for row in rows:
        size = [s for s in raw["chorus"][0] if nccl_table.size_label(s) == row[0]]
        assert size, row
        s = size[0]
        chorus = min(t[s] for t in raw["chorus"])
        peer, lib = min((min(t[s] for t in raw[l]), names[l]) for l in names if raw[l][0])
        want = "%.2f (%s)" % (peer / chorus, lib) if peer / chorus < 10 else \
            "%.1f (%s)" % (peer / chorus, lib)
        # Chorus's time comes from its -J document (more digits than its table): allow the
        # last digit to differ.
        got = row[-2]
        assert got.split()[1] == want.split()[1], (row, want)
        assert abs(float(got.split()[0]) - float(want.split()[0])) <= 0.02 * float(
            want.split()[0]) + 0.011, (row, want)
        med = [statistics.median(t[s] for t in raw[l]) for l in names if raw[l][0]]
        assert float(row[-1].split()[0]) == pytest.approx(
            min(med) / statistics.median(t[s] for t in raw["chorus"]), rel=0.03)


def test_torch_and_numpy_tables(rendered):
    run, page, _ = rendered
    doc = json.load(open(os.path.join(run, "torch", "torch.json")))
    ar = [r for r in doc["results"] if r["op"] == "all_reduce"]
    rows = table_rows(page, "### `all_reduce`")
    assert len(rows) == len(ar)
    for row, r in zip(rows, ar):
        assert float(row[3]) == pytest.approx(r["gloo"]["best_us"] / r["chorus"]["best_us"],
                                              rel=0.01)
    rows = table_rows(page, "## numpy against mpi4py")
    results = [line.split() for f in glob.glob(os.path.join(run, "numpy", "*.txt"))
               for line in open(f) if line.startswith("RESULT")]
    assert len(rows) == len({(w[2], w[3]) for w in results}) > 0


def test_peer_tables_become_plot_documents(rendered):
    run, _, _ = rendered
    for txt in glob.glob(os.path.join(run, "peers", "ompi_*.txt")):
        doc = json.load(open(txt[:-4] + ".json"))
        want = nccl_table.times(txt)
        got = {r["size"]: r["out_of_place"]["time"] for r in doc["results"]}
        assert got == want
        assert doc["config"]["nranks"] == 2


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib (python3-matplotlib) is not installed")
def test_charts_drawn_and_linked(rendered):
    _, page, plots = rendered
    links = re.findall(r"!\[[^]]*\]\(([^)]+\.png)\)", page)
    assert len(links) >= 3
    for link in links:
        assert os.path.exists(os.path.join(plots, os.path.basename(link))), link


def test_committed_page_is_the_rendering_of_the_kept_run(tmp_path):
    """docs/performance.md is exactly what the generator makes of docs/perf/run.tar.xz (the
    measurements of its run) and the template: no hand edit, no template edit left unrendered."""
    archive = os.path.join(ROOT, "docs", "perf", "run.tar.xz")
    assert os.path.exists(archive), "docs/perf/run.tar.xz (the page's run) is missing"
    page = str(tmp_path / "performance.md")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "perf_page.py"), "render",
                        archive, "--page", page, "--plots", os.path.join(ROOT, "docs", "perf"),
                        "--plots-url", "perf", "--no-plots"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    want = open(page, encoding="utf-8").read()
    got = open(os.path.join(ROOT, "docs", "performance.md"), encoding="utf-8").read()
    assert got == want, ("docs/performance.md differs from its rendering: regenerate it with "
                         "scripts/perf_page.sh --render-only docs/perf/run.tar.xz")


def test_committed_page_is_generated_and_its_charts_exist():
    page = open(os.path.join(ROOT, "docs", "performance.md"), encoding="utf-8").read()
    assert "scripts/perf_page.sh" in page and not re.findall(r"@[A-Z]+@", page)
    links = re.findall(r"!\[[^]]*\]\(([^)]+\.png)\)", page)
    docs = os.path.join(ROOT, "docs")
    for link in links:
        assert os.path.exists(os.path.normpath(os.path.join(docs, link))), link
    pngs = glob.glob(os.path.join(docs, "perf", "*.png"))
    assert len(pngs) <= 8
    linked = {os.path.normpath(os.path.join(docs, link)) for link in links}
    assert set(map(os.path.normpath, pngs)) <= linked, "a chart in docs/perf the page does not show"
