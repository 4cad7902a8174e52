#include "types.h"

namespace chorus_bench {

namespace {

struct TypeInfo {
  chorusDataType_t type;
  const char* name;
  size_t size;
  bool isFloat;
  bool isSigned;
};

// In chorusDataType_t order; the names are the ones nccl-tests prints.
constexpr TypeInfo kTypes[] = {
    {chorusInt8, "int8", 1, false, true},     {chorusUint8, "uint8", 1, false, false},
    {chorusInt32, "int32", 4, false, true},   {chorusUint32, "uint32", 4, false, false},
    {chorusInt64, "int64", 8, false, true},   {chorusUint64, "uint64", 8, false, false},
    {chorusFloat16, "half", 2, true, true},   {chorusFloat32, "float", 4, true, true},
    {chorusFloat64, "double", 8, true, true}, {chorusBfloat16, "bfloat16", 2, true, true},
};
constexpr int kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);

struct Alias {
  const char* name;
  chorusDataType_t type;
};
constexpr Alias kTypeAliases[] = {
    {"char", chorusInt8},       {"int", chorusInt32},       {"float16", chorusFloat16},
    {"fp16", chorusFloat16},    {"float32", chorusFloat32}, {"fp32", chorusFloat32},
    {"float64", chorusFloat64}, {"fp64", chorusFloat64},    {"bf16", chorusBfloat16},
};

constexpr const char* kOpNames[] = {"sum", "prod", "max", "min", "avg"};
constexpr int kNumOps = sizeof(kOpNames) / sizeof(kOpNames[0]);

const TypeInfo* info(chorusDataType_t type) {
  const int t = static_cast<int>(type);
  return (t >= 0 && t < kNumTypes) ? &kTypes[t] : nullptr;
}

}  // namespace

const char* typeName(chorusDataType_t type) {
  const TypeInfo* i = info(type);
  return i ? i->name : "unknown";
}

const char* opName(int op) {
  if (op == kNoOp) return "none";
  return (op >= 0 && op < kNumOps) ? kOpNames[op] : "unknown";
}

size_t typeSize(chorusDataType_t type) {
  const TypeInfo* i = info(type);
  return i ? i->size : 0;
}

bool isFloatType(chorusDataType_t type) {
  const TypeInfo* i = info(type);
  return i && i->isFloat;
}

bool isSignedType(chorusDataType_t type) {
  const TypeInfo* i = info(type);
  return i && i->isSigned;
}

bool parseTypes(const std::string& s, std::vector<chorusDataType_t>* out) {
  out->clear();
  if (s == "all") {
    for (const TypeInfo& t : kTypes) out->push_back(t.type);
    return true;
  }
  for (const TypeInfo& t : kTypes) {
    if (s == t.name) {
      out->push_back(t.type);
      return true;
    }
  }
  for (const Alias& a : kTypeAliases) {
    if (s == a.name) {
      out->push_back(a.type);
      return true;
    }
  }
  return false;
}

bool parseOps(const std::string& s, std::vector<int>* out) {
  out->clear();
  for (int op = 0; op < kNumOps; ++op) {
    if (s == "all" || s == kOpNames[op]) out->push_back(op);
  }
  return !out->empty();
}

}  // namespace chorus_bench
