// chaos_cli_test.cpp — `trellara chaos report` as an operator runs it (the real binary): it writes
// the JSON/HTML report from a matrix and a results directory, exits 1 after writing a FAIL report,
// 2 when the matrix or a results file cannot be read, and reports a missing results directory as
// rows without results rather than as passed. And `trellara chaos verify` (what
// `make verify-correctness-report` runs in CI) in a real git checkout: it passes only for the
// commit and the results the committed report describes.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_support.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_chaos_cli_test {

namespace fs = std::filesystem;
using trellara::testing::RunTrellara;

namespace {

const char* kMatrix = R"({"rows": [
  {"name": "row_a", "suite": "curated", "status": "planned",
   "proof": [{"kind": "ctest", "name": "clean_a"}],
   "defect": {"name": "defect_a", "scenario": {"kind": "ctest", "name": "negative_a"}}},
  {"name": "row_b", "suite": "simulation_replayable", "status": "not_built", "reason": "no simulator"}]})";

struct Workspace {
  fs::path dir;
  Workspace() {
    dir = fs::temp_directory_path() / ("trellara-chaos-cli-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "results");
    Write("matrix.json", kMatrix);
  }
  ~Workspace() { fs::remove_all(dir); }
  void Write(const std::string& name, const std::string& text) const { std::ofstream(dir / name) << text; }
  std::string Read(const std::string& name) const {
    std::ifstream in(dir / name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::string Args(const std::string& output, const std::string& extra = "") const {
    return "chaos report --matrix " + (dir / "matrix.json").string() + " --results " + (dir / "results").string() +
           " --output " + (dir / output).string() + " " + extra;
  }
};

}  // namespace

TEST_CASE("chaos_report_writes_json_with_the_rows_decided_from_the_results", "[chaos_report][cli]") {
  Workspace ws;
  ws.Write("results/unit.jsonl", R"({"kind": "ctest", "name": "clean_a", "status": "passed"})"
                                 "\n"
                                 R"({"kind": "ctest", "name": "negative_a", "status": "passed", "defect": "defect_a"})"
                                 "\n");
  auto run = RunTrellara(ws.Args("report.json", "--format json"));
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("overall PASS"));
  auto report = nlohmann::json::parse(ws.Read("report.json"));
  CHECK(report["overall"] == "PASS");
  CHECK(report["rows"].size() == 2);
  for (const auto& row : report["rows"]) {
    if (row["name"] == "row_a") {
      CHECK(row["status"] == "covered");
      CHECK(row["defect_caught"] == true);
    } else {
      CHECK(row["status"] == "not_built");
    }
  }
  auto html = RunTrellara(ws.Args("report.html"));
  REQUIRE(html.exit_code == 0);
  CHECK_THAT(ws.Read("report.html"), Catch::StartsWith("<!DOCTYPE html>") && Catch::Contains("no simulator"));
}

TEST_CASE("chaos_report_exits_1_after_writing_a_failing_report", "[chaos_report][cli]") {
  Workspace ws;
  ws.Write("results/unit.jsonl", R"({"kind": "ctest", "name": "clean_a", "status": "passed"})"
                                 "\n"
                                 R"({"kind": "ctest", "name": "negative_a", "status": "failed"})"
                                 "\n");
  auto run = RunTrellara(ws.Args("report.json", "--format json"));
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.all, Catch::Contains("says FAIL"));
  CHECK(nlohmann::json::parse(ws.Read("report.json"))["overall"] == "FAIL");
}

TEST_CASE("chaos_report_without_results_shows_no_result_never_pass", "[chaos_report][cli]") {
  Workspace ws;
  fs::remove_all(ws.dir / "results");
  auto run = RunTrellara(ws.Args("report.json", "--format json"));
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.all, Catch::Contains("no results directory"));
  auto report = nlohmann::json::parse(ws.Read("report.json"));
  CHECK(report["overall"] == "INCOMPLETE");
  CHECK(report["rows"][1]["status"] == "no_result");  // row_a (curated) after the simulation row
}

TEST_CASE("chaos_report_refuses_an_unreadable_matrix_or_results_file", "[chaos_report][cli]") {
  Workspace ws;
  ws.Write("results/scenarios.jsonl", "not json\n");
  auto corrupt = RunTrellara(ws.Args("report.json"));
  CHECK(corrupt.exit_code == 2);
  CHECK_THAT(corrupt.all, Catch::Contains("scenarios.jsonl line 1"));
  CHECK_FALSE(fs::exists(ws.dir / "report.json"));
  auto missing = RunTrellara("chaos report --matrix /nonexistent/matrix.json --output " + (ws.dir / "r").string());
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.all, Catch::Contains("--matrix"));
}

namespace {
// Runs `command` through the shell in `dir`; its exit status.
int Shell(const fs::path& dir, const std::string& command) {
  return std::system(("cd " + dir.string() + " && " + command + " >/dev/null 2>&1").c_str());
}

// The test process's working directory moves into `dir` while this lives (the command reads git in
// its working directory, as `make verify-correctness-report` runs it from the source root).
struct InDirectory {
  fs::path previous = fs::current_path();
  explicit InDirectory(const fs::path& dir) { fs::current_path(dir); }
  ~InDirectory() { fs::current_path(previous); }
};
}  // namespace

TEST_CASE("chaos_verify_passes_only_for_the_outcomes_the_committed_report_describes",
          "[chaos_report][cli]") {
  Workspace ws;
  const std::string passing = R"({"kind": "ctest", "name": "clean_a", "status": "passed"})"
                              "\n"
                              R"({"kind": "ctest", "name": "negative_a", "status": "passed", "defect": "defect_a"})"
                              "\n";
  ws.Write("results/unit.jsonl", passing);
  fs::create_directories(ws.dir / "docs");
  const std::string git = "git -c user.name=t -c user.email=t@example.invalid -c safe.directory='*' ";
  REQUIRE(Shell(ws.dir, "git init -q . && " + git + "add matrix.json && " + git + "commit -q -m tree") == 0);
  InDirectory in(ws.dir);
  const std::string where = " --matrix matrix.json --results results";
  REQUIRE(RunTrellara("chaos report --output docs/correctness-report.html" + where).exit_code == 0);
  REQUIRE(Shell(ws.dir, git + "add docs/correctness-report.html && " + git + "commit -q -m report") == 0);

  auto fresh = RunTrellara("chaos verify --report docs/correctness-report.html" + where);
  CHECK(fresh.exit_code == 0);
  CHECK_THAT(fresh.out, Catch::Contains("matches the outcomes"));

  // Another run whose defect was not caught: the row and the overall status are named.
  ws.Write("results/unit.jsonl", R"({"kind": "ctest", "name": "clean_a", "status": "passed"})"
                                 "\n"
                                 R"({"kind": "ctest", "name": "negative_a", "status": "failed", "defect": "defect_a"})"
                                 "\n");
  auto differs = RunTrellara("chaos verify --report docs/correctness-report.html" + where);
  CHECK(differs.exit_code == 1);
  CHECK_THAT(differs.all, Catch::Contains("row curated/row_a: status \"covered\" in the committed report, "
                                          "\"failed\" in this run") &&
                              Catch::Contains("make correctness-report"));
  ws.Write("results/unit.jsonl", passing);

  // A code change that alters no outcome: still verified, naming both revisions.
  ws.Write("code.txt", "a change\n");
  REQUIRE(Shell(ws.dir, git + "add code.txt && " + git + "commit -q -m code") == 0);
  auto unchanged = RunTrellara("chaos verify --report docs/correctness-report.html" + where);
  CHECK(unchanged.exit_code == 0);
  CHECK_THAT(unchanged.out, Catch::Contains("generated at revision") && Catch::Contains("matches the outcomes"));

  // The matrix changed: the report is stale, though every row is equal.
  ws.Write("matrix.json", std::string(kMatrix) + "\n");
  REQUIRE(Shell(ws.dir, git + "commit -q -am change") == 0);
  auto stale = RunTrellara("chaos verify --report docs/correctness-report.html" + where);
  CHECK(stale.exit_code == 1);
  CHECK_THAT(stale.all, Catch::Contains("matrix: \"sha256:"));
}

}  // namespace unit_chaos_cli_test
