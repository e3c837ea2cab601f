// errors.h — how a `trellara` command fails: it throws CommandFailed with a message for the
// operator (what failed, on which object, what to do next) and an exit code from
// trellara/base/exit_codes.h; main() prints "trellara: <message>" to stderr and exits with it.
#pragma once

#include <stdexcept>
#include <string>

#include "trellara/base/exit_codes.h"

namespace trellara::cli {

struct CommandFailed : std::runtime_error {
  CommandFailed(const std::string& message, int exit_code_ = kExitFailed)
      : std::runtime_error(message), exit_code(exit_code_) {}
  int exit_code;
};

}  // namespace trellara::cli
