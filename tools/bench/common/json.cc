#include "json.h"

#include <cmath>
#include <cstdio>

#include "types.h"

namespace chorus_bench {

void JsonWriter::newline() {
  out_ += '\n';
  out_.append(2 * first_.size(), ' ');
}

void JsonWriter::beforeValue() {
  if (afterKey_) {
    afterKey_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    newline();
  }
}

void JsonWriter::beginObject() {
  beforeValue();
  out_ += '{';
  first_.push_back(true);
}

void JsonWriter::endObject() {
  const bool empty = first_.back();
  first_.pop_back();
  if (!empty) newline();
  out_ += '}';
  if (first_.empty()) out_ += '\n';
}

void JsonWriter::beginArray() {
  beforeValue();
  out_ += '[';
  first_.push_back(true);
}

void JsonWriter::endArray() {
  const bool empty = first_.back();
  first_.pop_back();
  if (!empty) newline();
  out_ += ']';
}

void JsonWriter::key(std::string_view k) {
  beforeValue();
  out_ += escape(k);
  out_ += ": ";
  afterKey_ = true;
}

void JsonWriter::value(std::string_view s) {
  beforeValue();
  out_ += escape(s);
}

void JsonWriter::value(double d) {
  beforeValue();
  if (!std::isfinite(d)) {
    out_ += "null";
    return;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", d);
  out_ += buf;
}

void JsonWriter::value(int64_t i) {
  beforeValue();
  out_ += std::to_string(i);
}

void JsonWriter::value(bool b) {
  beforeValue();
  out_ += b ? "true" : "false";
}

void JsonWriter::null() {
  beforeValue();
  out_ += "null";
}

std::string JsonWriter::escape(std::string_view s) {
  std::string r = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        r += "\\\"";
        break;
      case '\\':
        r += "\\\\";
        break;
      case '\b':
        r += "\\b";
        break;
      case '\f':
        r += "\\f";
        break;
      case '\n':
        r += "\\n";
        break;
      case '\r':
        r += "\\r";
        break;
      case '\t':
        r += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          r += buf;
        } else {
          r += ch;  // UTF-8 passes through unchanged
        }
    }
  }
  r += '"';
  return r;
}

namespace {

void writePlacement(JsonWriter* w, const PlacementResult& p, double ideal, bool perIter) {
  w->beginObject();
  w->key("time");
  w->value(p.timeUs);
  w->key("alg_bw");
  w->value(p.algBw);
  w->key("bus_bw");
  w->value(p.busBw);
  w->key("nwrong");
  if (p.wrong < 0) {
    w->null();
  } else {
    w->value(p.wrong);
  }
  if (ideal > 0.0) {
    w->key("efficiency");
    w->value(100.0 * p.busBw / ideal);
  }
  if (perIter) {
    w->key("min");
    w->value(p.iter.minUs);
    w->key("max");
    w->value(p.iter.maxUs);
    w->key("p99");
    w->value(p.iter.p99Us);
    w->key("cv");
    w->value(p.iter.cvPercent);
  }
  w->endObject();
}

void writeArgs(JsonWriter* w, const Options& o) {
  w->beginObject();
  w->key("argv");
  w->beginArray();
  for (const std::string& a : o.argv) w->value(a);
  w->endArray();
  w->key("nthreads");
  w->value(o.nThreads);
  w->key("ngpus");
  w->value(o.nGpus);
  w->key("minbytes");
  w->value(static_cast<int64_t>(o.minBytes));
  w->key("maxbytes");
  w->value(static_cast<int64_t>(o.maxBytes));
  w->key("stepbytes");
  w->value(static_cast<int64_t>(o.stepBytes));
  w->key("stepfactor");
  w->value(static_cast<int64_t>(o.stepFactor));
  w->key("iters");
  w->value(o.iters);
  w->key("warmup_iters");
  w->value(o.warmupIters);
  w->key("agg_iters");
  w->value(o.aggIters);
  w->key("run_cycles");
  w->value(o.runCycles);
  w->key("check");
  w->value(o.check);
  w->key("op");
  w->beginArray();
  for (const int op : o.ops) w->value(opName(op));
  w->endArray();
  w->key("datatype");
  w->beginArray();
  for (const chorusDataType_t t : o.types) w->value(typeName(t));
  w->endArray();
  w->key("root");
  if (o.allRoots) {
    w->value("all");
  } else {
    w->value(o.root);
  }
  w->key("blocking");
  w->value(o.blocking);
  w->key("average");
  w->value(o.average);
  w->key("report_cputime");
  w->value(o.cpuTime);
  w->key("timeout");
  w->value(o.timeoutSec);
  w->key("per_iter_timing");
  w->value(o.perIterTiming);
  w->key("cudagraph");
  w->value(o.graph);
  w->key("output_file");
  w->value(o.jsonFile);
  w->key("intra_bw");
  w->value(o.intraBw);
  w->key("inter_bw");
  w->value(o.interBw);
  w->key("calibrate");
  w->value(o.calibrate);
  w->key("calibrate_bytes");
  w->value(static_cast<int64_t>(o.calibrateBytes));
  w->endObject();
}

}  // namespace

std::string buildJson(const RunInfo& run) {
  const Options& o = *run.options;
  JsonWriter w;
  w.beginObject();
  w.key("version");
  w.value(run.version);
  w.key("library");
  w.beginObject();
  w.key("name");
  w.value("chorus");
  w.key("version");
  w.value(run.version);
  w.key("version_code");
  w.value(run.versionCode);
  w.endObject();
  w.key("collective");
  w.value(run.collective);
  w.key("start_time");
  w.value(run.startTime);
  w.key("args");
  writeArgs(&w, o);
  w.key("env");
  w.beginObject();
  for (const auto& [k, v] : run.env) {
    w.key(k);
    w.value(v);
  }
  w.endObject();
  w.key("config");
  w.beginObject();
  w.key("nranks");
  w.value(run.nranks);
  w.key("nprocs");
  w.value(run.nprocs);
  w.key("nthreads");
  w.value(o.nThreads);
  w.key("nnodes");
  w.value(run.nnodes);
  w.key("timer");
  w.value(o.cpuTime ? "cputime" : "wallclock");
  w.key("intra_bw");
  w.value(run.intraBw);
  w.key("inter_bw");
  w.value(run.interBw);
  if (run.calibrated) {
    w.key("calibration");
    w.beginObject();
    w.key("intra_bw");
    if (run.calibratedIntraBw >= 0.0) {
      w.value(run.calibratedIntraBw);
    } else {
      w.null();
    }
    w.key("inter_bw");
    if (run.calibratedInterBw >= 0.0) {
      w.value(run.calibratedInterBw);
    } else {
      w.null();
    }
    w.key("bytes");
    w.value(static_cast<int64_t>(run.calibrationBytes));
    w.key("iters");
    w.value(run.calibrationIters);
    w.endObject();
  }
  w.endObject();
  w.key("devices");
  w.beginArray();
  for (const DeviceInfo& d : run.devices) {
    w.beginObject();
    w.key("rank");
    w.value(d.rank);
    w.key("pid");
    w.value(d.pid);
    w.key("hostname");
    w.value(d.hostname);
    w.key("device");
    w.value(d.thread);
    w.key("name");
    w.value("cpu");
    w.endObject();
  }
  w.endArray();
  w.key("results");
  w.beginArray();
  for (const RowResult& r : run.results) {
    w.beginObject();
    w.key("size");
    w.value(static_cast<int64_t>(r.bytes));
    w.key("count");
    w.value(static_cast<int64_t>(r.count));
    w.key("type");
    w.value(typeName(r.type));
    w.key("redop");
    w.value(opName(r.op));
    w.key("root");
    w.value(r.root);
    w.key("out_of_place");
    writePlacement(&w, r.outOfPlace, r.ideal, o.perIterTiming != 0);
    w.key("in_place");
    writePlacement(&w, r.inPlace, r.ideal, o.perIterTiming != 0);
    if (r.ideal > 0.0) {
      w.key("ideal");
      w.value(r.ideal);
      w.key("efficiency");
      w.value(rowEfficiency(r));
    }
    w.key("algorithm");
    w.value(r.choice.algorithm);
    w.key("protocol");
    w.value(r.choice.protocol);
    w.key("nchannels");
    w.value(r.choice.nchannels);
    if (r.choice.predictedUs > 0.0) {
      w.key("predicted_time");
      w.value(r.choice.predictedUs);
    }
    w.endObject();
  }
  w.endArray();
  w.key("out_of_bounds");
  w.beginObject();
  w.key("count");
  w.value(run.outOfBounds);
  w.key("okay");
  w.value(run.outOfBounds == 0);
  w.endObject();
  w.key("average_bus_bandwidth");
  w.beginObject();
  w.key("bandwidth");
  w.value(run.avgBusBw);
  w.key("okay");
  w.value(true);
  w.endObject();
  if (run.avgEfficiency > 0.0) {
    w.key("average_efficiency");
    w.value(run.avgEfficiency);
  }
  w.key("errors");
  w.beginArray();
  for (const std::string& e : run.errors) w.value(e);
  w.endArray();
  w.key("end_time");
  w.value(run.endTime);
  w.endObject();
  return w.str();
}

bool writeJsonFile(const std::string& path, const RunInfo& run) {
  const std::string doc = buildJson(run);
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(doc.data(), 1, doc.size(), f) == doc.size();
  return (std::fclose(f) == 0) && ok;
}

}  // namespace chorus_bench
