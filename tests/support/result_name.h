// The name of a chorusResult_t, for test messages.
#pragma once

#include <chorus/chorus.h>

namespace ctest {

// "chorusInvalidArgument" etc.
const char* resultName(chorusResult_t r);

}  // namespace ctest
