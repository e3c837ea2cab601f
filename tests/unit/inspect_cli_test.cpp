// inspect_cli_test.cpp — `trellara inspect-transaction --file` against the real binary:
// renders valid records, and refuses garbage with a message naming the file and the problem.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include "samples.h"
#include "trellara/codec.h"

using namespace trellara;

namespace {

struct Run {
  int exit_code;
  std::string output;  // stdout and stderr
};

Run RunCommand(const std::string& args) {
  std::string cmd = std::string(TRELLARA_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return Run{WIFEXITED(status) ? WEXITSTATUS(status) : 128, out};
}

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  std::string path = "/tmp/trellara-inspect-test-" + std::to_string(getpid()) + "-" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

TEST_CASE("inspect_transaction_renders_envelope_as_text_and_json", "[cli]") {
  auto bytes = EncodeRecord(Record(testing::SampleEnvelope()));
  REQUIRE(bytes.ok());
  std::string path = WriteTemp("envelope.pb", *bytes);
  Run text = RunCommand("inspect-transaction --file " + path);
  CHECK(text.exit_code == 0);
  CHECK(text.output.find("record:          envelope") != std::string::npos);
  CHECK(text.output.find("checksum status: match") != std::string::npos);
  CHECK(text.output.find("doc=<unchanged-toast>") != std::string::npos);
  Run json = RunCommand("inspect-transaction --format json --file " + path);
  CHECK(json.exit_code == 0);
  CHECK(json.output.find("\"checksum_status\": \"match\"") != std::string::npos);
  CHECK(json.output.find("\"commit_lsn\": \"0/3A1F2B0\"") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("inspect_transaction_refuses_garbage_naming_file_and_problem", "[cli]") {
  std::string path = WriteTemp("garbage.pb", "\xde\xad\xbe\xef");
  Run r = RunCommand("inspect-transaction --file " + path);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find(path) != std::string::npos);
  CHECK(r.output.find("not a valid trellara Record") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("version_and_help_list_the_planned_commands", "[cli]") {
  Run v = RunCommand("--version");
  CHECK(v.exit_code == 0);
  CHECK(v.output.find("trellara 0.1.0") != std::string::npos);
  Run h = RunCommand("--help");
  CHECK(h.exit_code == 0);
  for (const char* cmd : {"apply", "snapshot", "verify", "reseed", "status", "check", "log", "inspect-transaction",
                          "quarantine", "chaos"})
    CHECK(h.output.find(cmd) != std::string::npos);
  Run planned = RunCommand("snapshot --config x.toml");
  CHECK(planned.exit_code == 2);
  CHECK(planned.output.find("planned but not available") != std::string::npos);
}
