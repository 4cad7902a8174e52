#include "test_types.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace ctest {

const char* typeName(chorusDataType_t type) {
  switch (type) {
    case chorusInt8:
      return "int8";
    case chorusUint8:
      return "uint8";
    case chorusInt32:
      return "int32";
    case chorusUint32:
      return "uint32";
    case chorusInt64:
      return "int64";
    case chorusUint64:
      return "uint64";
    case chorusFloat16:
      return "float16";
    case chorusFloat32:
      return "float32";
    case chorusFloat64:
      return "float64";
    case chorusBfloat16:
      return "bfloat16";
    default:
      return "unknown-type";
  }
}

const char* opName(chorusRedOp_t op) {
  switch (op) {
    case chorusSum:
      return "sum";
    case chorusProd:
      return "prod";
    case chorusMax:
      return "max";
    case chorusMin:
      return "min";
    case chorusAvg:
      return "avg";
    case kNoOp:
      return "none";
    default:
      return "unknown-op";
  }
}

size_t typeSize(chorusDataType_t type) {
  switch (type) {
    case chorusInt8:
    case chorusUint8:
      return 1;
    case chorusFloat16:
    case chorusBfloat16:
      return 2;
    case chorusInt32:
    case chorusUint32:
    case chorusFloat32:
      return 4;
    case chorusInt64:
    case chorusUint64:
    case chorusFloat64:
      return 8;
    default:
      return 0;
  }
}

bool isFloatType(chorusDataType_t type) {
  return type == chorusFloat16 || type == chorusBfloat16 || type == chorusFloat32 ||
         type == chorusFloat64;
}

std::string formatElement(chorusDataType_t type, const void* p) {
  char buf[96];
  switch (type) {
    case chorusInt8: {
      int8_t v;
      std::memcpy(&v, p, 1);
      std::snprintf(buf, sizeof buf, "%d (0x%02x)", v, static_cast<uint8_t>(v));
      break;
    }
    case chorusUint8: {
      uint8_t v;
      std::memcpy(&v, p, 1);
      std::snprintf(buf, sizeof buf, "%u (0x%02x)", v, v);
      break;
    }
    case chorusInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      std::snprintf(buf, sizeof buf, "%" PRId32 " (0x%08" PRIx32 ")", v, static_cast<uint32_t>(v));
      break;
    }
    case chorusUint32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      std::snprintf(buf, sizeof buf, "%" PRIu32 " (0x%08" PRIx32 ")", v, v);
      break;
    }
    case chorusInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      std::snprintf(buf, sizeof buf, "%" PRId64 " (0x%016" PRIx64 ")", v, static_cast<uint64_t>(v));
      break;
    }
    case chorusUint64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      std::snprintf(buf, sizeof buf, "%" PRIu64 " (0x%016" PRIx64 ")", v, v);
      break;
    }
    case chorusFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      std::snprintf(buf, sizeof buf, "%.6g (0x%04x)", static_cast<double>(halfToFloat(v)), v);
      break;
    }
    case chorusBfloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      std::snprintf(buf, sizeof buf, "%.4g (0x%04x)", static_cast<double>(bf16ToFloat(v)), v);
      break;
    }
    case chorusFloat32: {
      float v;
      uint32_t bits;
      std::memcpy(&v, p, 4);
      std::memcpy(&bits, p, 4);
      std::snprintf(buf, sizeof buf, "%.9g (0x%08" PRIx32 ")", static_cast<double>(v), bits);
      break;
    }
    case chorusFloat64: {
      double v;
      uint64_t bits;
      std::memcpy(&v, p, 8);
      std::memcpy(&bits, p, 8);
      std::snprintf(buf, sizeof buf, "%.17g (0x%016" PRIx64 ")", v, bits);
      break;
    }
    default:
      std::snprintf(buf, sizeof buf, "<unknown type %d>", static_cast<int>(type));
  }
  return buf;
}

namespace {
// Sign-magnitude bits -> an integer line on which neighbouring floats differ by one.
int64_t orderedBits(uint64_t bits, int width) {
  const uint64_t signBit = uint64_t{1} << (width - 1);
  const int64_t magnitude = static_cast<int64_t>(bits & (signBit - 1));
  return (bits & signBit) ? -magnitude : magnitude;
}
}  // namespace

uint64_t ulpDistance(chorusDataType_t type, const void* a, const void* b) {
  const size_t size = typeSize(type);
  if (!isFloatType(type)) return std::memcmp(a, b, size) == 0 ? 0 : UINT64_MAX;
  uint64_t x = 0, y = 0;
  std::memcpy(&x, a, size);  // little endian: the element lands in the low bytes
  std::memcpy(&y, b, size);
  const int width = static_cast<int>(size * 8);
  const int64_t ox = orderedBits(x, width), oy = orderedBits(y, width);
  if (width == 64) {
    // Differences of two 63-bit magnitudes with opposite signs can overflow int64.
    const bool xneg = ox < 0, yneg = oy < 0;
    if (xneg != yneg) {
      const uint64_t mx = xneg ? static_cast<uint64_t>(-(ox + 1)) + 1 : static_cast<uint64_t>(ox);
      const uint64_t my = yneg ? static_cast<uint64_t>(-(oy + 1)) + 1 : static_cast<uint64_t>(oy);
      return mx + my;
    }
  }
  return ox > oy ? static_cast<uint64_t>(ox - oy) : static_cast<uint64_t>(oy - ox);
}

}  // namespace ctest
