// chorus-plot: bus bandwidth against message size, as an SVG line chart, from the -J documents of
// the Chorus benchmark tools (tools/bench). One line per input file, the ideal busbw (when the
// document has one: --intra-bw / --inter-bw / --calibrate) as a dashed line, a log-2 size axis
// (8B, 1K, 1M, ...), a linear GB/s axis, a legend. An argument "r1.json,r2.json,r3.json" (repeated
// runs) draws one line through the per-size medians. No dependencies beyond the standard library:
// the JSON reader below is enough for the harness's own documents (and for any valid JSON).
//
//   chorus-plot a.json [b.json ...] -o busbw.svg [--title T] [--placement out|in] [--label L]...
#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

// ---------------------------------------------------------------------------------------------
// A small JSON reader.

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = kNull;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<Json> items;                            // kArray
  // kObject, in document order: keys[i] names values[i] (two vectors, not pairs: a pair needs
  // Json complete, a vector does not).
  std::vector<std::string> keys;
  std::vector<Json> values;

  // The member named `key` of an object, or nullptr.
  const Json* get(const std::string& key) const;
  const Json* getNumber(const std::string& key) const {
    const Json* v = get(key);
    return v != nullptr && v->kind == kNumber ? v : nullptr;
  }
  std::string getString(const std::string& key) const {
    const Json* v = get(key);
    return v != nullptr && v->kind == kString ? v->string : std::string();
  }
};

const Json* Json::get(const std::string& key) const {
  if (kind != kObject) return nullptr;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return &values[i];
  }
  return nullptr;
}

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  // Parses the whole text into *out; on failure fills *error ("line L: what").
  bool parse(Json* out, std::string* error) {
    if (value(out, 0)) {
      space();
      if (i_ == s_.size()) return true;
      fail("unexpected text after the document");
    }
    size_t line = 1;
    for (size_t k = 0; k < std::min(errorAt_, s_.size()); ++k) line += s_[k] == '\n' ? 1 : 0;
    *error = "line " + std::to_string(line) + ": " + error_;
    return false;
  }

 private:
  static constexpr int kMaxDepth = 256;

  bool fail(const std::string& what) {
    if (error_.empty()) {
      error_ = what;
      errorAt_ = i_;
    }
    return false;
  }
  void space() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
      ++i_;
    }
  }
  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool literal(const char* word) {
    const size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }
  static void appendUtf8(unsigned cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xc0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xe0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      *out += static_cast<char>(0xf0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  bool hex4(unsigned* out) {
    if (i_ + 4 > s_.size()) return fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        return fail("bad \\u escape");
      }
    }
    *out = v;
    return true;
  }
  bool string(std::string* out) {
    if (!eat('"')) return fail("expected a string");
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in a string");
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          *out += e;
          break;
        case 'b':
          *out += '\b';
          break;
        case 'f':
          *out += '\f';
          break;
        case 'n':
          *out += '\n';
          break;
        case 'r':
          *out += '\r';
          break;
        case 't':
          *out += '\t';
          break;
        case 'u': {
          unsigned cp = 0;
          if (!hex4(&cp)) return false;
          if (cp >= 0xd800 && cp < 0xdc00 && s_.compare(i_, 2, "\\u") == 0) {
            i_ += 2;
            unsigned lo = 0;
            if (!hex4(&lo)) return false;
            if (lo < 0xdc00 || lo >= 0xe000) return fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          appendUtf8(cp, out);
          break;
        }
        default:
          return fail("bad escape in a string");
      }
    }
    return fail("unterminated string");
  }
  bool value(Json* v, int depth) {
    if (depth > kMaxDepth) return fail("nested too deeply");
    space();
    if (i_ >= s_.size()) return fail("unexpected end of the document");
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      v->kind = Json::kObject;
      if (eat('}')) return true;
      do {
        space();
        std::string key;
        if (!string(&key)) return false;
        if (!eat(':')) return fail("expected ':'");
        v->keys.push_back(std::move(key));
        v->values.emplace_back();
        if (!value(&v->values.back(), depth + 1)) return false;
      } while (eat(','));
      return eat('}') || fail("expected ',' or '}'");
    }
    if (c == '[') {
      ++i_;
      v->kind = Json::kArray;
      if (eat(']')) return true;
      do {
        v->items.emplace_back();
        if (!value(&v->items.back(), depth + 1)) return false;
      } while (eat(','));
      return eat(']') || fail("expected ',' or ']'");
    }
    if (c == '"') {
      v->kind = Json::kString;
      return string(&v->string);
    }
    if (literal("true")) {
      v->kind = Json::kBool;
      v->boolean = true;
      return true;
    }
    if (literal("false")) {
      v->kind = Json::kBool;
      return true;
    }
    if (literal("null")) return true;
    if (c == '-' || (c >= '0' && c <= '9')) {
      const char* begin = s_.c_str() + i_;
      char* end = nullptr;
      errno = 0;
      v->number = std::strtod(begin, &end);
      if (end == begin) return fail("bad number");
      v->kind = Json::kNumber;
      i_ += static_cast<size_t>(end - begin);
      return true;
    }
    return fail(std::string("unexpected character '") + c + "'");
  }

  const std::string& s_;
  size_t i_ = 0;
  std::string error_;
  size_t errorAt_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The data: one series per input file.

struct Point {
  double size = 0.0;   // bytes
  double busBw = 0.0;  // GB/s
  double ideal = 0.0;  // GB/s, 0: unknown
};

struct Series {
  std::string file;
  std::string label;
  std::string collective;
  int nranks = 0;             // config.nranks, 0: unknown
  std::string choice;         // "algorithm/protocol" when every plotted row shares one, else ""
  std::vector<Point> points;  // by size
  bool hasIdeal = false;
  int runs = 1;  // documents behind the series (medians when more than one)
};

std::string baseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string describeKey(const Json& row) {
  std::string key = row.getString("type") + " " + row.getString("redop");
  const Json* root = row.getNumber("root");
  if (root != nullptr && root->number >= 0) key += " root " + std::to_string(int(root->number));
  return key;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Per size: every busbw and ideal value seen (several -N cycles, several runs).
struct Samples {
  std::vector<double> busBw;
  std::vector<double> ideal;
};

// Reads one -J document into *bySize. Rows of another (type, redop, root) than the first row's
// are left out (with a warning); sizes 0 are skipped (no place on a log axis).
bool loadDocument(const std::string& path, const std::string& placement, Series* s,
                  std::map<double, Samples>* bySize, bool* firstChoice, bool* sameChoice,
                  std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  Json doc;
  std::string why;
  if (!JsonReader(text).parse(&doc, &why)) {
    *error = path + ": not valid JSON: " + why;
    return false;
  }
  const Json* results = doc.get("results");
  if (doc.kind != Json::kObject || results == nullptr || results->kind != Json::kArray) {
    *error = path + ": no \"results\" array (is it a chorus benchmark -J document?)";
    return false;
  }
  const std::string collective = doc.getString("collective");
  const Json* config = doc.get("config");
  const Json* nranksJ = config != nullptr ? config->getNumber("nranks") : nullptr;
  const int nranks = nranksJ != nullptr ? static_cast<int>(nranksJ->number) : 0;
  if (s->file.empty()) {
    s->file = path;
    s->collective = collective;
    s->nranks = nranks;
  } else {  // a further run of the same series: differences make the title generic
    if (collective != s->collective) s->collective.clear();
    if (nranks != s->nranks) s->nranks = 0;
  }
  const std::string key = placement == "in" ? "in_place" : "out_of_place";
  std::string selected;
  std::map<std::string, int> skipped;
  for (const Json& row : results->items) {
    const Json* size = row.getNumber("size");
    const Json* p = row.get(key);
    const Json* bw = p != nullptr ? p->getNumber("bus_bw") : nullptr;
    if (size == nullptr || bw == nullptr) {
      *error = path + ": a result without \"size\" or \"" + key + ".bus_bw\"";
      return false;
    }
    const std::string k = describeKey(row);
    if (selected.empty()) selected = k;
    if (k != selected) {
      ++skipped[k];
      continue;
    }
    if (!(size->number > 0.0)) continue;
    const std::string choice = row.getString("algorithm") + "/" + row.getString("protocol");
    if (*firstChoice) {
      s->choice = choice;
      *firstChoice = false;
    } else if (choice != s->choice) {
      *sameChoice = false;
    }
    Samples& smp = (*bySize)[size->number];
    smp.busBw.push_back(bw->number);
    const Json* ideal = row.getNumber("ideal");
    if (ideal != nullptr && ideal->number > 0.0) smp.ideal.push_back(ideal->number);
  }
  for (const auto& [k, n] : skipped) {
    std::fprintf(stderr, "chorus-plot: %s: plotting %s only; %d rows of %s left out\n",
                 path.c_str(), selected.c_str(), n, k.c_str());
  }
  return true;
}

// One series from one or more documents (repeated runs): per size, the median of every busbw
// (and ideal) value found, whether from several -N cycles or several files.
bool loadSeries(const std::vector<std::string>& paths, const std::string& placement, Series* s,
                std::string* error) {
  std::map<double, Samples> bySize;
  bool firstChoice = true, sameChoice = true;
  for (const std::string& path : paths) {
    if (!loadDocument(path, placement, s, &bySize, &firstChoice, &sameChoice, error)) return false;
  }
  s->runs = static_cast<int>(paths.size());
  if (bySize.empty()) {
    *error = paths.front() + ": no results with a size above 0 to plot";
    return false;
  }
  s->hasIdeal = true;
  for (const auto& [size, smp] : bySize) {
    Point pt;
    pt.size = size;
    pt.busBw = median(smp.busBw);
    if (smp.ideal.empty()) {
      s->hasIdeal = false;
    } else {
      pt.ideal = median(smp.ideal);
    }
    s->points.push_back(pt);
  }
  if (!sameChoice || s->choice.empty() || s->choice.front() == '/' || s->choice.back() == '/') {
    s->choice.clear();
  }
  return true;
}

// "a.json,b.json,c.json" -> its files (a name that exists as it is stays whole).
std::vector<std::string> splitRuns(const std::string& arg) {
  std::ifstream whole(arg);
  if (whole.good() || arg.find(',') == std::string::npos) return {arg};
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = arg.find(',', start);
    const std::string part = arg.substr(start, comma == std::string::npos ? comma : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out.empty() ? std::vector<std::string>{arg} : out;
}

// ---------------------------------------------------------------------------------------------
// Axes.

// "8B", "512B", "1K", "32K", "1M", "1G": binary units, as the tools' -b / -e take them.
std::string sizeLabel(double bytes) {
  static const char* kUnits[] = {"B", "K", "M", "G", "T", "P"};
  int u = 0;
  while (bytes >= 1024.0 && u < 5) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  if (std::fabs(bytes - std::round(bytes)) < 1e-9) {
    std::snprintf(buf, sizeof buf, "%.0f%s", bytes, kUnits[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g%s", bytes, kUnits[u]);
  }
  return buf;
}

// A step of 1, 2, 2.5 or 5 times a power of ten giving at most maxTicks intervals over [0, top].
double niceStep(double top, int maxTicks) {
  const double raw = top / maxTicks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10.0 * mag;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tickLabel(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::fabs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

std::string xmlEscape(const std::string& s) {
  std::string r;
  for (const char c : s) {
    switch (c) {
      case '&':
        r += "&amp;";
        break;
      case '<':
        r += "&lt;";
        break;
      case '>':
        r += "&gt;";
        break;
      case '"':
        r += "&quot;";
        break;
      case '\'':
        r += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t') r += c;
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// The chart.

struct Chart {
  std::string title;
  std::string placement;  // "out" or "in"
  std::vector<Series> series;
};

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr int kNumColors = sizeof kColors / sizeof kColors[0];

// The legend's entries: one per series, one per distinct ideal curve.
struct LegendEntry {
  std::string text;
  int color;
  bool dashed;
};

std::string renderSvg(const Chart& c) {
  // Ideal curves (dashed), one per distinct curve, in the colour of the first series that has it.
  struct IdealLine {
    std::vector<std::pair<double, double>> pts;
    int color;
    std::vector<std::string> labels;
  };
  std::vector<IdealLine> ideals;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    if (!s.hasIdeal) continue;
    std::vector<std::pair<double, double>> pts;
    for (const Point& p : s.points) pts.emplace_back(p.size, p.ideal);
    auto same = std::find_if(ideals.begin(), ideals.end(),
                             [&](const IdealLine& l) { return l.pts == pts; });
    if (same != ideals.end()) {
      same->labels.push_back(s.label);
    } else {
      ideals.push_back(IdealLine{pts, static_cast<int>(i % kNumColors), {s.label}});
    }
  }
  std::vector<LegendEntry> entries;
  for (size_t i = 0; i < c.series.size(); ++i) {
    entries.push_back({c.series[i].label, static_cast<int>(i % kNumColors), false});
  }
  for (const IdealLine& l : ideals) {
    std::string text = "ideal";
    if (c.series.size() > 1) {
      for (size_t k = 0; k < l.labels.size(); ++k) text += (k == 0 ? ": " : ", ") + l.labels[k];
    }
    if (std::all_of(l.pts.begin(), l.pts.end(),
                    [&](const auto& p) { return p.second == l.pts.front().second; })) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " (%.3g GB/s)", l.pts.front().second);
      text += buf;
    }
    entries.push_back({text, l.color, true});
  }
  size_t longest = 0;
  for (const LegendEntry& e : entries) longest = std::max(longest, e.text.size());
  // The legend sits right of the plot, so that it never hides a line.
  const double legendW = 46 + 7.0 * static_cast<double>(longest);

  const double plotW = 700, plotH = 400;
  const double left = 84, top = 56, bottom = 76;
  const double width = left + plotW + 24 + legendW + 16, height = top + plotH + bottom;

  // x: log2 of the size; y: GB/s from 0.
  double xmin = 1e300, xmax = -1e300, ymax = 0.0;
  for (const Series& s : c.series) {
    for (const Point& p : s.points) {
      xmin = std::min(xmin, std::log2(p.size));
      xmax = std::max(xmax, std::log2(p.size));
      ymax = std::max(ymax, p.busBw);
      if (s.hasIdeal) ymax = std::max(ymax, p.ideal);
    }
  }
  xmin = std::floor(xmin);
  xmax = std::ceil(xmax);
  if (xmax - xmin < 1.0) {
    xmin -= 1.0;
    xmax += 1.0;
  }
  if (!(ymax > 0.0)) ymax = 1.0;
  const double yStep = niceStep(ymax * 1.05, 8);
  const double yTop = std::ceil(ymax * 1.05 / yStep) * yStep;
  auto X = [&](double size) { return left + (std::log2(size) - xmin) / (xmax - xmin) * plotW; };
  auto Y = [&](double gbs) { return top + plotH - gbs / yTop * plotH; };

  std::string o;
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(width) + "\" height=\"" +
       number(height) + "\" viewBox=\"0 0 " + number(width) + " " + number(height) +
       "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  o += "<rect x=\"0\" y=\"0\" width=\"" + number(width) + "\" height=\"" + number(height) +
       "\" fill=\"white\"/>\n";
  o += "<text class=\"title\" x=\"" + number(width / 2) +
       "\" y=\"30\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">" +
       xmlEscape(c.title) + "</text>\n";

  // Grid and ticks. y: every step; x: a tick mark every octave, a label (and a grid line) every
  // 1, 2, 5, 10 or 20 octaves from the smallest size, so that a sweep of -b 8 -f 4 gets a label
  // at each of its sizes.
  o += "<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">\n";
  for (double v = 0.0; v <= yTop * (1 + 1e-9); v += yStep) {
    o += "<line x1=\"" + number(left) + "\" y1=\"" + number(Y(v)) + "\" x2=\"" +
         number(left + plotW) + "\" y2=\"" + number(Y(v)) + "\"/>\n";
  }
  const double octaves = xmax - xmin;
  int xStep = 1;
  for (const int st : {1, 2, 5, 10, 20}) {
    xStep = st;
    if (octaves / st <= 12) break;
  }
  std::vector<int> labelled;
  for (int k = static_cast<int>(xmin); k <= static_cast<int>(xmax); ++k) {
    if ((k - static_cast<int>(xmin)) % xStep == 0) labelled.push_back(k);
  }
  for (const int k : labelled) {
    const double x = X(std::ldexp(1.0, k));
    o += "<line x1=\"" + number(x) + "\" y1=\"" + number(top) + "\" x2=\"" + number(x) +
         "\" y2=\"" + number(top + plotH) + "\"/>\n";
  }
  o += "</g>\n";

  o += "<g class=\"axes\" stroke=\"#333\" stroke-width=\"1\">\n";
  o += "<line x1=\"" + number(left) + "\" y1=\"" + number(top + plotH) + "\" x2=\"" +
       number(left + plotW) + "\" y2=\"" + number(top + plotH) + "\"/>\n";
  o += "<line x1=\"" + number(left) + "\" y1=\"" + number(top) + "\" x2=\"" + number(left) +
       "\" y2=\"" + number(top + plotH) + "\"/>\n";
  for (int k = static_cast<int>(xmin); k <= static_cast<int>(xmax); ++k) {
    const double x = X(std::ldexp(1.0, k));
    const bool major = (k - static_cast<int>(xmin)) % xStep == 0;
    o += "<line x1=\"" + number(x) + "\" y1=\"" + number(top + plotH) + "\" x2=\"" + number(x) +
         "\" y2=\"" + number(top + plotH + (major ? 6 : 3)) + "\"/>\n";
  }
  for (double v = 0.0; v <= yTop * (1 + 1e-9); v += yStep) {
    o += "<line x1=\"" + number(left - 5) + "\" y1=\"" + number(Y(v)) + "\" x2=\"" + number(left) +
         "\" y2=\"" + number(Y(v)) + "\"/>\n";
  }
  o += "</g>\n";

  o += "<g class=\"tick-labels\" fill=\"#333\">\n";
  for (const int k : labelled) {
    o += "<text class=\"xtick\" x=\"" + number(X(std::ldexp(1.0, k))) + "\" y=\"" +
         number(top + plotH + 20) + "\" text-anchor=\"middle\">" + sizeLabel(std::ldexp(1.0, k)) +
         "</text>\n";
  }
  for (double v = 0.0; v <= yTop * (1 + 1e-9); v += yStep) {
    o += "<text class=\"ytick\" x=\"" + number(left - 9) + "\" y=\"" + number(Y(v) + 4) +
         "\" text-anchor=\"end\">" + tickLabel(v) + "</text>\n";
  }
  o += "</g>\n";
  o += "<text class=\"xlabel\" x=\"" + number(left + plotW / 2) + "\" y=\"" + number(height - 22) +
       "\" text-anchor=\"middle\" font-size=\"14\">Message size (bytes, " + "log scale)</text>\n";
  o += "<text class=\"ylabel\" transform=\"translate(22," + number(top + plotH / 2) +
       ") rotate(-90)\" text-anchor=\"middle\" font-size=\"14\">Bus bandwidth (GB/s, " +
       std::string(c.placement == "in" ? "in-place" : "out-of-place") + ")</text>\n";

  for (const IdealLine& l : ideals) {
    std::string d;
    for (const auto& [size, gbs] : l.pts) {
      d += (d.empty() ? "M" : " L") + number(X(size)) + " " + number(Y(gbs));
    }
    o += "<path class=\"ideal\" d=\"" + d + "\" fill=\"none\" stroke=\"" + kColors[l.color] +
         "\" stroke-width=\"1.5\" stroke-dasharray=\"7 5\" opacity=\"0.8\"/>\n";
  }

  // The measured series.
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const char* color = kColors[i % kNumColors];
    std::string pts;
    for (const Point& p : s.points) {
      if (!pts.empty()) pts += ' ';
      pts += number(X(p.size)) + "," + number(Y(p.busBw));
    }
    o += "<g class=\"series\">\n<title>" + xmlEscape(s.label + " (" + baseName(s.file) + ")") +
         "</title>\n";
    o += "<polyline fill=\"none\" stroke=\"" + std::string(color) +
         "\" stroke-width=\"2\" stroke-linejoin=\"round\" points=\"" + pts + "\"/>\n";
    for (const Point& p : s.points) {
      o += "<circle cx=\"" + number(X(p.size)) + "\" cy=\"" + number(Y(p.busBw)) +
           "\" r=\"2.8\" fill=\"" + color + "\"/>\n";
    }
    o += "</g>\n";
  }

  // Legend, right of the plot.
  const double lineH = 18, lx = left + plotW + 24, ly = top;
  const double boxW = legendW;
  const double boxH = 10 + lineH * static_cast<double>(entries.size());
  o += "<g class=\"legend\">\n";
  o += "<rect x=\"" + number(lx) + "\" y=\"" + number(ly) + "\" width=\"" + number(boxW) +
       "\" height=\"" + number(boxH) +
       "\" fill=\"white\" fill-opacity=\"0.9\" stroke=\"#bbb\" stroke-width=\"1\"/>\n";
  for (size_t k = 0; k < entries.size(); ++k) {
    const LegendEntry& e = entries[k];
    const double y = ly + 5 + lineH * (static_cast<double>(k) + 0.5);
    o += "<line x1=\"" + number(lx + 8) + "\" y1=\"" + number(y) + "\" x2=\"" + number(lx + 34) +
         "\" y2=\"" + number(y) + "\" stroke=\"" + kColors[e.color] + "\" stroke-width=\"" +
         (e.dashed ? "1.5\" stroke-dasharray=\"7 5\"" : "2\"") + "/>\n";
    o += "<text x=\"" + number(lx + 40) + "\" y=\"" + number(y + 4) + "\">" + xmlEscape(e.text) +
         "</text>\n";
  }
  o += "</g>\n";
  o += "</svg>\n";
  return o;
}

void usage(FILE* out, const char* prog) {
  std::fprintf(out,
               "usage: %s a.json [b.json ...] [-o out.svg] [--title T] [--placement out|in]\n"
               "          [--label L]...\n"
               "Draws bus bandwidth against message size (SVG) from the -J documents of the\n"
               "Chorus benchmark tools: one line per argument, the ideal busbw dashed when known.\n"
               "An argument a1.json,a2.json,a3.json (repeated runs) is one line through the\n"
               "per-size medians; so are rows of one size within a file (-N cycles).\n"
               "  -o, --output FILE    the SVG to write (default: standard output)\n"
               "  -t, --title T        the chart's title (default: the collective)\n"
               "  -p, --placement P    out (out-of-place, default) or in (in-place) busbw\n"
               "  -l, --label L        the legend label of the next file (in order; default:\n"
               "                       \"algorithm/protocol\" when all its rows share one, else\n"
               "                       the file name)\n"
               "  -h, --help\n",
               prog);
}

}  // namespace

int main(int argc, char** argv) {
  static const struct option kLong[] = {
      {"output", required_argument, nullptr, 'o'},
      {"title", required_argument, nullptr, 't'},
      {"placement", required_argument, nullptr, 'p'},
      {"label", required_argument, nullptr, 'l'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  const char* prog = "chorus-plot";
  std::string output = "-";
  Chart chart;
  chart.placement = "out";
  bool haveTitle = false;
  std::vector<std::string> labels;
  for (;;) {
    const int opt = getopt_long(argc, argv, "o:t:p:l:h", kLong, nullptr);
    if (opt == -1) break;
    switch (opt) {
      case 'o':
        output = optarg;
        break;
      case 't':
        chart.title = optarg;
        haveTitle = true;
        break;
      case 'p':
        chart.placement = optarg;
        if (chart.placement == "out-of-place") chart.placement = "out";
        if (chart.placement == "in-place") chart.placement = "in";
        if (chart.placement != "out" && chart.placement != "in") {
          std::fprintf(stderr, "%s: --placement must be 'out' or 'in', not '%s'\n", prog, optarg);
          return 2;
        }
        break;
      case 'l':
        labels.push_back(optarg);
        break;
      case 'h':
        usage(stdout, prog);
        return 0;
      default:
        usage(stderr, prog);
        return 2;
    }
  }
  const std::vector<std::string> files(argv + optind, argv + argc);
  if (files.empty()) {
    std::fprintf(stderr, "%s: no input files\n", prog);
    usage(stderr, prog);
    return 2;
  }
  if (labels.size() > files.size()) {
    std::fprintf(stderr, "%s: %zu --label for %zu files\n", prog, labels.size(), files.size());
    return 2;
  }
  for (size_t i = 0; i < files.size(); ++i) {
    Series s;
    std::string error;
    if (!loadSeries(splitRuns(files[i]), chart.placement, &s, &error)) {
      std::fprintf(stderr, "%s: %s\n", prog, error.c_str());
      return 1;
    }
    if (i < labels.size()) {
      s.label = labels[i];
    } else if (!s.choice.empty()) {
      s.label = s.choice;
    } else {
      s.label = baseName(s.file);
    }
    chart.series.push_back(std::move(s));
  }
  // Labels that came out the same (two files with one algorithm each) get their file names.
  std::map<std::string, int> uses;
  for (const Series& s : chart.series) ++uses[s.label];
  for (size_t i = labels.size(); i < chart.series.size(); ++i) {
    Series& s = chart.series[i];
    if (uses[s.label] > 1 && s.label != baseName(s.file)) s.label += " (" + baseName(s.file) + ")";
    if (s.runs > 1) s.label += ", median of " + std::to_string(s.runs) + " runs";
  }
  if (!haveTitle) {
    std::string coll = chart.series.front().collective;
    int nranks = chart.series.front().nranks;
    for (const Series& s : chart.series) {
      if (s.collective != coll) coll.clear();
      if (s.nranks != nranks) nranks = 0;
    }
    chart.title = (coll.empty() ? std::string("Chorus") : coll) + ": bus bandwidth";
    if (nranks > 0) chart.title += ", " + std::to_string(nranks) + " ranks";
  }

  const std::string svg = renderSvg(chart);
  if (output == "-") {
    std::fwrite(svg.data(), 1, svg.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  FILE* f = std::fopen(output.c_str(), "wb");
  if (f == nullptr) {
    std::fprintf(stderr, "%s: cannot write %s: %s\n", prog, output.c_str(), std::strerror(errno));
    return 1;
  }
  const bool ok = std::fwrite(svg.data(), 1, svg.size(), f) == svg.size();
  if (std::fclose(f) != 0 || !ok) {
    std::fprintf(stderr, "%s: cannot write %s: %s\n", prog, output.c_str(), std::strerror(errno));
    return 1;
  }
  return 0;
}
