// chaos_command.cpp — `trellara chaos report --output FILE [--results DIR] [--matrix FILE]
// [--format html|json]` and `trellara chaos verify [--report F] [--results DIR] [--matrix FILE]`
// (the committed report describes the outcomes of this run; `make verify-correctness-report`,
// which CI runs after `make test`): reads the correctness matrix and the results files of one run, asks core
// (chaos_report.h) which rows are covered, and writes the report. An adapter only: it reads files,
// the revision and the clock; every decision is core's. It must never write a report from a
// matrix it could not read, nor from unreadable results (a missing result is shown as such, a
// corrupt one stops the command).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "kit/state_file.h"
#include "trellara/report/chaos_report.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace chaos_command {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

enum class ReportFormat { Html, Json };

std::string ReadFileOrFail(const fs::path& path, const std::string& what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw CommandFailed("cannot read " + what + " " + path.string() + ": " + std::strerror(errno), 2);
  }
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// The first line printed by `command`, or "" when it fails.
std::string FirstLineOf(const char* command) {
  FILE* pipe = ::popen(command, "r");
  if (pipe == nullptr) return {};
  char buffer[256] = {};
  std::string line;
  if (std::fgets(buffer, sizeof buffer, pipe) != nullptr) line = buffer;
  const int status = ::pclose(pipe);
  if (status != 0) return {};
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

// TRELLARA_SOURCE_REVISION (CI sets it), else the checkout's HEAD, marked when the tree has
// uncommitted changes (a report of a dirty tree does not describe that revision).
std::string SourceRevision() {
  if (const char* env = std::getenv("TRELLARA_SOURCE_REVISION"); env != nullptr && *env != '\0') return env;
  std::string head = FirstLineOf("git rev-parse HEAD 2>/dev/null");
  if (head.empty()) return "unknown (not a git checkout and TRELLARA_SOURCE_REVISION is unset)";
  if (!FirstLineOf("git status --porcelain --untracked-files=no 2>/dev/null").empty()) {
    head += " (with uncommitted changes)";
  }
  return head;
}

// Everything `command` prints, or nullopt when it fails.
std::optional<std::string> OutputOf(const char* command) {
  FILE* pipe = ::popen(command, "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  if (::pclose(pipe) != 0) return std::nullopt;
  return out;
}

// The committed report: excluded from the source tree it describes (it cannot describe itself).
constexpr const char* kCommittedReport = "docs/correctness-report.html";

// SourceTreeDigest of HEAD's tracked files without the committed report, marked when the checkout
// has other uncommitted changes (then it describes no commit and never verifies).
std::string SourceTree() {
  const auto listing = OutputOf("git -c safe.directory='*' ls-tree -r --full-tree HEAD 2>/dev/null");
  if (!listing || listing->empty()) return "unknown (not a git checkout: run from the repository root)";
  std::string tree = chaos::SourceTreeDigest(*listing, {kCommittedReport});
  const auto status = OutputOf("git -c safe.directory='*' status --porcelain --untracked-files=no 2>/dev/null");
  if (!status) return tree + " (git status failed)";
  std::istringstream lines(*status);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > 3 && line.substr(3) != kCommittedReport) return tree + " (with uncommitted changes)";
  }
  return tree;
}

// Every *.jsonl file of the results directory, in name order (scenarios.jsonl from the
// integration scripts, unit.jsonl and regress.jsonl from tests/run-all).
std::vector<chaos::ScenarioResult> ReadResults(const fs::path& dir) {
  std::vector<chaos::ScenarioResult> results;
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    std::cerr << "trellara: chaos report: no results directory " << dir.string()
              << "; every row with a scenario is reported as no_result (run tests/run-all, or set "
                 "TRELLARA_RESULTS_DIR when running a test script)\n";
    return results;
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".jsonl") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    auto parsed = chaos::ParseResults(ReadFileOrFail(file, "results file"), file.string());
    if (!parsed.ok()) throw CommandFailed(parsed.error().message + "; fix or remove that file and rerun", 2);
    for (auto& result : parsed.value()) results.push_back(std::move(result));
  }
  return results;
}

// The committed evidence of long qualification runs (`make soak` writes evidence/soak-*.jsonl), after
// this run's results: rows with status "evidence" are decided from them. A directory named with
// --evidence must exist; the default one (evidence/, relative to the working directory) may be
// absent — then those rows stay untested, and a note on stderr says where it was looked for.
std::vector<chaos::ScenarioResult> WithEvidence(std::vector<chaos::ScenarioResult> results,
                                                const std::string& evidence_dir, bool named) {
  std::error_code error;
  if (!fs::is_directory(evidence_dir, error)) {
    const std::string where = fs::absolute(evidence_dir, error).string();
    if (named)
      throw CommandFailed("evidence directory (--evidence) " + where + " does not exist; name the directory "
                          "make soak wrote into (default evidence/ at the repository root)", 2);
    std::cerr << "chaos: no qualification evidence at " << where
              << " (run from the repository root, or pass --evidence DIR): rows decided by evidence stay untested\n";
    return results;
  }
  for (auto& result : ReadResults(evidence_dir)) results.push_back(std::move(result));
  return results;
}

void WriteAtomically(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw CommandFailed("cannot write " + temporary.string() + ": " + std::strerror(errno), 1);
    out << text;
    out.flush();
    if (!out) throw CommandFailed("cannot write " + temporary.string() + ": " + std::strerror(errno), 1);
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) throw CommandFailed("cannot rename " + temporary.string() + " to " + path.string() + ": " + error.message(), 1);
}

struct ReportOptions {
  std::string output;
  std::string results_dir = "build/results";
  std::string evidence_dir = "evidence";
  bool evidence_named = false;  // --evidence given
  std::string matrix = "tests/chaos/matrix.json";
  ReportFormat format = ReportFormat::Html;
};

struct VerifyOptions {
  std::string report = kCommittedReport;
  std::string results_dir = "build/results";
  std::string evidence_dir = "evidence";
  bool evidence_named = false;  // --evidence given
  std::string matrix = "tests/chaos/matrix.json";
};

chaos::Report DecideFromFiles(const std::string& matrix_path, const std::string& results_dir,
                              const std::string& evidence_dir, bool evidence_named) {
  auto matrix = chaos::ParseMatrix(ReadFileOrFail(matrix_path, "matrix (--matrix)"));
  if (!matrix.ok()) throw CommandFailed(matrix_path + ": " + matrix.error().message, 2);
  return chaos::Decide(matrix.value(), WithEvidence(ReadResults(results_dir), evidence_dir, evidence_named));
}

// `trellara chaos verify`: the committed report must describe this checkout and this run.
void RunVerify(const VerifyOptions& options) {
  auto committed = chaos::ExtractVerifiedProjection(ReadFileOrFail(options.report, "committed report (--report)"),
                                                    options.report);
  if (!committed.ok()) throw CommandFailed(committed.error().message, 1);
  const chaos::Report report = DecideFromFiles(options.matrix, options.results_dir, options.evidence_dir, options.evidence_named);
  const chaos::ReportIdentity identity{SourceRevision(), "", options.results_dir, options.matrix, SourceTree(),
                                       chaos::MatrixDigest(ReadFileOrFail(options.matrix, "matrix (--matrix)"))};
  const std::string current = chaos::VerifiedProjection(report, identity);
  auto diffs = chaos::CompareVerifiedProjections(committed.value(), current);
  if (!diffs.ok()) throw CommandFailed(options.report + ": " + diffs.error().message, 1);
  const json committed_json = json::parse(committed.value(), nullptr, false);
  const std::string generated_at =
      committed_json.is_object() ? committed_json.value("revision", std::string("(not recorded)")) : "(unknown)";
  if (diffs->empty()) {
    std::cout << "chaos verify: " << options.report << " (generated at revision " << generated_at
              << ") matches the outcomes of this run of revision " << identity.revision << " (results in "
              << options.results_dir << ", matrix " << identity.matrix_digest << ", "
              << report.scenario_set.size() << " scenarios): overall " << report.overall << "\n";
    return;
  }
  std::cerr << "trellara: chaos verify: " << options.report << " (generated at revision " << generated_at
            << ") does not describe the outcomes of this run of revision " << identity.revision << " (results in "
            << options.results_dir << "; " << diffs->size() << " differences):\n";
  constexpr size_t kShown = 40;
  for (size_t i = 0; i < diffs->size() && i < kShown; ++i) std::cerr << "  " << (*diffs)[i] << "\n";
  if (diffs->size() > kShown) std::cerr << "  ... and " << diffs->size() - kShown << " more\n";
  throw CommandFailed("the committed correctness report differs from this run's outcomes (a row, a result, the "
                      "matrix or the set of scenarios changed); after a full `make test`, run `make "
                      "correctness-report` (it reads build/results) and commit " + options.report +
                      " (or fix what now fails)", 1);
}

void RunReport(const ReportOptions& options) {
  auto matrix = chaos::ParseMatrix(ReadFileOrFail(options.matrix, "matrix (--matrix)"));
  if (!matrix.ok()) throw CommandFailed(options.matrix + ": " + matrix.error().message, 2);
  const auto results = WithEvidence(ReadResults(options.results_dir), options.evidence_dir, options.evidence_named);
  const chaos::Report report = chaos::Decide(matrix.value(), results);
  const chaos::ReportIdentity identity{SourceRevision(), UtcNowText(), options.results_dir, options.matrix, SourceTree(),
                                       chaos::MatrixDigest(ReadFileOrFail(options.matrix, "matrix (--matrix)"))};
  WriteAtomically(options.output, options.format == ReportFormat::Json ? chaos::RenderJson(report, identity)
                                                                       : chaos::RenderHtml(report, identity));
  std::cout << "chaos report: overall " << report.overall << ", " << results.size() << " results";
  for (const auto& [status, count] : report.counts) std::cout << ", " << status << " " << count;
  std::cout << " -> " << options.output << "\n";
  for (const auto& warning : report.warnings) std::cerr << "trellara: chaos report: warning: " << warning << "\n";
  if (report.overall == "FAIL") {
    throw CommandFailed("the report was written, and it says FAIL: a row failed or a test of this run failed "
                        "(see " + options.output + ")", 1);
  }
}

}  // namespace
}  // namespace chaos_command

void RegisterChaos(CLI::App& app) {
  using namespace chaos_command;
  auto* chaos = app.add_subcommand("chaos", "the correctness suite's report");
  chaos->require_subcommand(1);
  auto options = std::make_shared<ReportOptions>();
  auto* report = chaos->add_subcommand(
      "report", "write the correctness report (seed 000's matrices) from the results of a test run");
  report->add_option("--output", options->output, "file to write (HTML or JSON)")->required();
  report->add_option("--results", options->results_dir,
                     "directory of *.jsonl results written by tests/run-all (default build/results)");
  report->add_option("--matrix", options->matrix, "the row matrix (default tests/chaos/matrix.json)");
  auto* report_evidence = report->add_option("--evidence", options->evidence_dir,
                     "directory of committed qualification evidence (*.jsonl from make soak; default evidence)");
  static const std::map<std::string, ReportFormat> kFormats{{"html", ReportFormat::Html},
                                                            {"json", ReportFormat::Json}};
  report->add_option("--format", options->format, "html or json (default html)")
      ->transform(CLI::CheckedTransformer(kFormats, CLI::ignore_case));
  report->callback([options, report_evidence] {
    options->evidence_named = report_evidence->count() > 0;
    RunReport(*options);
  });

  auto verify_options = std::make_shared<VerifyOptions>();
  auto* verify = chaos->add_subcommand(
      "verify", "check that the committed report describes this checkout and the results of this run "
                "(exit 0 when it does, 1 with the differences when not)");
  verify->add_option("--report", verify_options->report, "the committed report (default docs/correctness-report.html)");
  verify->add_option("--results", verify_options->results_dir, "directory of *.jsonl results (default build/results)");
  verify->add_option("--matrix", verify_options->matrix, "the row matrix (default tests/chaos/matrix.json)");
  auto* verify_evidence = verify->add_option("--evidence", verify_options->evidence_dir,
                     "directory of committed qualification evidence (default evidence)");
  verify->callback([verify_options, verify_evidence] {
    verify_options->evidence_named = verify_evidence->count() > 0;
    RunVerify(*verify_options);
  });
}

}  // namespace trellara::cli
