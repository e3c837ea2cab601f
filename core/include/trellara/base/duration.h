// duration.h — durations people write in settings and command-line options (one parser for all of
// them: apply.early_apply_idle, trellara soak --duration/--pause/--settle-timeout).
//
// Accepted: "<N>ms", "<N>s", "<N>m" or "<N>min", "<N>h" — N a whole non-negative decimal number,
// no sign, no fraction, no space, one unit; a bare "<N>" only where the caller gives its unit.
// The result is in milliseconds. The error says what is wrong with the text; the caller names the
// setting or option and its bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "trellara/base/result.h"

namespace trellara {

Result<uint64_t> ParseDurationMs(std::string_view text, std::optional<uint64_t> bare_unit_ms = std::nullopt);

}  // namespace trellara
