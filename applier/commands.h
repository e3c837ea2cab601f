// commands.h — the `trellara` command's subcommands; each lives in its own file.
//
// A Register* function adds its subcommand(s) to the CLI11 app and sets the callback. Callbacks
// report failure by throwing CommandFailed (message for the operator, exit code); main() prints
// it to stderr as "trellara: <message>" and exits with that code.
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>

namespace trellara::cli {

struct CommandFailed : std::runtime_error {
  CommandFailed(const std::string& message, int exit_code_ = 1)
      : std::runtime_error(message), exit_code(exit_code_) {}
  int exit_code;
};

enum class OutputFormat { Text, Json };
// Adds `--format text|json` to a subcommand.
void AddFormatOption(CLI::App* cmd, OutputFormat& format);

void RegisterInspectTransaction(CLI::App& app);
// `apply --config F [--until-caught-up]` (apply_command.cpp).
void RegisterApply(CLI::App& app);
void RegisterLogCommands(CLI::App& app);
// `log records`; call after RegisterLogCommands (it adds to the `log` subcommand).
void RegisterLogRecords(CLI::App& app);

}  // namespace trellara::cli
