// assert.cpp — see assert.h.
#include "trellara/base/assert.h"

namespace trellara {

void AssertionFailed(const char* condition, std::string_view what, const char* file, int line) {
  throw AssertionFailure("internal invariant violated (a bug in trellara; report it with this message): " +
                         std::string(what) + " [" + condition + " is false at " + file + ":" + std::to_string(line) +
                         "]");
}

}  // namespace trellara
