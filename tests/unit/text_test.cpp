// text_test.cpp — UTF-8 validation and escaping used wherever record bytes reach JSON or errors.
#include <catch2/catch.hpp>

#include "trellara/base/text.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_text_test {

using namespace trellara;

TEST_CASE("utf8_validation_follows_rfc3629", "[text]") {
  CHECK(IsValidUtf8(""));
  CHECK(IsValidUtf8("plain ascii"));
  CHECK(IsValidUtf8("ünïcödé €  𝄞"));
  CHECK_FALSE(IsValidUtf8("\xff"));
  CHECK_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  CHECK_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate U+D800
  CHECK_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  CHECK_FALSE(IsValidUtf8("\xe2\x82"));          // truncated sequence
}

TEST_CASE("invalid_utf8_is_escaped_visibly_never_dropped", "[text]") {
  CHECK(EscapeInvalidUtf8("ok") == "ok");
  CHECK(EscapeInvalidUtf8("a\xff" "b") == "a\\xffb");
  CHECK(EscapeInvalidUtf8("€\xe2\x82") == "€\\xe2\\x82");
}

}  // namespace unit_text_test
