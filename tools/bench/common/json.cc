#include "json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "types.h"

namespace chorus_bench {

namespace {

// Keys stay in the order written (nccl-tests' order), not sorted.
using Json = nlohmann::ordered_json;

// A measured double: 10 significant digits (what the document has always carried; more would be
// noise), non-finite values as null.
Json num(double d) {
  if (!std::isfinite(d)) return nullptr;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", d);
  return std::strtod(buf, nullptr);
}

Json i64(int64_t i) {
  return i;
}

Json placement(const PlacementResult& p, double ideal, bool perIter) {
  Json o;
  o["time"] = num(p.timeUs);
  o["alg_bw"] = num(p.algBw);
  o["bus_bw"] = num(p.busBw);
  o["nwrong"] = p.wrong < 0 ? Json(nullptr) : i64(p.wrong);
  if (ideal > 0.0) o["efficiency"] = num(100.0 * p.busBw / ideal);
  if (perIter) {
    o["min"] = num(p.iter.minUs);
    o["max"] = num(p.iter.maxUs);
    o["p99"] = num(p.iter.p99Us);
    o["cv"] = num(p.iter.cvPercent);
  }
  return o;
}

Json args(const Options& o) {
  Json a;
  a["argv"] = o.argv;
  a["nthreads"] = o.nThreads;
  a["ngpus"] = o.nGpus;
  a["minbytes"] = i64(static_cast<int64_t>(o.minBytes));
  a["maxbytes"] = i64(static_cast<int64_t>(o.maxBytes));
  a["stepbytes"] = i64(static_cast<int64_t>(o.stepBytes));
  a["stepfactor"] = i64(static_cast<int64_t>(o.stepFactor));
  a["iters"] = o.iters;
  a["small_iters"] = o.smallIters > 0 ? o.smallIters : o.iters;
  a["warmup_iters"] = o.warmupIters;
  a["agg_iters"] = o.aggIters;
  a["run_cycles"] = o.runCycles;
  a["check"] = o.check;
  Json ops = Json::array();
  for (const int op : o.ops) ops.push_back(opName(op));
  a["op"] = std::move(ops);
  Json types = Json::array();
  for (const chorusDataType_t t : o.types) types.push_back(typeName(t));
  a["datatype"] = std::move(types);
  a["root"] = o.allRoots ? Json("all") : Json(o.root);
  a["blocking"] = o.blocking;
  a["average"] = o.average;
  a["report_cputime"] = o.cpuTime;
  a["timeout"] = o.timeoutSec;
  a["per_iter_timing"] = o.perIterTiming;
  a["cudagraph"] = o.graph;
  a["output_file"] = o.jsonFile;
  a["intra_bw"] = num(o.intraBw);
  a["inter_bw"] = num(o.interBw);
  a["calibrate"] = o.calibrate;
  a["calibrate_bytes"] = i64(static_cast<int64_t>(o.calibrateBytes));
  return a;
}

}  // namespace

std::string buildJson(const RunInfo& run) {
  const Options& o = *run.options;
  Json doc;
  doc["version"] = run.version;
  doc["library"] = {
      {"name", "chorus"}, {"version", run.version}, {"version_code", run.versionCode}};
  doc["collective"] = run.collective;
  doc["start_time"] = run.startTime;
  doc["args"] = args(o);
  Json env = Json::object();
  for (const auto& [k, v] : run.env) env[k] = v;
  doc["env"] = std::move(env);
  Json config;
  config["nranks"] = run.nranks;
  config["nprocs"] = run.nprocs;
  config["nthreads"] = o.nThreads;
  config["nnodes"] = run.nnodes;
  config["timer"] = o.cpuTime ? "cputime" : "wallclock";
  config["intra_bw"] = num(run.intraBw);
  config["inter_bw"] = num(run.interBw);
  if (run.calibrated) {
    Json c;
    c["intra_bw"] = run.calibratedIntraBw >= 0.0 ? num(run.calibratedIntraBw) : Json(nullptr);
    c["inter_bw"] = run.calibratedInterBw >= 0.0 ? num(run.calibratedInterBw) : Json(nullptr);
    c["bytes"] = i64(static_cast<int64_t>(run.calibrationBytes));
    c["iters"] = run.calibrationIters;
    config["calibration"] = std::move(c);
  }
  doc["config"] = std::move(config);
  Json devices = Json::array();
  for (const DeviceInfo& d : run.devices) {
    Json dev;
    dev["rank"] = d.rank;
    dev["pid"] = d.pid;
    dev["hostname"] = d.hostname;
    dev["device"] = d.thread;
    dev["name"] = "cpu";
    devices.push_back(std::move(dev));
  }
  doc["devices"] = std::move(devices);
  const bool perIter = o.perIterTiming != 0;
  Json results = Json::array();
  for (const RowResult& r : run.results) {
    Json row;
    row["size"] = i64(static_cast<int64_t>(r.bytes));
    row["count"] = i64(static_cast<int64_t>(r.count));
    row["type"] = typeName(r.type);
    row["redop"] = opName(r.op);
    row["root"] = r.root;
    row["out_of_place"] = placement(r.outOfPlace, r.ideal, perIter);
    row["in_place"] = placement(r.inPlace, r.ideal, perIter);
    if (r.ideal > 0.0) {
      row["ideal"] = num(r.ideal);
      row["efficiency"] = num(rowEfficiency(r));
    }
    row["algorithm"] = r.choice.algorithm;
    row["protocol"] = r.choice.protocol;
    row["nchannels"] = r.choice.nchannels;
    if (r.choice.predictedUs > 0.0) row["predicted_time"] = num(r.choice.predictedUs);
    if (r.choice.predictedInPlaceUs > 0.0)
      row["predicted_time_in_place"] = num(r.choice.predictedInPlaceUs);
    results.push_back(std::move(row));
  }
  doc["results"] = std::move(results);
  doc["out_of_bounds"] = {{"count", i64(run.outOfBounds)}, {"okay", run.outOfBounds == 0}};
  doc["average_bus_bandwidth"] = {{"bandwidth", num(run.avgBusBw)}, {"okay", true}};
  if (run.avgEfficiency > 0.0) doc["average_efficiency"] = num(run.avgEfficiency);
  doc["errors"] = run.errors;
  doc["end_time"] = run.endTime;
  // Invalid UTF-8 (an argv or environment value) becomes U+FFFD rather than an exception.
  return doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

bool writeJsonFile(const std::string& path, const RunInfo& run) {
  const std::string doc = buildJson(run);
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(doc.data(), 1, doc.size(), f) == doc.size();
  return (std::fclose(f) == 0) && ok;
}

}  // namespace chorus_bench
