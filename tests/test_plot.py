"""Tests of chorus-plot (tools/plot/chorus_plot.py, matplotlib): it reads the benchmark tools' -J
documents and writes a line chart as SVG, PNG or PDF. The main test plots two documents made by
all_reduce_perf (one with the naive ring forced, one with an ideal column) and checks the SVG:
well-formed XML, one line per input through every size, the axis titles, the size and GB/s tick
labels, the legend labels and the dashed ideal line; the same chart as PNG and PDF must be valid
files of their kind. A hand-written document then pins the data mapping (placement, the median of
repeated sizes, labels, metrics), comma-joined runs give per-size medians, and bad inputs fail.

Run by ctest (tests/CMakeLists.txt) with CHORUS_BUILD_DIR naming the build directory that holds
chorus-plot and all_reduce_perf."""

import math
import os
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib

import pytest

BUILD = os.environ.get("CHORUS_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "build"))
PLOT = os.path.join(BUILD, "chorus-plot")
SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"


def run(cmd, env=None, timeout=180):
    e = dict(os.environ)
    e.update(env or {})
    for k in [k for k, v in e.items() if v is None]:
        del e[k]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e,
                       timeout=timeout, check=False)
    return p.returncode, p.stdout.decode("utf-8", "replace")


def plot(*args):
    return run([PLOT, *args])


# ---------------------------------------------------------------------------------------------
# Reading the charts back.

class Svg:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.text = f.read().decode("utf-8")
        self.root = ET.fromstring(self.text)  # raises on malformed XML
        assert self.root.tag == SVG + "svg"

    def texts(self):
        return ["".join(t.itertext()) for t in self.root.iter(SVG + "text")]

    def group(self, gid):
        for g in self.root.iter(SVG + "g"):
            if g.get("id") == gid:
                return g
        return None

    def groups(self, prefix):
        return [g for g in self.root.iter(SVG + "g") if (g.get("id") or "").startswith(prefix)]

    @staticmethod
    def path_points(g):
        """The vertices of the first <path d=...> of a line's group, as (x, y) pixels."""
        for p in g.iter(SVG + "path"):
            if p.get("d") and p.get("id") is None:
                nums = p.get("d").replace("M", " ").replace("L", " ").split()
                vals = [float(v) for v in nums]
                return list(zip(vals[0::2], vals[1::2]))
        return []

    def lines(self, prefix="series-"):
        return [self.path_points(g) for g in self.groups(prefix)]

    def yticks(self):
        """(pixel y, label) of every y tick, from the chart's own axis."""
        out = []
        for g in self.groups("ytick_"):
            use = next(g.iter(SVG + "use"), None)
            text = next(g.iter(SVG + "text"), None)
            if use is not None and text is not None:
                out.append((float(use.get("y")), "".join(text.itertext())))
        return out

    def value_at(self, y):
        """What a y pixel stands for on a linear y axis, from two ticks."""
        ticks = [(py, float(label.replace("\u2212", "-"))) for py, label in self.yticks()]
        (y0, v0), (y1, v1) = ticks[0], ticks[1]
        return v0 + (y - y0) / (y1 - y0) * (v1 - v0)


def png_info(path):
    """(width, height) of a PNG after checking its signature and every chunk's CRC."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, size, chunks = 8, None, []
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + n]
        (crc,) = struct.unpack(">I", data[at + 8 + n:at + 12 + n])
        assert zlib.crc32(kind + body) == crc, "bad CRC in %r" % kind
        chunks.append(kind)
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        at += 12 + n
    assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND" and b"IDAT" in chunks
    return size


def png_has_color(path, rgb, tolerance=8):
    """Whether some pixel of the PNG is (about) the colour rgb (0-255)."""
    import matplotlib.image as mpimg
    import numpy as np
    img = mpimg.imread(path)[:, :, :3]  # floats 0..1
    want = np.array(rgb, dtype=float) / 255.0
    return bool((np.abs(img - want) <= tolerance / 255.0).all(axis=2).any())


def pdf_check(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data.startswith(b"%PDF-"), "not a PDF"
    assert data.rstrip().endswith(b"%%EOF")
    assert b"/Type /Page" in data or b"/Type/Page" in data
    assert b"startxref" in data
    return data


# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def perf_docs(tmp_path_factory):
    perf = os.path.join(BUILD, "all_reduce_perf")
    assert os.path.exists(perf), perf
    d = tmp_path_factory.mktemp("plot")
    a, b = str(d / "auto.json"), str(d / "naive.json")
    sweep = ["-T", "120", "-t", "2", "-b", "8", "-e", "32K", "-f", "8", "-n", "2", "-w", "1", "-J"]
    rc, out = run([perf, *sweep, a, "--intra-bw", "5"],
                  env={"CHORUS_ALGO": None, "CHORUS_PROTO": None})
    assert rc == 0, out
    rc, out = run([perf, *sweep, b], env={"CHORUS_ALGO": "naive", "CHORUS_PROTO": None})
    assert rc == 0, out
    return a, b, d


def test_two_all_reduce_perf_documents(perf_docs):
    a, b, d = perf_docs
    svg_path = str(d / "busbw.svg")
    rc, out = plot(a, b, "--label", "auto <2 ranks>", "-o", svg_path, "--title", "Naive & auto")
    assert rc == 0, out
    svg = Svg(svg_path)

    # One line per input, each through every size (8, 64, 512, 4K, 32K).
    lines = svg.lines()
    assert len(lines) == 2, svg.text
    for line in lines:
        assert len(line) == 5
        steps = [line[k][0] - line[k - 1][0] for k in range(1, len(line))]
        assert all(s > 0 for s in steps)  # x grows with size
        # Three octaves per step on a log axis: equal distances.
        assert max(steps) - min(steps) < 0.15

    texts = svg.texts()
    assert "Naive & auto" in texts
    assert any("Message size" in t for t in texts)
    assert any("Bus bandwidth (GB/s" in t for t in texts)
    for size in ["8B", "64B", "512B", "4K", "32K"]:
        assert size in texts, size
    assert svg.yticks()[0][1] == "0"  # the y axis starts at 0 GB/s
    assert len(svg.yticks()) >= 3
    # Legend: the --label of the first file, "algorithm/protocol" of the second (every row of the
    # forced run is naive/simple), and the ideal of the first (--intra-bw 5).
    assert "auto <2 ranks>" in texts
    assert "naive/simple" in texts
    assert any(t.startswith("ideal") and "(5 GB/s)" in t for t in texts), texts
    # The ideal is one dashed line, and the y axis reaches it.
    ideal = svg.lines("ideal-")
    assert len(ideal) == 1 and len(ideal[0]) == 5
    assert "stroke-dasharray" in ET.tostring(svg.group("ideal-0")).decode()
    assert all(abs(svg.value_at(y) - 5.0) < 0.02 for _, y in ideal[0])
    assert max(float(label) for _, label in svg.yticks()) >= 5

    # The same chart as PNG and PDF: valid files holding the series (its colour in the PNG).
    png_path, pdf_path = str(d / "busbw.png"), str(d / "busbw.pdf")
    rc, out = plot(a, b, "-o", png_path)
    assert rc == 0, out
    w, h = png_info(png_path)
    assert w > 400 and h > 300
    assert png_has_color(png_path, (0x1F, 0x77, 0xB4))  # the first series' blue
    assert png_has_color(png_path, (0xD6, 0x27, 0x28))  # the second series' red
    rc, out = plot(a, b, "-o", pdf_path, "--title", "PDF chart")
    assert rc == 0, out
    pdf_check(pdf_path)

    # Without an ideal in any input: no dashed line; the default title names the collective.
    rc, out = plot(b, "-o", svg_path)
    assert rc == 0, out
    one = Svg(svg_path)
    assert len(one.lines()) == 1
    assert one.groups("ideal-") == []
    assert "stroke-dasharray" not in one.text
    assert "all_reduce_perf: bus bandwidth, 2 ranks" in one.texts()
    # --no-ideal leaves it out of the first file's chart too.
    rc, out = plot(a, "--no-ideal", "-o", svg_path)
    assert rc == 0, out
    assert Svg(svg_path).groups("ideal-") == []

    # Standard output: SVG.
    rc, out = plot(b)
    assert rc == 0
    assert "<svg" in out and "series-0" in out


# A hand-written document: known values, so the mapping from data to pixels can be checked.
HAND = """{
  "collective": "broadcast_perf",
  "config": {"nranks": 3},
  "results": [
    {"size": 1024, "type": "float", "redop": "none", "root": 0,
     "out_of_place": {"bus_bw": 1.0, "alg_bw": 1.5, "time": 10}, "in_place": {"bus_bw": 4.0},
     "algorithm": "chain", "protocol": "simple", "nchannels": 1},
    {"size": 4096, "type": "float", "redop": "none", "root": 0,
     "out_of_place": {"bus_bw": 2.0, "alg_bw": 3.0, "time": 20}, "in_place": {"bus_bw": 8.0},
     "algorithm": "chain", "protocol": "simple", "nchannels": 1},
    {"size": 4096, "type": "float", "redop": "none", "root": 0,
     "out_of_place": {"bus_bw": 4.0, "alg_bw": 6.0, "time": 40}, "in_place": {"bus_bw": 8.0},
     "algorithm": "chain", "protocol": "simple", "nchannels": 1},
    {"size": 4096, "type": "int8", "redop": "none", "root": 0,
     "out_of_place": {"bus_bw": 100.0}, "in_place": {"bus_bw": 100.0},
     "algorithm": "tree", "protocol": "ll", "nchannels": 1}
  ]
}"""


def test_hand_written_document_maps_the_data(tmp_path):
    doc, svg_path = str(tmp_path / "hand.json"), str(tmp_path / "hand.svg")
    with open(doc, "w") as f:
        f.write(HAND)
    rc, out = plot(doc, "-o", svg_path)
    assert rc == 0, out
    # The int8 row is another (type, redop, root): left out, with a warning.
    assert "left out" in out
    svg = Svg(svg_path)
    lines = svg.lines()
    assert len(lines) == 1 and len(lines[0]) == 2  # 1K, and 4K (two rows: their median)
    # Out of place: 1 GB/s, then the median of the two 4K rows, (2 + 4) / 2 = 3 GB/s.
    assert svg.value_at(lines[0][0][1]) == pytest.approx(1.0, abs=0.02)
    assert svg.value_at(lines[0][1][1]) == pytest.approx(3.0, abs=0.02)
    texts = svg.texts()
    assert "chain/simple" in texts  # every plotted row's choice
    assert "broadcast_perf: bus bandwidth, 3 ranks" in texts
    assert "1K" in texts and "4K" in texts
    assert max(float(label) for _, label in svg.yticks()) < 100  # int8 did not set the range

    rc, out = plot("--placement", "in", doc, "-o", svg_path)
    assert rc == 0, out
    svg = Svg(svg_path)
    lines = svg.lines()
    assert len(lines) == 1 and len(lines[0]) == 2
    assert any("in-place" in t for t in svg.texts())
    assert svg.value_at(lines[0][0][1]) == pytest.approx(4.0, abs=0.02)
    assert svg.value_at(lines[0][1][1]) == pytest.approx(8.0, abs=0.02)

    # --metric algbw / time: the other columns, with their axis titles.
    rc, out = plot("--metric", "algbw", doc, "-o", svg_path)
    assert rc == 0, out
    svg = Svg(svg_path)
    assert any(t.startswith("Algorithm bandwidth (GB/s") for t in svg.texts())
    assert svg.value_at(svg.lines()[0][1][1]) == pytest.approx(4.5, abs=0.03)
    rc, out = plot("--metric", "time", doc, "-o", svg_path)
    assert rc == 0, out
    svg = Svg(svg_path)
    assert any(t.startswith("Time (us") for t in svg.texts())
    assert svg.value_at(svg.lines()[0][0][1]) == pytest.approx(10.0, abs=0.1)
    assert svg.value_at(svg.lines()[0][1][1]) == pytest.approx(30.0, abs=0.1)

    # --logy: a logarithmic y axis: ticks 1, 2, 3 spaced as their logarithms, the points (1 and
    # 3 GB/s) on the ticks 1 and 3.
    rc, out = plot("--logy", doc, "-o", svg_path)
    assert rc == 0, out
    svg = Svg(svg_path)
    at = {}
    for py, label in svg.yticks():
        at.setdefault(label.strip(), py)
    assert {"1", "2", "3"} <= set(at), svg.yticks()
    assert (at["1"] - at["2"]) / (at["1"] - at["3"]) == pytest.approx(
        math.log(2) / math.log(3), abs=0.005)
    (y1k, y4k) = (svg.lines()[0][0][1], svg.lines()[0][1][1])
    assert y1k == pytest.approx(at["1"], abs=0.2) and y4k == pytest.approx(at["3"], abs=0.2)

    # Two files with the same automatic label get their file names added.
    rc, out = plot(doc, doc, "-o", svg_path)
    assert rc == 0, out
    svg = Svg(svg_path)
    assert len(svg.lines()) == 2
    assert any(t.startswith("chain/simple (") for t in svg.texts())


def test_comma_joined_runs_plot_the_median(tmp_path):
    def doc(at1k, at4k):
        return """{"collective": "all_reduce_perf", "config": {"nranks": 2}, "results": [
            {"size": 1024, "type": "float", "redop": "sum", "root": -1,
             "out_of_place": {"bus_bw": %g}, "in_place": {"bus_bw": 0},
             "algorithm": "ring", "protocol": "simple"},
            {"size": 4096, "type": "float", "redop": "sum", "root": -1,
             "out_of_place": {"bus_bw": %g}, "in_place": {"bus_bw": 0},
             "algorithm": "ring", "protocol": "ll"}]}""" % (at1k, at4k)
    paths = []
    for name, vals in [("run1.json", (1, 10)), ("run2.json", (3, 2)), ("run3.json", (2, 4))]:
        p = str(tmp_path / name)
        with open(p, "w") as f:
            f.write(doc(*vals))
        paths.append(p)
    svg_path = str(tmp_path / "median.svg")
    rc, out = plot(",".join(paths), paths[0], "-o", svg_path)
    assert rc == 0, out
    svg = Svg(svg_path)
    lines = svg.lines()
    assert len(lines) == 2 and len(lines[0]) == 2
    assert svg.value_at(lines[0][0][1]) == pytest.approx(2.0, abs=0.02)  # median of 1, 3, 2
    assert svg.value_at(lines[0][1][1]) == pytest.approx(4.0, abs=0.02)  # median of 10, 2, 4
    assert svg.value_at(lines[1][1][1]) == pytest.approx(10.0, abs=0.05)  # the single run
    # Rows differ in protocol: the label is the file name, and says it is a median.
    texts = svg.texts()
    assert any("median of 3 runs" in t for t in texts)
    assert os.path.basename(paths[0]) in texts


def test_unicode_escapes_survive(tmp_path):
    """A label from the document written with \\u escapes reaches the chart as the character."""
    p = str(tmp_path / "u.json")
    with open(p, "w") as f:
        f.write('{"collective": "caf\\u00e9_perf \\ud83c\\udfb5", "config": {"nranks": 2},'
                ' "results": [{"size": 8, "type": "float", "redop": "sum", "root": -1,'
                ' "out_of_place": {"bus_bw": 1}, "in_place": {"bus_bw": 1}}]}')
    svg_path = str(tmp_path / "u.svg")
    rc, out = plot(p, "-o", svg_path)
    assert rc == 0, out
    assert "caf\u00e9_perf \U0001F3B5: bus bandwidth, 2 ranks" in Svg(svg_path).texts()


def test_bad_inputs_fail(tmp_path):
    bad, empty = str(tmp_path / "bad.json"), str(tmp_path / "empty.json")
    out_svg = str(tmp_path / "bad.svg")
    with open(bad, "w") as f:
        f.write('{"results": [ {"size": 8, ')
    with open(empty, "w") as f:
        f.write('{"results": []}')
    rc, out = plot(bad, "-o", out_svg)
    assert rc == 1 and "not valid JSON" in out
    rc, out = plot(empty, "-o", out_svg)
    assert rc == 1 and "no results" in out
    rc, out = plot(str(tmp_path / "does-not-exist.json"), "-o", out_svg)
    assert rc == 1 and "does-not-exist.json" in out
    assert plot("-o", out_svg)[0] == 2
    assert plot("--placement", "sideways", empty)[0] == 2
    assert plot("--no-such-flag", empty)[0] == 2
    assert plot("--label", "a", "--label", "b", empty)[0] == 2
    assert plot("--metric", "latency", empty)[0] == 2
    assert plot(empty, "-o", str(tmp_path / "chart.gif"))[0] == 2
    assert not os.path.exists(out_svg)
