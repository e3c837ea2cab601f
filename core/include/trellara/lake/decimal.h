// decimal.h — Iceberg decimal(P, S) values as unscaled 128-bit integers: the precision check, the
// Parquet FIXED_LEN_BYTE_ARRAY width of a precision, the big-endian two's complement forms Parquet
// and Iceberg store, and the exact text form Postgres prints (numeric's output).
//
// Nothing here rounds: a value with more fractional digits than the scale, or more digits than the
// precision, is an error, never a nearby value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "trellara/base/result.h"

namespace trellara::lake {

// GCC's 128-bit integer: 10^38 - 1 (the largest unscaled decimal(38, s)) needs 127 bits.
using Int128 = __int128;

// Iceberg: "precision must be 38 or less".
inline constexpr int kDecimalPrecisionMax = 38;
// Parquet stores decimal(P, S) as INT32 for P <= 9 and INT64 for P <= 18 (Iceberg spec, Parquet
// type mapping), FIXED_LEN_BYTE_ARRAY of DecimalFixedBytes(P) bytes above.
inline constexpr int kDecimalInt32PrecisionMax = 9;
inline constexpr int kDecimalInt64PrecisionMax = 18;

// 10^exponent, exponent 0..38.
Int128 PowerOfTen(int exponent);
// |unscaled| < 10^precision.
bool DecimalFitsPrecision(Int128 unscaled, int precision);
// The fewest bytes whose signed two's complement range holds every decimal of `precision` digits
// (Iceberg: "Fixed must use the minimum number of bytes that can store P").
int DecimalFixedBytes(int precision);
// `unscaled` in exactly `bytes` bytes (1..16), big-endian two's complement; the value must fit.
std::string DecimalBigEndian(Int128 unscaled, int bytes);
// `unscaled` in the fewest big-endian two's complement bytes that hold it (Iceberg's single-value
// serialization of a decimal: 0 -> 00, 127 -> 7F, 128 -> 00 80, -1 -> FF, -129 -> FF 7F).
std::string DecimalMinimalBigEndian(Int128 unscaled);

// Parses a decimal's text ("-12.30", "+5", ".5", "7.") into its unscaled value at `scale`. Fewer
// fractional digits are scaled up; more are accepted only when the extra digits are zeros. Errors
// say what is wrong with the text; the caller adds which column and row it is.
Result<Int128> ParseDecimalText(std::string_view text, int precision, int scale);
// The exact text of an unscaled value at `scale`: -1230 at scale 2 -> "-12.30".
std::string FormatDecimalText(Int128 unscaled, int scale);

// Parses a UUID's canonical text (8-4-4-4-12 hex digits, either case) into its 16 bytes in
// big-endian (RFC 4122 byte) order, as Parquet's UUID type and Iceberg store them.
Result<std::string> ParseUuidText(std::string_view text);

}  // namespace trellara::lake
