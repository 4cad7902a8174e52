// Tests of the nccl-tests-compatible benchmark tools (tools/bench): the ideal-bandwidth formula
// and the float16 / bfloat16 conversions the tools' checkers use (src/base/half.h), then the real
// binaries from BENCH_DIR: exit statuses, the table (nccl-tests' exact header, #wrong 0 on every
// row, N/A without checking), the JSON document, every collective's checker, and a two-process
// run through chorusrun. Every run is bounded by `timeout` and the tools' own -T.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../tools/bench/common/ideal.h"
#include "../tools/bench/common/json.h"
#include "base/half.h"
#include "run_command.h"

#ifndef BENCH_DIR
#error "BENCH_DIR must name the build directory holding the *_perf tools"
#endif
#ifndef CHORUSRUN_PATH
#error "CHORUSRUN_PATH must name the chorusrun binary"
#endif

namespace {

using chorus_bench::idealBusBw;

// ---------------------------------------------------------------------------------------------
// Running the tools.

struct RunResult {
  int status = -1;  // exit status, or -1 when it did not exit normally
  std::string out;  // stdout (stderr is folded in when asked)
};

std::string ToolPath(const std::string& tool) {
  return std::string(BENCH_DIR) + "/" + tool;
}

// Runs `command` through /bin/sh under a hard time limit (runCommand: the test's one launcher,
// which kills the whole process group at the limit). stdout only, unless the command folds
// stderr in (2>&1).
RunResult RunShell(const std::string& command) {
  RunResult r;
  const ctest::CommandResult c =
      ctest::runCommand({"/bin/sh", "-c", "{ " + command + "\n} 2>/dev/null"}, 180);
  r.out = c.output;
  r.status = c.timedOut ? -1 : c.exitCode;
  return r;
}

RunResult RunTool(const std::string& tool, const std::string& args, bool withStderr = false,
                  const std::string& env = "") {
  const std::string path = ToolPath(tool);
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is not built (build the *_perf targets before the tests)";
    return {};
  }
  return RunShell((env.empty() ? "" : "env " + env + " ") + path + " -T 120 " + args +
                  (withStderr ? " 2>&1" : " 2>/dev/null"));
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> f;
  std::istringstream in(line);
  for (std::string w; in >> w;) f.push_back(w);
  return f;
}

// The table's data rows (lines that are neither comments nor empty), as whitespace fields.
std::vector<std::vector<std::string>> DataRows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : Lines(out)) {
    if (line.empty() || line[0] == '#') continue;
    rows.push_back(Fields(line));
  }
  return rows;
}

// Columns of a data row: size count type redop root, then time algbw busbw #wrong for the
// out-of-place and the in-place runs.
constexpr size_t kOopWrong = 8;
constexpr size_t kIpWrong = 12;
constexpr size_t kNcclColumns = 13;

// Checks that the run succeeded and that every row was checked and right.
void ExpectAllRight(const RunResult& r, const std::string& what, bool inPlaceChecked = true) {
  EXPECT_EQ(r.status, 0) << what << "\n" << r.out;
  const auto rows = DataRows(r.out);
  EXPECT_FALSE(rows.empty()) << what << "\n" << r.out;
  for (const auto& row : rows) {
    ASSERT_GE(row.size(), kNcclColumns) << what;
    EXPECT_EQ(row[kOopWrong], "0") << what << ": size " << row[0] << " " << row[2] << " " << row[3];
    if (inPlaceChecked) {
      EXPECT_EQ(row[kIpWrong], "0")
          << what << ": size " << row[0] << " " << row[2] << " " << row[3];
    }
  }
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << what;
}

// ---------------------------------------------------------------------------------------------
// The -J document is read with nlohmann-json, the library that writes it (tools/bench/common/
// json.cc); at() throws (a test failure) where a key is missing.

using Json = nlohmann::json;

std::string TempPath(const std::string& name) {
  return testing::TempDir() + "chorus_bench_" + std::to_string(getpid()) + "_" + name;
}

// Reads and parses a -J document; fails the test when it is missing or malformed.
bool ReadJson(const std::string& path, Json* doc) {
  std::ifstream in(path);
  if (!in.good()) {
    ADD_FAILURE() << "no JSON document at " << path;
    return false;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  *doc = Json::parse(text, nullptr, false);
  if (doc->is_discarded() || !doc->is_object()) {
    ADD_FAILURE() << "malformed JSON in " << path << ":\n" << text;
    return false;
  }
  return true;
}

// The (algorithm, protocol, nchannels) of every result row of a -J document.
struct RowChoice {
  std::string algorithm, protocol;
  double nchannels = -1;
  bool predicted = false;  // has a positive predicted_time
  // predicted_time_in_place: positive, and the in-place ratio at most 5x either way
  bool predictedInPlace = false;
};

std::vector<RowChoice> Choices(const Json& doc) {
  std::vector<RowChoice> out;
  if (!doc.contains("results") || doc.at("results").is_array() == false) return out;
  for (const Json& r : doc.at("results")) {
    RowChoice c;
    if (r.contains("algorithm")) c.algorithm = r.at("algorithm").get<std::string>();
    if (r.contains("protocol")) c.protocol = r.at("protocol").get<std::string>();
    if (r.contains("nchannels")) c.nchannels = r.at("nchannels").get<double>();
    c.predicted = r.contains("predicted_time") && r.at("predicted_time").get<double>() > 0.0;
    if (c.predicted && r.contains("predicted_time_in_place")) {
      const double ratio =
          r.at("predicted_time_in_place").get<double>() / r.at("predicted_time").get<double>();
      c.predictedInPlace = ratio > 0.2 && ratio < 5.0;
    }
    out.push_back(c);
  }
  return out;
}

// The writer (buildJson) and the reader are one library: strings with quotes, backslashes, control
// characters and non-ASCII text come back byte for byte, \u escapes included, and invalid UTF-8
// becomes U+FFFD instead of breaking the document.
TEST(BenchJson, EscapesSurviveWriterAndReader) {
  chorus_bench::Options o;
  o.argv = {"all_reduce_perf", "-J", "caf\xc3\xa9 \"quoted\"\\path\t\x01\x7f", "bad\xff"};
  chorus_bench::RunInfo run;
  run.collective = "all_reduce_perf";
  run.version = "0.1.0";
  run.options = &o;
  run.env = {{"CHORUS_NOTE", "line1\nline2 \xe2\x82\xac \xf0\x9f\x8e\xb5"}};
  run.errors = {
      "rank 1: \x02"
      "bad\x1f"};
  chorus_bench::RowResult row;
  row.bytes = 8;
  row.count = 2;
  row.outOfPlace.timeUs = 1.25;
  row.outOfPlace.busBw = std::nan("");
  run.results.push_back(row);
  const std::string text = chorus_bench::buildJson(run);
  // Control characters are written as \u escapes (JSON requires it below 0x20).
  EXPECT_NE(text.find("\\u0001"), std::string::npos) << text;
  EXPECT_NE(text.find("\\u0002"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
  const Json doc = Json::parse(text, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << text;
  EXPECT_EQ(doc.at("args").at("argv").at(2).get<std::string>(), o.argv[2]);
  EXPECT_EQ(doc.at("args").at("argv").at(3).get<std::string>(), "bad\xef\xbf\xbd");
  EXPECT_EQ(doc.at("env").at("CHORUS_NOTE").get<std::string>(), run.env[0].second);
  EXPECT_EQ(doc.at("errors").at(0).get<std::string>(), run.errors[0]);
  EXPECT_TRUE(doc.at("results").at(0).at("out_of_place").at("bus_bw").is_null());  // NaN
  EXPECT_EQ(doc.at("results").at(0).at("out_of_place").at("time").get<double>(), 1.25);
  // nccl-tests' key order is kept.
  const std::vector<std::string> order = {"version",
                                          "library",
                                          "collective",
                                          "start_time",
                                          "args",
                                          "env",
                                          "config",
                                          "devices",
                                          "results",
                                          "out_of_bounds",
                                          "average_bus_bandwidth",
                                          "errors",
                                          "end_time"};
  size_t at = 0;
  for (const std::string& k : order) {
    const size_t next = text.find("\"" + k + "\":", at);
    ASSERT_NE(next, std::string::npos) << k << " out of order in\n" << text;
    at = next;
  }
  // \u escapes written by someone else (upper/lower case, a surrogate pair) read as UTF-8.
  const Json u = Json::parse(R"({"s": "caf\u00E9 \u20ac \ud83c\udfb5 \u0041"})");
  EXPECT_EQ(u.at("s").get<std::string>(), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x8e\xb5 A");
}

// ---------------------------------------------------------------------------------------------
// Header-only pieces.

TEST(BenchIdeal, SeedExample) {
  // The ideal-busbw model's worked example: B = 450, I = 100 GB/s, 8 ranks per node, 2 nodes:
  // min(187.5, 482.1) = 187.5.
  EXPECT_DOUBLE_EQ(idealBusBw(450, 100, 8, 2), 187.5);
}

TEST(BenchIdeal, SingleNodeIsIntraBandwidth) {
  EXPECT_DOUBLE_EQ(idealBusBw(450, 100, 8, 1), 450.0);
  EXPECT_DOUBLE_EQ(idealBusBw(12.5, 0, 2, 1), 12.5);
  EXPECT_DOUBLE_EQ(idealBusBw(450, 0, 1, 1), 450.0);
}

TEST(BenchIdeal, MultiNodeTerms) {
  // Intra-node bound: B * (N-1) / (N-Q) with N = 4, Q = 2: 10 * 3 / 2 = 15 < 100 * 3 * 2 / 4.
  EXPECT_DOUBLE_EQ(idealBusBw(10, 100, 2, 2), 15.0);
  // One rank per node: only the inter-node term, I * (N-1) * Q / (N * (Q-1)) = I.
  EXPECT_DOUBLE_EQ(idealBusBw(0, 25, 1, 4), 25.0);
  // Unknown inputs give 0.
  EXPECT_EQ(idealBusBw(450, 0, 8, 2), 0.0);
  EXPECT_EQ(idealBusBw(450, 100, 0, 1), 0.0);
  EXPECT_DOUBLE_EQ(chorus_bench::efficiencyPercent(93.75, 187.5), 50.0);
}

TEST(BenchFloatConv, HalfAndBfloat16RoundTripAndRoundToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = chorus::halfToFloat(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(chorus::floatToHalf(f), h) << std::hex << h;
    }
    const float g = chorus::bf16ToFloat(static_cast<uint16_t>(h));
    if (!std::isnan(g)) {
      ASSERT_EQ(chorus::floatToBf16(g), h) << std::hex << h;
    }
  }
  // Ties go to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 in half precision.
  EXPECT_EQ(chorus::floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(chorus::floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(chorus::floatToHalf(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(chorus::floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
}

// ---------------------------------------------------------------------------------------------
// all_reduce_perf.

TEST(BenchAllReduce, ChecksJsonAndTable) {
  const std::string json = TempPath("allreduce.json");
  const RunResult r = RunTool("all_reduce_perf", "-t 2 -b 8 -e 64K -f 4 -c 1 -J " + json);
  ExpectAllRight(r, "all_reduce_perf -t 2");

  // 8, 32, ..., 32768: seven sizes; count = size / 4 for float.
  const auto rows = DataRows(r.out);
  ASSERT_EQ(rows.size(), 7u) << r.out;
  EXPECT_EQ(rows.front()[0], "8");
  EXPECT_EQ(rows.front()[1], "2");
  EXPECT_EQ(rows.back()[0], "32768");
  for (const auto& row : rows) {
    EXPECT_EQ(row[2], "float");
    EXPECT_EQ(row[3], "sum");
    EXPECT_EQ(row[4], "-1");
  }

  // The preamble and the header are nccl-tests'.
  EXPECT_NE(r.out.find("# nThread 2 nGpus 1 minBytes 8 maxBytes 65536 step: 4(factor) warmup "
                       "iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("#  Rank  0 Group  0 Pid "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("#  Rank  1 Group  0 Pid "), std::string::npos) << r.out;
  EXPECT_NE(
      r.out.find(
          "#                                                              out-of-place          "
          "             in-place\n"
          "#       size         count      type   redop    root     time   algbw   busbw #wrong  "
          "   time   algbw   busbw #wrong\n"
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)         "
          "   (us)  (GB/s)  (GB/s)\n"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("# Avg bus bandwidth    : "), std::string::npos);
  EXPECT_NE(r.out.find("#\n# Collective test concluded: all_reduce_perf\n"), std::string::npos);

  // Row layout: "%12li  %12li  %8s  %6s  %6s" then "  %7s  %6s  %6s  %6g" twice.
  for (const std::string& line : Lines(r.out)) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_EQ(line.size(), 52u + 2 * 33u) << "'" << line << "'";
  }

  std::ifstream in(json);
  ASSERT_TRUE(in.good()) << json;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Json doc = Json::parse(text, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << text;
  ASSERT_TRUE(doc.is_object());
  for (const char* key : {"version", "start_time", "args", "env", "config", "devices", "results",
                          "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"}) {
    EXPECT_TRUE(doc.contains(key)) << key;
  }
  ASSERT_TRUE(doc.at("devices").is_array());
  EXPECT_EQ(doc.at("devices").size(), 2u);
  ASSERT_TRUE(doc.at("results").is_array());
  ASSERT_EQ(doc.at("results").size(), 7u);
  for (const Json& res : doc.at("results")) {
    for (const char* key : {"size", "count", "type", "redop", "root", "out_of_place", "in_place",
                            "algorithm", "protocol", "nchannels"}) {
      EXPECT_TRUE(res.contains(key)) << key;
    }
    for (const char* placement : {"out_of_place", "in_place"}) {
      const Json& p = res.at(placement);
      for (const char* key : {"time", "alg_bw", "bus_bw", "nwrong"}) {
        EXPECT_TRUE(p.contains(key)) << placement << "." << key;
      }
      EXPECT_TRUE(p.at("nwrong").is_number());
      EXPECT_EQ(p.at("nwrong").get<double>(), 0.0);
      EXPECT_GT(p.at("time").get<double>(), 0.0);
    }
  }
  EXPECT_EQ(doc.at("results").at(0).at("size").get<double>(), 8.0);
  EXPECT_EQ(doc.at("results").at(0).at("type").get<std::string>(), "float");
  EXPECT_EQ(doc.at("out_of_bounds").at("count").get<double>(), 0.0);
  EXPECT_TRUE(doc.at("out_of_bounds").at("okay").get<bool>());
  EXPECT_TRUE(doc.at("errors").is_array());
  EXPECT_TRUE(doc.at("errors").empty());
  std::filesystem::remove(json);
}

TEST(BenchAllReduce, EveryTypeAndOp) {
  const RunResult r =
      RunTool("all_reduce_perf", "-t 3 -b 8 -e 32K -f 8 -d all -o all -n 2 -w 1 -c 2");
  ExpectAllRight(r, "all_reduce_perf -t 3 -d all -o all");
  // 10 types x 5 ops x sizes 8, 64, ..., 32768.
  EXPECT_EQ(DataRows(r.out).size(), 10u * 5u * 5u) << r.out;
}

TEST(BenchAllReduce, NoCheckPrintsNA) {
  const RunResult r = RunTool("all_reduce_perf", "-t 2 -b 1K -e 4K -f 2 -c 0 -n 2");
  EXPECT_EQ(r.status, 0) << r.out;
  const auto rows = DataRows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  for (const auto& row : rows) {
    ASSERT_GE(row.size(), kNcclColumns);
    EXPECT_EQ(row[kOopWrong], "N/A");
    EXPECT_EQ(row[kIpWrong], "N/A");
  }
}

TEST(BenchAllReduce, BadFlagsExitNonZero) {
  EXPECT_NE(RunTool("all_reduce_perf", "--no-such-flag").status, 0);
  EXPECT_NE(RunTool("all_reduce_perf", "-b 1X").status, 0);
  EXPECT_NE(RunTool("all_reduce_perf", "-d float128").status, 0);
  EXPECT_NE(RunTool("all_reduce_perf", "-o xor").status, 0);
  EXPECT_NE(RunTool("all_reduce_perf", "-b 1M -e 1K").status, 0);
  EXPECT_NE(RunTool("all_reduce_perf", "-a 7").status, 0);
  const RunResult g = RunTool("all_reduce_perf", "-g 2", true);
  EXPECT_NE(g.status, 0);
  EXPECT_NE(g.out.find("-g/--ngpus"), std::string::npos) << g.out;
  const RunResult h = RunTool("all_reduce_perf", "-h");
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.out.find("--nthreads"), std::string::npos) << h.out;
}

TEST(BenchAllReduce, LongFlagsAggregationBlockingAndIdeal) {
  const RunResult r =
      RunTool("all_reduce_perf",
              "--nthreads 2 --minbytes 1K --maxbytes 16K --stepfactor 4 --iters 3 --warmup_iters 0 "
              "--agg_iters 3 --blocking 1 --average 3 --run_cycles 2 --per_iter_timing 1 "
              "--intra-bw 10");
  ExpectAllRight(r, "all_reduce_perf long flags");
  const auto rows = DataRows(r.out);
  ASSERT_EQ(rows.size(), 2u * 3u) << r.out;  // two cycles of 1K, 4K, 16K
  // 13 nccl-tests columns, 8 per-iteration columns, ideal and eff%.
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), kNcclColumns + 8 + 2) << r.out;
    EXPECT_EQ(row[kNcclColumns + 8], "10.00");
  }
  EXPECT_NE(r.out.find("# Avg efficiency       : "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  ideal    eff%\n"), std::string::npos) << r.out;
}

// --small_iters N: the timed calls at sizes up to 64 KiB (recorded in the JSON's args, -n above);
// 0 is refused.
TEST(BenchAllReduce, SmallItersAreRecordedAndZeroIsRefused) {
  const std::string json = TempPath("small_iters.json");
  const RunResult r =
      RunTool("all_reduce_perf", "-t 2 -b 32K -e 128K -f 4 -n 2 --small_iters 7 -J " + json);
  ExpectAllRight(r, "all_reduce_perf --small_iters");
  ASSERT_EQ(DataRows(r.out).size(), 2u) << r.out;  // 32 KiB (7 calls) and 128 KiB (2)
  std::ifstream in(json);
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["args"]["small_iters"], 7) << doc.dump();
  EXPECT_EQ(doc["args"]["iters"], 2) << doc.dump();
  std::remove(json.c_str());
  EXPECT_NE(RunTool("all_reduce_perf", "--small_iters 0").status, 0);
}

TEST(BenchAllReduce, AdditiveStepAndCpuTime) {
  const RunResult r = RunTool("all_reduce_perf", "-t 2 -b 1000 -e 3000 -i 1000 -C 1 -n 2");
  ExpectAllRight(r, "all_reduce_perf -i");
  const auto rows = DataRows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  EXPECT_EQ(rows[0][0], "1000");
  EXPECT_EQ(rows[1][0], "2000");
  EXPECT_EQ(rows[2][0], "3000");
  EXPECT_NE(r.out.find("step: 1000(bytes)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" cputime "), std::string::npos) << r.out;
}

TEST(BenchAllReduce, TwoProcessesThroughChorusrun) {
  const std::string tool = ToolPath("all_reduce_perf");
  ASSERT_TRUE(std::filesystem::exists(CHORUSRUN_PATH)) << CHORUSRUN_PATH;
  ASSERT_TRUE(std::filesystem::exists(tool)) << tool;
  const RunResult r = RunShell(std::string(CHORUSRUN_PATH) + " --no-prefix -np 2 " + tool +
                               " -T 120 -t 2 -b 8 -e 64K -f 8 -d all -o sum -n 2 2>&1");
  ExpectAllRight(r, "chorusrun -np 2 all_reduce_perf -t 2");
  // Only global rank 0 prints: one table, four ranks listed.
  size_t headers = 0, pos = 0;
  while ((pos = r.out.find("# Collective test concluded", pos)) != std::string::npos) {
    ++headers;
    ++pos;
  }
  EXPECT_EQ(headers, 1u) << r.out;
  EXPECT_NE(r.out.find("#  Rank  3 Group  0 Pid "), std::string::npos) << r.out;
}

// The JSON's algorithm / protocol / nchannels are the library's choice (chorusTunerChoice), and
// CHORUS_ALGO / CHORUS_PROTO show up there.
TEST(BenchChoice, ForcedAlgorithmsAndProtocolsAppearInTheJson) {
  struct Case {
    const char* env;
    const char* algorithm;
    const char* protocol;
  };
  for (const Case& c : {Case{"CHORUS_ALGO=naive", "naive", "simple"},
                        Case{"CHORUS_ALGO=tree CHORUS_PROTO=ll", "tree", "ll"},
                        Case{"CHORUS_ALGO=ring CHORUS_PROTO=simple", "ring", "simple"}}) {
    const std::string json = TempPath("choice.json");
    std::filesystem::remove(json);
    const RunResult r =
        RunTool("all_reduce_perf", "-t 3 -b 8 -e 256K -f 16 -n 2 -w 1 -J " + json, false, c.env);
    ExpectAllRight(r, c.env);
    Json doc;
    if (!ReadJson(json, &doc)) continue;
    const auto choices = Choices(doc);
    EXPECT_EQ(choices.size(), 4u) << c.env;  // 8, 128, 2K, 32K
    for (const RowChoice& rc : choices) {
      EXPECT_EQ(rc.algorithm, c.algorithm) << c.env;
      EXPECT_EQ(rc.protocol, c.protocol) << c.env;
      EXPECT_GE(rc.nchannels, 1.0) << c.env;
      EXPECT_TRUE(rc.predicted) << c.env;
    }
    std::filesystem::remove(json);
  }
}

TEST(BenchChoice, AutomaticChoiceIsOneTheLibraryHasAndSendRecvIsDirect) {
  const std::string json = TempPath("auto.json");
  const RunResult r = RunTool("all_reduce_perf", "-t 3 -b 8 -e 1M -f 32 -n 2 -J " + json, false,
                              "-u CHORUS_ALGO -u CHORUS_PROTO");
  ExpectAllRight(r, "all_reduce_perf automatic choice");
  Json doc;
  ASSERT_TRUE(ReadJson(json, &doc));
  const auto choices = Choices(doc);
  ASSERT_EQ(choices.size(), 4u);
  for (const RowChoice& rc : choices) {
    EXPECT_TRUE(rc.algorithm == "ring" || rc.algorithm == "tree" || rc.algorithm == "oneshot" ||
                rc.algorithm == "twoshot")
        << rc.algorithm;
    EXPECT_TRUE(rc.protocol == "simple" || rc.protocol == "ll") << rc.protocol;
    EXPECT_GE(rc.nchannels, 1.0);
    EXPECT_TRUE(rc.predicted);
    EXPECT_TRUE(rc.predictedInPlace);
  }

  const RunResult s = RunTool("sendrecv_perf", "-t 2 -b 8 -e 8K -f 32 -n 2 -J " + json);
  ExpectAllRight(s, "sendrecv_perf", false);
  doc = Json{};
  ASSERT_TRUE(ReadJson(json, &doc));
  const auto sr = Choices(doc);
  ASSERT_EQ(sr.size(), 3u);
  for (const RowChoice& rc : sr) {
    EXPECT_EQ(rc.algorithm, "direct");
    EXPECT_EQ(rc.protocol, "simple");
    EXPECT_EQ(rc.nchannels, 1.0);
  }
  std::filesystem::remove(json);
}

// --calibrate: the measured bandwidths are printed, become the ideal column, and go into the
// JSON; CHORUS_NNODES > 1 adds the inter-node measurement; one rank skips it.
TEST(BenchCalibrate, OneNodeMeasuresIntraBandwidth) {
  const std::string json = TempPath("calib.json");
  const RunResult r =
      RunTool("all_reduce_perf", "-t 2 -b 64K -e 256K -f 4 -n 2 --calibrate -J " + json, false,
              "-u CHORUS_NNODES");
  ExpectAllRight(r, "all_reduce_perf --calibrate");
  const size_t at = r.out.find("# Calibrated intra-node bandwidth B = ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("# Calibrated inter-node bandwidth"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(ranks 0 <-> 1, 32 MiB each way, best of 5)", at), std::string::npos)
      << r.out;
  const double b = std::strtod(r.out.c_str() + at + 38, nullptr);
  EXPECT_GT(b, 0.0) << r.out;
  EXPECT_NE(r.out.find("# Ideal busbw: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  ideal    eff%\n"), std::string::npos) << r.out;
  const auto rows = DataRows(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), kNcclColumns + 2) << r.out;
    EXPECT_NEAR(std::strtod(row[kNcclColumns].c_str(), nullptr), b, 0.006 + 0.001 * b) << r.out;
  }
  Json doc;
  ASSERT_TRUE(ReadJson(json, &doc));
  const Json& config = doc.at("config");
  ASSERT_TRUE(config.contains("calibration")) << r.out;
  EXPECT_NEAR(config.at("calibration").at("intra_bw").get<double>(), b, 0.0006 + 0.001 * b);
  EXPECT_TRUE(config.at("calibration").at("inter_bw").is_null());
  EXPECT_EQ(config.at("calibration").at("bytes").get<double>(), 32.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(config.at("intra_bw").get<double>(),
                   config.at("calibration").at("intra_bw").get<double>());
  ASSERT_EQ(doc.at("results").size(), 2u);
  EXPECT_DOUBLE_EQ(doc.at("results").at(0).at("ideal").get<double>(),
                   config.at("intra_bw").get<double>());
  std::filesystem::remove(json);
}

TEST(BenchCalibrate, TwoNodesMeasureInterBandwidthAndFlagsWin) {
  const RunResult r =
      RunTool("all_reduce_perf", "-t 4 -b 64K -e 64K -n 2 --calibrate-bytes 4M --intra-bw 7", false,
              "CHORUS_NNODES=2");
  ExpectAllRight(r, "all_reduce_perf --calibrate CHORUS_NNODES=2");
  EXPECT_NE(r.out.find("# Calibrated intra-node bandwidth B = "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--intra-bw given, using that"), std::string::npos) << r.out;
  const size_t at = r.out.find("# Calibrated inter-node bandwidth I = ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(ranks 0 <-> 2, 4 MiB each way", at), std::string::npos)
      << r.out;  // P = 4 / 2
  EXPECT_NE(r.out.find("# Ideal busbw: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("intra-node 7 GB/s per rank"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 ranks per node, 2 nodes"), std::string::npos) << r.out;
  EXPECT_NE(RunTool("all_reduce_perf", "-t 2 -b 1K -e 1K --calibrate-bytes 0").status, 0);
}

TEST(BenchCalibrate, OneRankSkips) {
  const RunResult r = RunTool("all_reduce_perf", "-b 1K -e 1K -n 2 --calibrate");
  ExpectAllRight(r, "all_reduce_perf --calibrate on one rank");
  EXPECT_NE(r.out.find("# Calibration skipped: one rank"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("# Calibrated"), std::string::npos) << r.out;
  for (const auto& row : DataRows(r.out)) EXPECT_EQ(row.size(), kNcclColumns) << r.out;
}

// ---------------------------------------------------------------------------------------------
// The other collectives: every type (and op, and root), small sizes, three ranks.

struct ToolCase {
  const char* tool;
  const char* args;
  bool inPlaceChecked;
};

class BenchCollective : public testing::TestWithParam<ToolCase> {};

TEST_P(BenchCollective, AllRight) {
  const ToolCase& c = GetParam();
  const RunResult r = RunTool(c.tool, std::string("-t 3 -b 8 -e 8K -f 8 -d all -n 2 ") + c.args);
  ExpectAllRight(r, c.tool, c.inPlaceChecked);
  if (!c.inPlaceChecked) {
    for (const auto& row : DataRows(r.out)) EXPECT_EQ(row[kIpWrong], "N/A");
  }
}

INSTANTIATE_TEST_SUITE_P(Collectives, BenchCollective,
                         testing::Values(ToolCase{"all_gather_perf", "", true},
                                         ToolCase{"reduce_scatter_perf", "-o all", true},
                                         ToolCase{"broadcast_perf", "-r all", true},
                                         ToolCase{"reduce_perf", "-o all -r all", true},
                                         ToolCase{"alltoall_perf", "", true},
                                         ToolCase{"gather_perf", "-r all", true},
                                         ToolCase{"scatter_perf", "-r all", true},
                                         ToolCase{"sendrecv_perf", "", false}),
                         [](const testing::TestParamInfo<ToolCase>& info) {
                           std::string name = info.param.tool;
                           return name.substr(0, name.size() - 5);  // drop "_perf"
                         });

TEST(BenchTools, RowsFollowTheCollectiveSizes) {
  // AllGather: size = nranks * count * 4, rounded down to a multiple of 3 * 4 bytes; the
  // repeated 0-count rows of tiny sizes collapse into one.
  const RunResult r = RunTool("all_gather_perf", "-t 3 -b 4 -e 96 -f 2 -n 1");
  ExpectAllRight(r, "all_gather_perf sizes");
  const auto rows = DataRows(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;  // 4, 8 -> 0; 16 -> 1; 32 -> 2; 64 -> 5 (96 > 64*2)
  EXPECT_EQ(rows[0][0], "0");
  EXPECT_EQ(rows[1][0], "12");
  EXPECT_EQ(rows[1][1], "1");
  EXPECT_EQ(rows[2][0], "24");
  EXPECT_EQ(rows[3][0], "60");
  EXPECT_EQ(rows[3][3], "none");
}

TEST(BenchTools, RootBeyondRanksIsRejected) {
  EXPECT_NE(RunTool("broadcast_perf", "-t 2 -r 2 -b 8 -e 8").status, 0);
}

}  // namespace
