// cli_support.h — runs the real `trellara` binary (TRELLARA_BIN) for the CLI tests: exit code,
// stdout alone, and stdout + stderr together.
#pragma once

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace trellara::testing {

struct CliRun {
  int exit_code;
  std::string out;  // stdout
  std::string all;  // stdout and stderr
};

inline CliRun RunTrellara(const std::string& args) {
  const std::string err_path = "/tmp/trellara-cli-test-stderr-" + std::to_string(getpid());
  // Appended piece by piece: GCC 12 reports a false array-bounds error on the `literal + ...`
  // chain here at -O1.
  std::string cmd = TRELLARA_BIN;
  cmd.append(" ").append(args).append(" 2>").append(err_path);
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  std::ifstream err_in(err_path);
  std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  std::remove(err_path.c_str());
  return CliRun{WIFEXITED(status) ? WEXITSTATUS(status) : 128, out, out + err};
}

}  // namespace trellara::testing
