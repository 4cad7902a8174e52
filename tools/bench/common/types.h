// Datatypes and reduction operations as the benchmark tools name and handle them: the names
// nccl-tests prints and the parsing of -d / -o.
#ifndef CHORUS_BENCH_TYPES_H_
#define CHORUS_BENCH_TYPES_H_

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus_bench {

// "No reduction" for collectives that do not reduce (printed as "none").
constexpr int kNoOp = -1;

const char* typeName(chorusDataType_t type);  // "int8", ..., "half", "float", "bfloat16"
const char* opName(int op);                   // "sum", ..., "avg"; "none" for kNoOp
size_t typeSize(chorusDataType_t type);
bool isFloatType(chorusDataType_t type);
bool isSignedType(chorusDataType_t type);

// Parse one -d / -o value: a name or "all". Returns false for an unknown name.
bool parseTypes(const std::string& s, std::vector<chorusDataType_t>* out);
bool parseOps(const std::string& s, std::vector<int>* out);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_TYPES_H_
