// state_file.cpp — state files and time stamps (state_file.h).
#include "kit/state_file.h"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>

namespace trellara::cli {

std::string UtcNowText() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

void ReplaceStateFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) {
      std::cerr << "trellara: warning: cannot write " << tmp << "\n";
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::cerr << "trellara: warning: cannot replace " << path << "\n";
}

}  // namespace trellara::cli
