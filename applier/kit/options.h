// options.h — the command-line options every command registers the same way.
#pragma once

// CLI11 is declared, not included: only the files that register options include <CLI/CLI.hpp>
// (about 5 s of compile time per file that parses it).
namespace CLI {
class App;
class Option;
}  // namespace CLI

#include <string>

namespace trellara::cli {

enum class OutputFormat { Text, Json };

// Adds `--format text|json` (default text) to a subcommand.
void AddFormatOption(CLI::App* cmd, OutputFormat& format);

// Adds the required `--config F` (the flow's TOML configuration file) to a subcommand.
CLI::Option* AddConfigOption(CLI::App* cmd, std::string& config_path);

}  // namespace trellara::cli
