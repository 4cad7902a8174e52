// Groups (chorusGroupStart / chorusGroupEnd): per-thread, nestable; operations issued inside
// are collected and submitted together when the outermost group ends.
#pragma once

#include "comm/op.h"

namespace chorus {
int groupDepth();
void groupAdd(const OpDesc& op);
void groupRecordError(chorusResult_t code);  // a call inside the open group failed
}  // namespace chorus
