// options.h — the command-line options every command registers the same way.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace trellara::cli {

enum class OutputFormat { Text, Json };

// Adds `--format text|json` (default text) to a subcommand.
void AddFormatOption(CLI::App* cmd, OutputFormat& format);

// Adds the required `--config F` (the flow's TOML configuration file) to a subcommand.
CLI::Option* AddConfigOption(CLI::App* cmd, std::string& config_path);

}  // namespace trellara::cli
