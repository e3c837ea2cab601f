// duration.cpp — see duration.h.
#include "trellara/base/duration.h"

#include <charconv>
#include <limits>
#include <string>

namespace trellara {

Result<uint64_t> ParseDurationMs(std::string_view text, std::optional<uint64_t> bare_unit_ms) {
  if (text.empty()) return MakeError("it is empty");
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') digits++;
  if (digits == 0) return MakeError("there is no whole non-negative number before the unit");
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (ec == std::errc::result_out_of_range) return MakeError("the number is too large");
  if (ec != std::errc() || end != text.data() + digits) return MakeError("it does not start with a whole number");
  const std::string_view unit = text.substr(digits);
  uint64_t unit_ms = 0;
  if (unit.empty()) {
    if (!bare_unit_ms) return MakeError("it has no unit (ms, s, m or min, h)");
    unit_ms = *bare_unit_ms;
  } else if (unit == "ms") {
    unit_ms = 1;
  } else if (unit == "s") {
    unit_ms = 1000;
  } else if (unit == "m" || unit == "min") {
    unit_ms = 60 * 1000;
  } else if (unit == "h") {
    unit_ms = 3600 * 1000;
  } else {
    return MakeError("'" + std::string(unit) + "' is not a unit (ms, s, m or min, h)");
  }
  if (value > std::numeric_limits<uint64_t>::max() / unit_ms) return MakeError("the number is too large");
  return value * unit_ms;
}

}  // namespace trellara
