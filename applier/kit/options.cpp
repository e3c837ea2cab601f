// options.cpp — see options.h.
#include "kit/options.h"

#include <CLI/CLI.hpp>

#include <map>

namespace trellara::cli {

void AddFormatOption(CLI::App* cmd, OutputFormat& format) {
  static const std::map<std::string, OutputFormat> kFormats{{"text", OutputFormat::Text},
                                                            {"json", OutputFormat::Json}};
  cmd->add_option("--format", format, "output format: text or json (default text)")
      ->transform(CLI::CheckedTransformer(kFormats, CLI::ignore_case));
}

CLI::Option* AddConfigOption(CLI::App* cmd, std::string& config_path) {
  return cmd->add_option("--config", config_path, "the flow's TOML configuration file")->required();
}

}  // namespace trellara::cli
