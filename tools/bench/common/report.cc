#include "report.h"

#include <cstdio>

#include "ideal.h"
#include "types.h"

namespace chorus_bench {

namespace {

// Row layout (nccl-tests): "%12li  %12li  %8s  %6s  %6s" then per placement "  %7s  %6s  %6s
// %6g". The header's placement groups are one column narrower than the rows' (" %6s" for
// "#wrong"), as nccl-tests prints them; the "out-of-place" / "in-place" titles sit centred
// (rounding right) over the row groups.
constexpr int kPrefixWidth = 12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6;
constexpr int kGroupWidth = 2 + 7 + 2 + 6 + 2 + 6 + 2 + 6;

std::string printf1(const char* fmt, const char* a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

void trimRight(std::string* s) {
  while (!s->empty() && s->back() == ' ') s->pop_back();
}

void placeCentered(std::string* line, int start, int width, const char* label) {
  const int len = static_cast<int>(std::string(label).size());
  const int at = start + (width - len + 1) / 2;
  line->replace(static_cast<size_t>(at), static_cast<size_t>(len), label);
}

std::string formatPlacement(const PlacementResult& p) {
  char buf[128];
  const std::string t = formatNumber(p.timeUs, 7);
  const std::string a = formatNumber(p.algBw, 6);
  const std::string b = formatNumber(p.busBw, 6);
  if (p.wrong < 0) {
    std::snprintf(buf, sizeof buf, "  %7s  %6s  %6s  %6s", t.c_str(), a.c_str(), b.c_str(), "N/A");
  } else {
    std::snprintf(buf, sizeof buf, "  %7s  %6s  %6s  %6g", t.c_str(), a.c_str(), b.c_str(),
                  static_cast<double>(p.wrong));
  }
  return buf;
}

std::string formatIterStats(const IterStats& s) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "  %7s  %7s  %7s  %7s", formatNumber(s.minUs, 7).c_str(),
                formatNumber(s.maxUs, 7).c_str(), formatNumber(s.p99Us, 7).c_str(),
                formatNumber(s.cvPercent, 7).c_str());
  return buf;
}

}  // namespace

std::string formatNumber(double v, int width) {
  char buf[64];
  for (int decimals = 2; decimals >= 0; --decimals) {
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    if (static_cast<int>(std::string(buf).size()) <= width) break;
  }
  return buf;
}

std::string formatHeader(const TableStyle& style) {
  const char* timeStr = style.cpuTime ? "cputime" : "time";
  std::string out;

  std::string titles(static_cast<size_t>(kPrefixWidth + 2 * kGroupWidth), ' ');
  titles[0] = '#';
  placeCentered(&titles, kPrefixWidth, kGroupWidth, "out-of-place");
  placeCentered(&titles, kPrefixWidth + kGroupWidth, kGroupWidth, "in-place");
  trimRight(&titles);
  out += titles + "\n";

  char buf[256];
  std::snprintf(buf, sizeof buf, "# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop",
                "root");
  std::string names = buf;
  std::snprintf(buf, sizeof buf, "# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  std::string units = buf;
  for (int g = 0; g < 2; ++g) {
    std::snprintf(buf, sizeof buf, "  %7s  %6s  %6s %6s", timeStr, "algbw", "busbw", "#wrong");
    names += buf;
    std::snprintf(buf, sizeof buf, "  %7s  %6s  %6s  %5s", "(us)", "(GB/s)", "(GB/s)", "");
    units += buf;
  }
  // Extra columns line up with the rows again (the nccl-tests groups above are one short each).
  if (style.perIter || style.ideal) {
    names += "  ";
    units += "  ";
  }
  if (style.perIter) {
    static const char* kNames[] = {"oop-min", "oop-max", "oop-p99", "oop-cv%",
                                   "ip-min",  "ip-max",  "ip-p99",  "ip-cv%"};
    for (int i = 0; i < 8; ++i) {
      names += printf1("  %7s", kNames[i]);
      units += printf1("  %7s", (i % 4) == 3 ? "" : "(us)");
    }
  }
  if (style.ideal) {
    names += printf1("  %6s", "ideal") + printf1("  %6s", "eff%");
    units += printf1("  %6s", "(GB/s)") + printf1("  %6s", "");
  }
  trimRight(&names);
  trimRight(&units);
  out += names + "\n" + units + "\n";
  return out;
}

std::string formatRow(const TableStyle& style, const RowResult& row) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%12li  %12li  %8s  %6s  %6i", static_cast<long>(row.bytes),
                static_cast<long>(row.count), typeName(row.type), opName(row.op), row.root);
  std::string out = buf;
  out += formatPlacement(row.outOfPlace);
  out += formatPlacement(row.inPlace);
  if (style.perIter) {
    out += formatIterStats(row.outOfPlace.iter);
    out += formatIterStats(row.inPlace.iter);
  }
  if (style.ideal) {
    if (row.ideal > 0.0) {
      std::snprintf(buf, sizeof buf, "  %6s  %6s", formatNumber(row.ideal, 6).c_str(),
                    formatNumber(rowEfficiency(row), 6).c_str());
    } else {
      std::snprintf(buf, sizeof buf, "  %6s  %6s", "N/A", "N/A");
    }
    out += buf;
  }
  out += "\n";
  return out;
}

double rowEfficiency(const RowResult& row) {
  return efficiencyPercent(0.5 * (row.outOfPlace.busBw + row.inPlace.busBw), row.ideal);
}

}  // namespace chorus_bench
