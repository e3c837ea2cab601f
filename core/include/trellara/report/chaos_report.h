// chaos_report.h — the correctness report's decisions: which seed-000 row is covered by a run.
//
// Inputs are text, never files: the matrix (tests/chaos/matrix.json: every row, the scenarios that
// prove it, its paired defect or why it is not built) and the results of one run (JSON lines, one
// per scenario, written by tests/integration/capture_support.py and tests/run-all). The adapter
// (applier/commands/chaos_command.cpp) reads the files and writes what Render* return.
//
// The one rule (DESIGN §8, seed 002): a row is `covered` only when every clean scenario that
// proves it passed in these results, every fault point those scenarios declare fired at least
// once, and its paired defect was run and caught. A row whose scenario has no result is
// `no_result`, never passed; a row proven without a paired defect is `unpaired`, never covered.
// This file must never read files or the clock, and never mark a row covered from the matrix alone.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trellara/base/result.h"

namespace trellara::chaos {

enum class RowStatus {
  kCovered,   // clean passed, faults fired, paired defect caught
  kUnpaired,  // clean passed (faults fired) but the row has no paired defect
  kFailed,    // a clean scenario failed, a declared fault never fired, or the defect was not caught
  kNoResult,  // a scenario the row needs has no result in this run
  kNotBuilt,  // the feature is not built (the matrix says why)
  kUntested,  // the feature exists but no scenario is bound to the row (the matrix says why)
};
std::string_view RowStatusName(RowStatus status);

// A scenario as the matrix names it: kind is "integration", "ctest", "pg_regress" or "simulation"
// (tests/sim: a named simulation, or NAME__defect_D for its paired defect run).
struct ScenarioRef {
  std::string kind;
  std::string name;
  std::string script;  // integration only; informational (may be a glob while the file is planned)
};

// A row proven by a long qualification run outside CI (`make soak`): its proof is a result of
// `kind` (e.g. "soak") in the committed evidence directory that lasted at least min_duration_s.
struct EvidenceSpec {
  std::string kind;
  double min_duration_s = 0;
};

struct MatrixRow {
  std::string name;
  std::string suite;
  std::string failure_point;
  std::string boundary;
  std::string invariant;
  std::string safety_property;
  std::string recovery;
  std::string seed_proof;      // the seed's own proof command, for reference
  std::string planned;         // "planned", "not_built", "untested" or "evidence"
  std::string reason;          // why not built / untested
  std::string note;
  std::vector<ScenarioRef> proof;
  std::optional<std::string> defect_name;
  std::optional<ScenarioRef> defect_scenario;  // unset with a defect_name: any result pairing with a proof
  std::optional<EvidenceSpec> evidence;        // status "evidence": proven by a qualification run's result
};

struct ScenarioResult {
  std::string kind;
  std::string name;
  std::string script;
  std::string suite;
  std::string status;  // "passed", "failed", "interrupted"
  std::string command;
  std::string error;
  std::string defect;
  std::string pairs_with;
  double duration_s = 0;
  std::vector<std::string> seed_rows;
  std::vector<std::string> fault_points;
  std::vector<std::string> invariants;
  std::map<std::string, int> faults_fired;
  // Evidence of a qualification run (evidence/*.jsonl, `make soak`): where and when it ran.
  std::string revision;     // the source revision the run used
  std::string finished_at;  // UTC, ISO 8601

  bool passed() const { return status == "passed"; }
};

struct RowDecision {
  MatrixRow row;
  RowStatus status = RowStatus::kNoResult;
  std::string detail;                 // why this status, for a person
  std::string command;                // reproduces the clean scenario(s)
  int proof_passed = 0;               // clean scenarios passed / listed
  int proof_total = 0;
  std::map<std::string, int> faults_fired;
  std::string defect;                 // the defect's name, empty when unpaired
  std::string defect_command;
  std::optional<bool> defect_caught;  // unset: no defect result
};

struct Report {
  std::vector<RowDecision> rows;
  std::vector<ScenarioResult> other_results;  // results no row refers to
  std::vector<std::string> warnings;          // e.g. a scenario claiming a row the matrix does not bind it to
  std::map<std::string, int> counts;          // status name -> rows
  std::string overall;                        // "PASS", "FAIL" or "INCOMPLETE"
  std::vector<std::string> scenario_set;      // "kind script name" of every result, sorted, unique
};

// Where and when the report was made; the adapter fills it.
struct ReportIdentity {
  std::string revision;      // source revision (git rev-parse HEAD or TRELLARA_SOURCE_REVISION)
  std::string generated_at;  // UTC, ISO 8601
  std::string results_dir;
  std::string matrix_path;
  std::string source_tree;   // SourceTreeDigest of the checkout the tests ran on (see below)
  std::string matrix_digest; // MatrixDigest of the matrix file's text
};

// tests/chaos/matrix.json -> rows. Errors name the row and the field.
Result<std::vector<MatrixRow>> ParseMatrix(std::string_view json_text);

// One results file (JSON lines). Blank lines are skipped; a line that is not a result object is an
// error naming `source` and the line number. Results are returned in file order.
Result<std::vector<ScenarioResult>> ParseResults(std::string_view jsonl_text, std::string_view source);

// The command that reruns `ref` when no result supplies one.
std::string DefaultCommand(const ScenarioRef& ref);

// The decisions. When a scenario has several results (reruns), the last one counts.
Report Decide(const std::vector<MatrixRow>& matrix, const std::vector<ScenarioResult>& results);

// Rendering. JSON rows carry exactly `name`, `suite`, `status`, `command`, `defect`,
// `defect_command`, `defect_caught` plus the descriptive fields. HTML is self-contained and every
// value in it is escaped.
std::string RenderJson(const Report& report, const ReportIdentity& identity);
std::string RenderHtml(const Report& report, const ReportIdentity& identity);
std::string HtmlEscape(std::string_view text);

// ---- The committed report and `make verify-correctness-report` -------------------------------
//
// docs/correctness-report.html is committed, and CI checks that it describes what this commit's
// run produced — by outcome, not by source: a code change that changes no outcome leaves the
// committed report verified. Some of a report is different on every run (when it was generated,
// the results directory, how many times a fault fired, the revision); the *verified projection*
// is what must be equal: the matrix (its digest), the set of scenarios that ran, overall, counts,
// per row its status, commands, paired defect, whether it was caught, scenarios passed/listed and
// the fault points that fired, plus passed/failed per kind of the other results. The revision and
// source tree the report was generated from travel in the projection for a person and are not
// compared. The HTML carries it in a <script type="application/json" id="trellara-verified">.

// "sha256:<hex>" of the matrix file's text (a changed matrix makes a committed report stale).
std::string MatrixDigest(std::string_view matrix_text);

// "sha256:<hex>" over the lines of `ls_tree_output` whose path is not in `excluded_paths`.
std::string SourceTreeDigest(std::string_view ls_tree_output, const std::vector<std::string>& excluded_paths);

// The verified projection as canonical JSON text (keys sorted, one value per line).
std::string VerifiedProjection(const Report& report, const ReportIdentity& identity);

// The projection embedded in a report written by RenderHtml. Fails (naming `source`) when the
// text has no such block or it is not JSON.
Result<std::string> ExtractVerifiedProjection(std::string_view html, std::string_view source);

// What differs between the committed projection and this run's, one line per difference, for a
// person ("row X: status covered in the committed report, failed in this run"); empty when equal.
// Fails when either text is not a projection.
Result<std::vector<std::string>> CompareVerifiedProjections(std::string_view committed, std::string_view current);

}  // namespace trellara::chaos
