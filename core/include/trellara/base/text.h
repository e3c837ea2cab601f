// text.h — UTF-8 checks for strings that cross into JSON, error messages and Postgres.
//
// A source database need not be UTF-8, and a corrupt record can carry any bytes. These helpers
// never drop or replace bytes silently: invalid bytes become visible \xNN escapes.
#pragma once

#include <string>
#include <string_view>

namespace trellara {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 if the bytes there are not one
// (overlong forms, surrogates and code points above U+10FFFF are invalid, as in RFC 3629).
size_t Utf8SequenceLength(std::string_view s, size_t i);
bool IsValidUtf8(std::string_view s);
// s with every byte that is not part of a valid UTF-8 sequence written as \xNN.
std::string EscapeInvalidUtf8(std::string_view s);

}  // namespace trellara
