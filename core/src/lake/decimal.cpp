// decimal.cpp — exact decimal arithmetic for the lake: powers of ten, precision checks, byte
// forms and text. It must never round or truncate a value; every inexact case is an Error.
#include "trellara/lake/decimal.h"

#include <string>

#include "trellara/base/assert.h"
#include "trellara/base/text.h"

namespace trellara::lake {

Int128 PowerOfTen(int exponent) {
  TRELLARA_ASSERT(exponent >= 0 && exponent <= kDecimalPrecisionMax,
                  "power of ten " + std::to_string(exponent) + " outside 0..38");
  Int128 value = 1;
  for (int i = 0; i < exponent; i++) value *= 10;
  return value;
}

bool DecimalFitsPrecision(Int128 unscaled, int precision) {
  const Int128 limit = PowerOfTen(precision);
  return unscaled < limit && unscaled > -limit;
}

int DecimalFixedBytes(int precision) {
  const Int128 largest = PowerOfTen(precision) - 1;
  for (int bytes = 1; bytes < 16; bytes++) {
    // The largest positive value of a signed `bytes`-byte integer is 2^(8*bytes - 1) - 1.
    const Int128 signed_max = (Int128{1} << (8 * bytes - 1)) - 1;
    if (largest <= signed_max) return bytes;
  }
  return 16;
}

std::string DecimalBigEndian(Int128 unscaled, int bytes) {
  TRELLARA_ASSERT(bytes >= 1 && bytes <= 16, "decimal byte width " + std::to_string(bytes));
  std::string out(static_cast<size_t>(bytes), '\0');
  auto bits = static_cast<unsigned __int128>(unscaled);
  for (int i = bytes - 1; i >= 0; i--) {
    out[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint8_t>(bits));
    bits >>= 8;
  }
  return out;
}

std::string DecimalMinimalBigEndian(Int128 unscaled) {
  for (int bytes = 1; bytes < 16; bytes++) {
    const Int128 high = (Int128{1} << (8 * bytes - 1));
    if (unscaled < high && unscaled >= -high) return DecimalBigEndian(unscaled, bytes);
  }
  return DecimalBigEndian(unscaled, 16);
}

Result<Int128> ParseDecimalText(std::string_view text, int precision, int scale) {
  const std::string quoted = "'" + EscapeInvalidUtf8(text.substr(0, 64)) + (text.size() > 64 ? "...'" : "'");
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) negative = text[i++] == '-';
  Int128 unscaled = 0;
  int digits = 0;             // significant digits taken into `unscaled`
  int fraction_digits = -1;   // -1 until the decimal point
  bool any_digit = false;
  for (; i < text.size(); i++) {
    const char c = text[i];
    if (c == '.') {
      if (fraction_digits >= 0) return MakeError("decimal text " + quoted + " has two decimal points");
      fraction_digits = 0;
      continue;
    }
    if (c < '0' || c > '9') {
      return MakeError("decimal text " + quoted + " is not a decimal number (character '" + std::string(1, c) +
                       "' at offset " + std::to_string(i) + "; NaN and Infinity have no Iceberg decimal form)");
    }
    any_digit = true;
    if (fraction_digits >= 0) {
      if (fraction_digits == scale) {
        if (c != '0') {
          return MakeError("decimal text " + quoted + " has more than " + std::to_string(scale) +
                           " fractional digits (scale " + std::to_string(scale) + "); it would have to be rounded");
        }
        continue;  // a trailing zero beyond the scale changes nothing
      }
      fraction_digits++;
    }
    if (unscaled != 0 || c != '0') digits++;
    if (digits > kDecimalPrecisionMax) {
      return MakeError("decimal text " + quoted + " has more than " + std::to_string(kDecimalPrecisionMax) +
                       " significant digits");
    }
    unscaled = unscaled * 10 + (c - '0');
  }
  if (!any_digit) return MakeError("decimal text " + quoted + " has no digits");
  const int scale_up = scale - (fraction_digits < 0 ? 0 : fraction_digits);
  if (digits + scale_up > kDecimalPrecisionMax && unscaled != 0) {
    return MakeError("decimal text " + quoted + " does not fit decimal(" + std::to_string(precision) + ", " +
                     std::to_string(scale) + ")");
  }
  unscaled *= PowerOfTen(scale_up);
  if (negative) unscaled = -unscaled;
  if (!DecimalFitsPrecision(unscaled, precision)) {
    return MakeError("decimal text " + quoted + " does not fit decimal(" + std::to_string(precision) + ", " +
                     std::to_string(scale) + "): it has more than " + std::to_string(precision - scale) +
                     " digits before the decimal point");
  }
  return unscaled;
}

std::string FormatDecimalText(Int128 unscaled, int scale) {
  const bool negative = unscaled < 0;
  auto magnitude = negative ? -static_cast<unsigned __int128>(unscaled) : static_cast<unsigned __int128>(unscaled);
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(magnitude % 10)));
    magnitude /= 10;
  } while (magnitude != 0);
  if (scale > 0) {
    if (digits.size() <= static_cast<size_t>(scale)) {
      digits.insert(0, static_cast<size_t>(scale) + 1 - digits.size(), '0');
    }
    digits.insert(digits.size() - static_cast<size_t>(scale), ".");
  }
  return negative ? "-" + digits : digits;
}

Result<std::string> ParseUuidText(std::string_view text) {
  constexpr size_t kUuidTextBytes = 36;
  const std::string quoted = "'" + EscapeInvalidUtf8(text.substr(0, 64)) + "'";
  if (text.size() != kUuidTextBytes) {
    return MakeError("uuid text " + quoted + " is not 36 characters (8-4-4-4-12 hex digits)");
  }
  std::string bytes;
  int high = -1;
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return MakeError("uuid text " + quoted + " has no '-' at offset " + std::to_string(i));
      continue;
    }
    int nibble;
    if (c >= '0' && c <= '9') nibble = c - '0';
    else if (c >= 'a' && c <= 'f') nibble = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') nibble = c - 'A' + 10;
    else return MakeError("uuid text " + quoted + " has a non-hex character at offset " + std::to_string(i));
    if (high < 0) {
      high = nibble;
    } else {
      bytes.push_back(static_cast<char>((high << 4) | nibble));
      high = -1;
    }
  }
  return bytes;
}

}  // namespace trellara::lake
