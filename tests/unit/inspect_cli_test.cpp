// inspect_cli_test.cpp — `trellara inspect-transaction --file` against the real binary:
// renders valid records, and refuses garbage with a message naming the file and the problem.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_support.h"
#include "samples.h"
#include "trellara/record/codec.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_inspect_cli_test {

using namespace trellara;

namespace {

using Run = testing::CliRun;
Run RunCommand(const std::string& args) { return testing::RunTrellara(args); }

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
  CHECK(text.all.find("record:          envelope") != std::string::npos);
  CHECK(text.all.find("checksum status: match") != std::string::npos);
  CHECK(text.all.find("doc=<unchanged-toast>") != std::string::npos);
  Run json = RunCommand("inspect-transaction --format json --file " + path);
  CHECK(json.exit_code == 0);
  CHECK(json.all.find("\"checksum_status\": \"match\"") != std::string::npos);
  CHECK(json.all.find("\"commit_lsn\": \"0/3A1F2B0\"") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("inspect_transaction_refuses_garbage_naming_file_and_problem", "[cli]") {
  std::string path = WriteTemp("garbage.pb", "\xde\xad\xbe\xef");
  Run r = RunCommand("inspect-transaction --file " + path);
  CHECK(r.exit_code == 1);
  CHECK(r.all.find(path) != std::string::npos);
  CHECK(r.all.find("not a valid trellara Record") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("snapshot_refuses_a_missing_config_and_bad_options_before_connecting", "[cli]") {
  Run missing = RunCommand("snapshot --config /nonexistent/flow.toml");
  CHECK(missing.exit_code == 2);
  CHECK(missing.all.find("/nonexistent/flow.toml") != std::string::npos);
  Run jobs = RunCommand("snapshot --config x.toml --jobs 0");
  CHECK(jobs.exit_code != 0);
  CHECK(jobs.all.find("--jobs") != std::string::npos);
  Run format = RunCommand("snapshot --config x.toml --format xml");
  CHECK(format.exit_code != 0);
  CHECK(format.all.find("--format") != std::string::npos);
}

TEST_CASE("version_and_help_list_the_planned_commands", "[cli]") {
  Run v = RunCommand("--version");
  CHECK(v.exit_code == 0);
  CHECK(v.all.find("trellara 0.1.0") != std::string::npos);
  Run h = RunCommand("--help");
  CHECK(h.exit_code == 0);
  for (const char* cmd : {"apply", "snapshot", "verify", "reseed", "status", "check", "log", "inspect-transaction",
                          "quarantine", "chaos"})
    CHECK(h.all.find(cmd) != std::string::npos);
}

TEST_CASE("check_refuses_a_missing_config_and_bad_options_with_exit_1", "[cli]") {
  Run missing = RunCommand("check --config /nonexistent/flow.toml");
  CHECK(missing.exit_code == 1);
  CHECK(missing.all.find("/nonexistent/flow.toml") != std::string::npos);
  Run no_config = RunCommand("check");
  CHECK(no_config.exit_code == 1);
  CHECK(no_config.all.find("--config") != std::string::npos);
  Run format = RunCommand("check --config x.toml --format xml");
  CHECK(format.exit_code == 1);
  CHECK(format.all.find("--format") != std::string::npos);
}

}  // namespace unit_inspect_cli_test
