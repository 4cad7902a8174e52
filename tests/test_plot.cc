// Tests of chorus-plot (tools/plot): it reads the benchmark tools' -J documents and writes an SVG
// line chart. The main test plots two documents made by all_reduce_perf (one with the naive ring
// forced, one with an ideal column) and checks the SVG: well-formed XML, one <polyline> per
// input, the axis titles, the size and GB/s tick labels, the legend labels and the dashed ideal
// line. A hand-written document then pins the data mapping (placement, the median of repeated
// sizes, labels), comma-joined runs give per-size medians, and bad inputs must fail.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#ifndef BENCH_DIR
#error "BENCH_DIR must name the build directory holding the *_perf tools"
#endif
#ifndef CHORUS_PLOT_PATH
#define CHORUS_PLOT_PATH BENCH_DIR "/chorus-plot"
#endif

namespace {

struct Ran {
  int status = -1;
  std::string out;
};

// Runs `command` through /bin/sh under a hard time limit, stdout and stderr together.
Ran Shell(const std::string& command) {
  Ran r;
  FILE* p = popen(("timeout -k 5 180 " + command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string Temp(const std::string& name) {
  return testing::TempDir() + "chorus_plot_" + std::to_string(getpid()) + "_" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

Ran Plot(const std::string& args) {
  return Shell(std::string(CHORUS_PLOT_PATH) + " " + args);
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// ---------------------------------------------------------------------------------------------
// A strict little XML checker: every tag closed in order, attributes quoted and unique, no raw
// '<' in values, entities known, one root element, nothing but space after it. Returns "" when
// the document is well-formed, else what is wrong.

bool NameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' ||
         c == '.';
}

std::string CheckEntity(const std::string& s, size_t* i) {
  static const char* kEntities[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
  for (const char* e : kEntities) {
    if (s.compare(*i, std::strlen(e), e) == 0) {
      *i += std::strlen(e);
      return "";
    }
  }
  if (s.compare(*i, 2, "&#") == 0) {
    const size_t semi = s.find(';', *i);
    if (semi != std::string::npos && semi > *i + 2) {
      *i = semi + 1;
      return "";
    }
  }
  return "bad entity at " + std::to_string(*i);
}

std::string XmlProblem(const std::string& s) {
  std::vector<std::string> open;
  bool rootSeen = false;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '&') {
      const std::string e = CheckEntity(s, &i);
      if (!e.empty()) return e;
      continue;
    }
    if (s[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(s[i]))) {
        return "text outside the root element at " + std::to_string(i);
      }
      ++i;
      continue;
    }
    if (s.compare(i, 2, "<?") == 0) {
      const size_t end = s.find("?>", i);
      if (end == std::string::npos || rootSeen) return "bad processing instruction";
      i = end + 2;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {
      const size_t end = s.find("-->", i);
      if (end == std::string::npos) return "unterminated comment";
      i = end + 3;
      continue;
    }
    const bool closing = s.compare(i, 2, "</") == 0;
    i += closing ? 2 : 1;
    const size_t nameStart = i;
    while (i < s.size() && NameChar(s[i])) ++i;
    const std::string name = s.substr(nameStart, i - nameStart);
    if (name.empty()) return "tag without a name at " + std::to_string(nameStart);
    if (closing) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size() || s[i] != '>') return "bad closing tag </" + name;
      ++i;
      if (open.empty() || open.back() != name) {
        return "</" + name + "> closes <" + (open.empty() ? std::string("nothing") : open.back()) +
               ">";
      }
      open.pop_back();
      continue;
    }
    if (open.empty() && rootSeen) return "a second root element <" + name + ">";
    rootSeen = true;
    std::set<std::string> attrs;
    for (;;) {
      const size_t before = i;
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) return "unterminated tag <" + name;
      if (s[i] == '>') {
        ++i;
        open.push_back(name);
        break;
      }
      if (s.compare(i, 2, "/>") == 0) {
        i += 2;
        break;
      }
      if (i == before) return "no space before an attribute of <" + name + ">";
      const size_t attrStart = i;
      while (i < s.size() && NameChar(s[i])) ++i;
      const std::string attr = s.substr(attrStart, i - attrStart);
      if (attr.empty()) return "bad attribute in <" + name + ">";
      if (!attrs.insert(attr).second) return "duplicate attribute " + attr + " in <" + name + ">";
      if (i >= s.size() || s[i] != '=') return "attribute " + attr + " without a value";
      ++i;
      if (i >= s.size() || (s[i] != '"' && s[i] != '\'')) return "unquoted attribute " + attr;
      const char q = s[i++];
      while (i < s.size() && s[i] != q) {
        if (s[i] == '<') return "'<' in the value of " + attr;
        if (s[i] == '&') {
          const std::string e = CheckEntity(s, &i);
          if (!e.empty()) return e;
          continue;
        }
        ++i;
      }
      if (i >= s.size()) return "unterminated value of " + attr;
      ++i;
    }
  }
  if (!rootSeen) return "no root element";
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  return "";
}

std::string Unescape(const std::string& s) {
  std::string r;
  for (size_t i = 0; i < s.size();) {
    bool done = false;
    for (const auto& [e, c] : {std::pair<const char*, char>{"&amp;", '&'},
                               {"&lt;", '<'},
                               {"&gt;", '>'},
                               {"&quot;", '"'},
                               {"&apos;", '\''}}) {
      if (s.compare(i, std::strlen(e), e) == 0) {
        r += c;
        i += std::strlen(e);
        done = true;
        break;
      }
    }
    if (!done) r += s[i++];
  }
  return r;
}

// The text content of every <text> element, in order.
std::vector<std::string> Texts(const std::string& svg) {
  std::vector<std::string> out;
  for (size_t at = svg.find("<text"); at != std::string::npos; at = svg.find("<text", at + 1)) {
    const size_t gt = svg.find('>', at);
    const size_t end = svg.find("</text>", at);
    if (gt == std::string::npos || end == std::string::npos || end < gt) break;
    out.push_back(Unescape(svg.substr(gt + 1, end - gt - 1)));
  }
  return out;
}

bool HasText(const std::vector<std::string>& texts, const std::string& t) {
  for (const std::string& x : texts) {
    if (x == t) return true;
  }
  return false;
}

bool HasTextContaining(const std::vector<std::string>& texts, const std::string& t) {
  for (const std::string& x : texts) {
    if (x.find(t) != std::string::npos) return true;
  }
  return false;
}

// The "points" of every <polyline>, as (x, y) pairs.
std::vector<std::vector<std::pair<double, double>>> Polylines(const std::string& svg) {
  std::vector<std::vector<std::pair<double, double>>> out;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    const size_t p = svg.find("points=\"", at);
    if (p == std::string::npos) break;
    const size_t end = svg.find('"', p + 8);
    std::string pts = svg.substr(p + 8, end - p - 8);
    for (char& c : pts) c = c == ',' ? ' ' : c;
    std::istringstream in(pts);
    std::vector<std::pair<double, double>> line;
    double x, y;
    while (in >> x >> y) line.emplace_back(x, y);
    out.push_back(line);
  }
  return out;
}

// The GB/s a y pixel stands for, from the chart's own y axis: the first two horizontal grid lines
// are 0 and one step, and the first two y tick labels say what they are. NaN when not found.
double GbsAt(const std::string& svg, double y) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const size_t grid = svg.find("<g class=\"grid\"");
  if (grid == std::string::npos) return nan;
  std::vector<double> ys;
  for (size_t at = svg.find("<line", grid); at != std::string::npos && ys.size() < 2;
       at = svg.find("<line", at + 1)) {
    const size_t y1 = svg.find("y1=\"", at);
    if (y1 == std::string::npos) return nan;
    ys.push_back(std::strtod(svg.c_str() + y1 + 4, nullptr));
  }
  std::vector<double> ticks;
  for (size_t at = svg.find("class=\"ytick\""); at != std::string::npos && ticks.size() < 2;
       at = svg.find("class=\"ytick\"", at + 1)) {
    const size_t gt = svg.find('>', at);
    ticks.push_back(std::strtod(svg.c_str() + gt + 1, nullptr));
  }
  if (ys.size() < 2 || ticks.size() < 2 || ticks[0] != 0.0 || ys[0] == ys[1]) return nan;
  return (ys[0] - y) / (ys[0] - ys[1]) * ticks[1];
}

// ---------------------------------------------------------------------------------------------

TEST(PlotXmlChecker, RejectsBrokenDocuments) {
  EXPECT_EQ(XmlProblem("<svg a=\"1\"><g><line x=\"1\"/></g><text>a &amp; b</text></svg>\n"), "");
  EXPECT_NE(XmlProblem("<svg><g></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><g>"), "");
  EXPECT_NE(XmlProblem("<svg a=1></svg>"), "");
  EXPECT_NE(XmlProblem("<svg a=\"1\" a=\"2\"></svg>"), "");
  EXPECT_NE(XmlProblem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(XmlProblem("<svg></svg><svg></svg>"), "");
  EXPECT_NE(XmlProblem("<svg a=\"<\"></svg>"), "");
}

TEST(Plot, TwoAllReducePerfDocuments) {
  const std::string perf = std::string(BENCH_DIR) + "/all_reduce_perf";
  ASSERT_TRUE(std::filesystem::exists(perf)) << perf;
  ASSERT_TRUE(std::filesystem::exists(CHORUS_PLOT_PATH)) << CHORUS_PLOT_PATH;
  const std::string a = Temp("auto.json"), b = Temp("naive.json"), svgPath = Temp("busbw.svg");
  const std::string sweep = " -T 120 -t 2 -b 8 -e 32K -f 8 -n 2 -w 1 -J ";
  Ran r = Shell("env -u CHORUS_ALGO -u CHORUS_PROTO " + perf + sweep + a + " --intra-bw 5");
  ASSERT_EQ(r.status, 0) << r.out;
  r = Shell("env -u CHORUS_PROTO CHORUS_ALGO=naive " + perf + sweep + b);
  ASSERT_EQ(r.status, 0) << r.out;

  r = Plot(a + " " + b + " --label 'auto <2 ranks>' -o " + svgPath + " --title 'Naive & auto'");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string svg = ReadFile(svgPath);
  ASSERT_FALSE(svg.empty());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 200);
  EXPECT_EQ(XmlProblem(svg), "") << svg;
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);

  // One line per input, each through every size (8, 64, 512, 4K, 32K).
  const auto lines = Polylines(svg);
  ASSERT_EQ(lines.size(), 2u) << svg;
  for (const auto& line : lines) {
    ASSERT_EQ(line.size(), 5u) << svg;
    for (size_t k = 1; k < line.size(); ++k) {
      EXPECT_GT(line[k].first, line[k - 1].first);  // x grows with size
      // Three octaves per step on a log axis: equal distances.
      EXPECT_NEAR(line[k].first - line[k - 1].first, line[1].first - line[0].first, 0.15);
    }
  }

  const auto texts = Texts(svg);
  EXPECT_TRUE(HasText(texts, "Naive & auto")) << svg;
  EXPECT_TRUE(HasTextContaining(texts, "Message size")) << svg;
  EXPECT_TRUE(HasTextContaining(texts, "Bus bandwidth (GB/s")) << svg;
  for (const char* size : {"8B", "16B", "64B", "512B", "1K", "4K", "32K"}) {
    EXPECT_TRUE(HasText(texts, size)) << size << "\n" << svg;
  }
  EXPECT_TRUE(HasText(texts, "0")) << svg;  // the y axis starts at 0 GB/s
  EXPECT_GE(Count(svg, "class=\"ytick\""), 3u) << svg;
  // Legend: the --label of the first file, "algorithm/protocol" of the second (every row of
  // the forced run is naive/simple), and the ideal of the first (--intra-bw 5).
  EXPECT_TRUE(HasText(texts, "auto <2 ranks>")) << svg;
  EXPECT_TRUE(HasText(texts, "naive/simple")) << svg;
  EXPECT_TRUE(HasTextContaining(texts, "ideal")) << svg;
  EXPECT_TRUE(HasTextContaining(texts, "(5 GB/s)")) << svg;
  // The ideal is a dashed path, and the y axis reaches it: a tick at 5 or above.
  EXPECT_EQ(Count(svg, "<path class=\"ideal\""), 1u) << svg;
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  EXPECT_TRUE(HasText(texts, "5") || HasText(texts, "6")) << svg;

  // Without an ideal in any input: no dashed path; default title names the collective.
  r = Plot(b + " -o " + svgPath);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string one = ReadFile(svgPath);
  EXPECT_EQ(XmlProblem(one), "") << one;
  EXPECT_EQ(Count(one, "<polyline"), 1u) << one;
  EXPECT_EQ(Count(one, "class=\"ideal\""), 0u) << one;
  EXPECT_EQ(one.find("stroke-dasharray"), std::string::npos) << one;
  EXPECT_TRUE(HasText(Texts(one), "all_reduce_perf: bus bandwidth, 2 ranks")) << one;

  std::filesystem::remove(a);
  std::filesystem::remove(b);
  std::filesystem::remove(svgPath);
}

// A hand-written document: known values, so the mapping from data to pixels can be checked.
const char* const kDoc = R"({
  "collective": "broadcast_perf",
  "config": {"nranks": 3},
  "results": [
    {"size": 1024, "type": "float", "redop": "none", "root": 0,
     "out_of_place": {"bus_bw": 1.0}, "in_place": {"bus_bw": 4.0},
     "algorithm": "chain", "protocol": "simple", "nchannels": 1},
    {"size": 4096, "type": "float", "redop": "none", "root": 0,
     "out_of_place": {"bus_bw": 2.0}, "in_place": {"bus_bw": 8.0},
     "algorithm": "chain", "protocol": "simple", "nchannels": 1},
    {"size": 4096, "type": "float", "redop": "none", "root": 0,
     "out_of_place": {"bus_bw": 4.0}, "in_place": {"bus_bw": 8.0},
     "algorithm": "chain", "protocol": "simple", "nchannels": 1},
    {"size": 4096, "type": "int8", "redop": "none", "root": 0,
     "out_of_place": {"bus_bw": 100.0}, "in_place": {"bus_bw": 100.0},
     "algorithm": "tree", "protocol": "ll", "nchannels": 1}
  ]
})";

TEST(Plot, HandWrittenDocumentMapsTheData) {
  const std::string doc = Temp("hand.json"), svgPath = Temp("hand.svg");
  WriteFile(doc, kDoc);
  Ran r = Plot(doc + " -o " + svgPath);
  ASSERT_EQ(r.status, 0) << r.out;
  // The int8 row is another (type, redop, root): left out, with a warning.
  EXPECT_NE(r.out.find("left out"), std::string::npos) << r.out;
  std::string svg = ReadFile(svgPath);
  EXPECT_EQ(XmlProblem(svg), "") << svg;
  auto lines = Polylines(svg);
  ASSERT_EQ(lines.size(), 1u) << svg;
  ASSERT_EQ(lines[0].size(), 2u) << svg;  // 1K, and 4K (two rows: their median)
  // Out of place: 1 GB/s, then the median of the two 4K rows, (2 + 4) / 2 = 3 GB/s.
  EXPECT_NEAR(GbsAt(svg, lines[0][0].second), 1.0, 0.02) << svg;
  EXPECT_NEAR(GbsAt(svg, lines[0][1].second), 3.0, 0.02) << svg;
  const auto texts = Texts(svg);
  EXPECT_TRUE(HasText(texts, "chain/simple")) << svg;  // every plotted row's choice
  EXPECT_TRUE(HasText(texts, "broadcast_perf: bus bandwidth, 3 ranks")) << svg;
  EXPECT_TRUE(HasText(texts, "1K") && HasText(texts, "4K")) << svg;
  EXPECT_FALSE(HasText(texts, "100")) << svg;  // the int8 row did not set the y range

  r = Plot("--placement in " + doc + " -o " + svgPath);
  ASSERT_EQ(r.status, 0) << r.out;
  svg = ReadFile(svgPath);
  lines = Polylines(svg);
  ASSERT_EQ(lines.size(), 1u) << svg;
  ASSERT_EQ(lines[0].size(), 2u) << svg;
  EXPECT_TRUE(HasTextContaining(Texts(svg), "in-place")) << svg;
  EXPECT_NEAR(GbsAt(svg, lines[0][0].second), 4.0, 0.02) << svg;
  EXPECT_NEAR(GbsAt(svg, lines[0][1].second), 8.0, 0.02) << svg;

  // Two files with the same automatic label get their file names added.
  r = Plot(doc + " " + doc + " -o " + svgPath);
  ASSERT_EQ(r.status, 0) << r.out;
  svg = ReadFile(svgPath);
  EXPECT_EQ(Count(svg, "<polyline"), 2u);
  EXPECT_TRUE(HasTextContaining(Texts(svg), "chain/simple (")) << svg;
  std::filesystem::remove(doc);
  std::filesystem::remove(svgPath);
}

// Repeated runs joined by commas make one line through the per-size medians.
TEST(Plot, CommaJoinedRunsPlotTheMedian) {
  auto doc = [](double at1K, double at4K) {
    char buf[1024];
    std::snprintf(buf, sizeof buf,
                  R"({"collective": "all_reduce_perf", "config": {"nranks": 2}, "results": [
                     {"size": 1024, "type": "float", "redop": "sum", "root": -1,
                      "out_of_place": {"bus_bw": %g}, "in_place": {"bus_bw": 0},
                      "algorithm": "ring", "protocol": "simple"},
                     {"size": 4096, "type": "float", "redop": "sum", "root": -1,
                      "out_of_place": {"bus_bw": %g}, "in_place": {"bus_bw": 0},
                      "algorithm": "ring", "protocol": "ll"}]})",
                  at1K, at4K);
    return std::string(buf);
  };
  const std::string a = Temp("run1.json"), b = Temp("run2.json"), c = Temp("run3.json");
  const std::string svgPath = Temp("median.svg");
  WriteFile(a, doc(1, 10));
  WriteFile(b, doc(3, 2));
  WriteFile(c, doc(2, 4));
  const Ran r = Plot(a + "," + b + "," + c + " " + a + " -o " + svgPath);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string svg = ReadFile(svgPath);
  EXPECT_EQ(XmlProblem(svg), "") << svg;
  const auto lines = Polylines(svg);
  ASSERT_EQ(lines.size(), 2u) << svg;
  ASSERT_EQ(lines[0].size(), 2u) << svg;
  EXPECT_NEAR(GbsAt(svg, lines[0][0].second), 2.0, 0.02) << svg;   // median of 1, 3, 2
  EXPECT_NEAR(GbsAt(svg, lines[0][1].second), 4.0, 0.02) << svg;   // median of 10, 2, 4
  EXPECT_NEAR(GbsAt(svg, lines[1][1].second), 10.0, 0.05) << svg;  // the single run
  // Rows differ in protocol: the label is the file name, and says it is a median.
  const auto texts = Texts(svg);
  EXPECT_TRUE(HasTextContaining(texts, "median of 3 runs")) << svg;
  EXPECT_TRUE(HasText(texts, std::filesystem::path(a).filename().string())) << svg;
  for (const std::string& f : {a, b, c, svgPath}) std::filesystem::remove(f);
}

TEST(Plot, BadInputsFail) {
  const std::string bad = Temp("bad.json"), empty = Temp("empty.json"), out = Temp("bad.svg");
  WriteFile(bad, "{\"results\": [ {\"size\": 8, ");
  WriteFile(empty, "{\"results\": []}");
  Ran r = Plot(bad + " -o " + out);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("not valid JSON"), std::string::npos) << r.out;
  r = Plot(empty + " -o " + out);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("no results"), std::string::npos) << r.out;
  r = Plot(Temp("does-not-exist.json") + " -o " + out);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(Plot("-o " + out).status, 2);
  EXPECT_EQ(Plot("--placement sideways " + empty).status, 2);
  EXPECT_EQ(Plot("--no-such-flag " + empty).status, 2);
  EXPECT_EQ(Plot("--label a --label b " + empty).status, 2);
  std::filesystem::remove(bad);
  std::filesystem::remove(empty);
  std::filesystem::remove(out);
}

}  // namespace
