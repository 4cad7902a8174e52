#include "proto/proto.h"

namespace chorus {
const char* protoName(Proto p) {
  return p == Proto::kSimple ? "simple" : "ll";
}
}  // namespace chorus
