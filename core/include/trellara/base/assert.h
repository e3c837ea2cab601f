// assert.h — assertions that stay on in release builds (TigerBeetle's rule: an invariant the code
// relies on is checked where it is relied on, in production too).
//
// TRELLARA_ASSERT(condition, what) evaluates `condition` once; when it is false it throws
// AssertionFailure naming the invariant, the file and the line. `what` (a string) is evaluated only
// then, so describing the failure costs nothing on the normal path. An exception, not abort():
// inside the source server the extension's boundary (extension/pg/guard.h) turns it into an
// ERROR of the one process instead of a crash that restarts every backend; in the `trellara`
// command it ends the command with the message. A failed assertion is a bug in Trellara: the state
// it protects is not trusted further.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace trellara {

class AssertionFailure : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void AssertionFailed(const char* condition, std::string_view what, const char* file, int line);

}  // namespace trellara

#define TRELLARA_ASSERT(condition, what)                                               \
  do {                                                                                 \
    if (__builtin_expect(!(condition), 0))                                             \
      ::trellara::AssertionFailed(#condition, (what), __FILE__, __LINE__);             \
  } while (0)
