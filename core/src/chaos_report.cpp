// chaos_report.cpp — decides each correctness-report row from the matrix and one run's results,
// and renders the report as JSON or self-contained HTML. Pure functions of their inputs: no files,
// no clock. Never marks a row covered unless this run's results earned it (chaos_report.h).
#include "trellara/chaos_report.h"

#include <cstdint>
#include <span>

#include "trellara/checksum.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

namespace trellara::chaos {

namespace {

using nlohmann::json;

constexpr std::string_view kKindIntegration = "integration";
constexpr std::string_view kKindCtest = "ctest";
constexpr std::string_view kKindRegress = "pg_regress";
constexpr std::string_view kKindSimulation = "simulation";  // tests/sim (trellara_sim), sim.jsonl

// Display order of the suites: the seed's order, then ours.
constexpr std::string_view kSuiteOrder[] = {
    "simulation_replayable", "simulation_snapshot_handoff", "simulation_strict_chunk",
    "simulation_fleet_fanin", "simulation_qualification",    "curated",
    "design",
};

std::string SuiteTitle(std::string_view suite) {
  if (suite == "simulation_replayable") return "Replayable Simulation Suite";
  if (suite == "simulation_snapshot_handoff") return "Snapshot Handoff Simulation Suite";
  if (suite == "simulation_strict_chunk") return "Strict Chunk Simulation Suite";
  if (suite == "simulation_fleet_fanin") return "Fleet Fan-In Lake Simulation Suite";
  if (suite == "simulation_qualification") return "Lane D Qualification Suite";
  if (suite == "curated") return "Curated Failure Matrix";
  if (suite == "design") return "Trellara Boundaries (DESIGN §2, not in seed 000)";
  return std::string(suite);
}

std::string StringField(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

std::vector<std::string> StringList(const json& object, const char* key) {
  std::vector<std::string> out;
  auto it = object.find(key);
  if (it == object.end() || !it->is_array()) return out;
  for (const auto& item : *it) {
    if (item.is_string()) out.push_back(item.get<std::string>());
  }
  return out;
}

Result<ScenarioRef> ParseRef(const json& value, const std::string& where) {
  if (!value.is_object()) return MakeError(where + ": a scenario must be an object {kind, name[, script]}");
  ScenarioRef ref{StringField(value, "kind"), StringField(value, "name"), StringField(value, "script")};
  if (ref.kind != kKindIntegration && ref.kind != kKindCtest && ref.kind != kKindRegress &&
      ref.kind != kKindSimulation) {
    return MakeError(where + ": kind '" + ref.kind + "' is not one of integration, ctest, pg_regress, simulation");
  }
  if (ref.name.empty()) return MakeError(where + ": a scenario has no name");
  return ref;
}

std::string Key(std::string_view kind, std::string_view name) {
  return std::string(kind) + "\x1f" + std::string(name);
}

std::string JoinCommands(const std::vector<std::string>& commands) {
  std::string out;
  std::set<std::string> seen;
  for (const auto& command : commands) {
    if (command.empty() || !seen.insert(command).second) continue;
    if (!out.empty()) out += " && ";
    out += command;
  }
  return out;
}

// The clean half, the faults and the defect, in that order of precedence for the detail text.
RowDecision DecideRow(const MatrixRow& row, const std::map<std::string, const ScenarioResult*>& latest,
                      const std::vector<const ScenarioResult*>& ordered) {
  RowDecision decision;
  decision.row = row;
  decision.proof_total = static_cast<int>(row.proof.size());
  decision.defect = row.defect_name.value_or("");

  std::vector<std::string> commands;
  for (const auto& ref : row.proof) {
    auto it = latest.find(Key(ref.kind, ref.name));
    commands.push_back(it != latest.end() && !it->second->command.empty() ? it->second->command
                                                                         : DefaultCommand(ref));
  }
  decision.command = JoinCommands(commands);

  if (row.planned == "not_built") {
    decision.status = RowStatus::kNotBuilt;
    decision.detail = row.reason;
    return decision;
  }
  if (row.planned == "untested" || row.proof.empty()) {
    decision.status = RowStatus::kUntested;
    decision.detail = row.reason.empty() ? "no scenario is bound to this row" : row.reason;
    return decision;
  }

  std::vector<std::string> failures;
  std::vector<std::string> missing;
  for (const auto& ref : row.proof) {
    auto it = latest.find(Key(ref.kind, ref.name));
    if (it == latest.end()) {
      missing.push_back(ref.name);
      continue;
    }
    const ScenarioResult& result = *it->second;
    for (const auto& [point, count] : result.faults_fired) decision.faults_fired[point] += count;
    if (!result.passed()) {
      failures.push_back(ref.name + " " + result.status + (result.error.empty() ? "" : ": " + result.error));
      continue;
    }
    bool fired_all = true;
    for (const auto& point : result.fault_points) {
      auto fired = result.faults_fired.find(point);
      if (fired == result.faults_fired.end() || fired->second <= 0) {
        failures.push_back(ref.name + ": fault point " + point + " never fired (a scenario whose fault never "
                           "fired proves nothing)");
        fired_all = false;
      }
    }
    if (fired_all) decision.proof_passed += 1;
  }

  // The paired defect: named in the matrix, or any result declaring it pairs with a proof scenario.
  const ScenarioResult* defect_result = nullptr;
  std::optional<ScenarioRef> defect_ref = row.defect_scenario;
  if (defect_ref) {
    auto it = latest.find(Key(defect_ref->kind, defect_ref->name));
    if (it != latest.end()) defect_result = it->second;
  } else if (row.defect_name) {
    std::set<std::string> proof_names;
    for (const auto& ref : row.proof) proof_names.insert(ref.name);
    for (const ScenarioResult* result : ordered) {  // last matching line wins
      if (!result->pairs_with.empty() && proof_names.count(result->pairs_with) && !result->defect.empty()) {
        defect_result = result;
      }
    }
    if (defect_result != nullptr) {
      defect_ref = ScenarioRef{defect_result->kind, defect_result->name, defect_result->script};
      defect_result = latest.at(Key(defect_result->kind, defect_result->name));
    }
  }
  if (defect_ref) {
    decision.defect_command = defect_result != nullptr && !defect_result->command.empty()
                                  ? defect_result->command
                                  : DefaultCommand(*defect_ref);
  }
  if (defect_result != nullptr) {
    if (!defect_result->defect.empty() && decision.defect.empty()) decision.defect = defect_result->defect;
    bool caught = defect_result->passed();
    for (const auto& point : defect_result->fault_points) {
      auto fired = defect_result->faults_fired.find(point);
      if (fired == defect_result->faults_fired.end() || fired->second <= 0) {
        caught = false;  // a failure before the fault fired is a harness failure, not a caught defect
        failures.push_back(defect_ref->name + ": fault point " + point + " never fired in the defect run");
      }
    }
    decision.defect_caught = caught;
    if (!defect_result->passed()) {
      failures.push_back("paired defect " + decision.defect + " not caught (" + defect_ref->name + " " +
                         defect_result->status + (defect_result->error.empty() ? "" : ": " + defect_result->error) +
                         ")");
    }
  }

  if (!failures.empty()) {
    decision.status = RowStatus::kFailed;
    decision.detail = failures.front();
    for (size_t i = 1; i < failures.size(); ++i) decision.detail += "; " + failures[i];
    return decision;
  }
  if (!missing.empty()) {
    decision.status = RowStatus::kNoResult;
    decision.detail = "no result for " + missing.front();
    for (size_t i = 1; i < missing.size(); ++i) decision.detail += ", " + missing[i];
    decision.detail += " in this run";
    return decision;
  }
  if (!row.defect_name && !row.defect_scenario) {
    decision.status = RowStatus::kUnpaired;
    decision.detail = "clean scenarios passed; no paired defect yet" + (row.note.empty() ? "" : " (" + row.note + ")");
    return decision;
  }
  if (defect_result == nullptr) {
    decision.status = RowStatus::kNoResult;
    decision.detail = "clean scenarios passed; the paired defect " + decision.defect + " has no result in this run";
    return decision;
  }
  decision.status = RowStatus::kCovered;
  decision.detail = "clean passed, paired defect caught";
  return decision;
}

int SuiteRank(std::string_view suite) {
  for (size_t i = 0; i < std::size(kSuiteOrder); ++i) {
    if (kSuiteOrder[i] == suite) return static_cast<int>(i);
  }
  return static_cast<int>(std::size(kSuiteOrder));
}

json ResultJson(const ScenarioResult& r) {
  return json{{"kind", r.kind},     {"name", r.name},   {"script", r.script},
              {"suite", r.suite},   {"status", r.status}, {"command", r.command},
              {"defect", r.defect.empty() ? json(nullptr) : json(r.defect)},
              {"error", r.error.empty() ? json(nullptr) : json(r.error)}};
}

}  // namespace

std::string_view RowStatusName(RowStatus status) {
  switch (status) {
    case RowStatus::kCovered: return "covered";
    case RowStatus::kUnpaired: return "unpaired";
    case RowStatus::kFailed: return "failed";
    case RowStatus::kNoResult: return "no_result";
    case RowStatus::kNotBuilt: return "not_built";
    case RowStatus::kUntested: return "untested";
  }
  return "unknown";
}

Result<std::vector<MatrixRow>> ParseMatrix(std::string_view json_text) {
  json document = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return MakeError("the matrix is not valid JSON");
  if (!document.is_object() || !document.contains("rows") || !document["rows"].is_array()) {
    return MakeError("the matrix has no \"rows\" array");
  }
  std::vector<MatrixRow> rows;
  std::set<std::string> names;
  size_t index = 0;
  for (const auto& item : document["rows"]) {
    ++index;
    if (!item.is_object()) return MakeError("matrix row " + std::to_string(index) + " is not an object");
    MatrixRow row;
    row.name = StringField(item, "name");
    const std::string where = "matrix row " + std::to_string(index) + " (" + row.name + ")";
    if (row.name.empty()) return MakeError(where + ": no name");
    if (!names.insert(row.name + "\x1f" + StringField(item, "suite")).second) {
      return MakeError(where + ": listed twice in suite " + StringField(item, "suite"));
    }
    row.suite = StringField(item, "suite");
    row.failure_point = StringField(item, "failure_point");
    row.boundary = StringField(item, "boundary");
    row.invariant = StringField(item, "invariant");
    row.safety_property = StringField(item, "safety_property");
    row.recovery = StringField(item, "recovery");
    row.seed_proof = StringField(item, "seed_proof");
    row.planned = StringField(item, "status");
    row.reason = StringField(item, "reason");
    row.note = StringField(item, "note");
    if (row.planned != "planned" && row.planned != "not_built" && row.planned != "untested") {
      return MakeError(where + ": status '" + row.planned + "' is not one of planned, not_built, untested");
    }
    if (row.planned != "planned" && row.reason.empty()) {
      return MakeError(where + ": a " + row.planned + " row must say why (reason)");
    }
    if (item.contains("proof") && item["proof"].is_array()) {
      for (const auto& ref : item["proof"]) {
        auto parsed = ParseRef(ref, where + " proof");
        if (!parsed.ok()) return parsed.error();
        row.proof.push_back(std::move(parsed).value());
      }
    }
    if (item.contains("defect") && item["defect"].is_object()) {
      const json& defect = item["defect"];
      std::string name = StringField(defect, "name");
      if (name.empty()) return MakeError(where + ": a defect needs a name");
      row.defect_name = name;
      if (defect.contains("scenario") && !defect["scenario"].is_null()) {
        auto parsed = ParseRef(defect["scenario"], where + " defect");
        if (!parsed.ok()) return parsed.error();
        row.defect_scenario = std::move(parsed).value();
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

Result<std::vector<ScenarioResult>> ParseResults(std::string_view jsonl_text, std::string_view source) {
  std::vector<ScenarioResult> results;
  size_t line_no = 0;
  size_t start = 0;
  while (start <= jsonl_text.size()) {
    size_t end = jsonl_text.find('\n', start);
    if (end == std::string_view::npos) end = jsonl_text.size();
    std::string_view line = jsonl_text.substr(start, end - start);
    ++line_no;
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
      if (end == jsonl_text.size()) break;
      continue;
    }
    const std::string where = std::string(source) + " line " + std::to_string(line_no);
    json item = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (item.is_discarded() || !item.is_object()) return MakeError(where + " is not a JSON object");
    ScenarioResult r;
    r.kind = StringField(item, "kind");
    r.name = StringField(item, "name");
    r.status = StringField(item, "status");
    if (r.kind.empty() || r.name.empty() || r.status.empty()) {
      return MakeError(where + ": a result needs kind, name and status");
    }
    r.script = StringField(item, "script");
    r.suite = StringField(item, "suite");
    r.command = StringField(item, "command");
    r.error = StringField(item, "error");
    r.defect = StringField(item, "defect");
    r.pairs_with = StringField(item, "pairs_with");
    if (item.contains("duration_s") && item["duration_s"].is_number()) r.duration_s = item["duration_s"].get<double>();
    r.seed_rows = StringList(item, "seed_rows");
    r.fault_points = StringList(item, "fault_points");
    r.invariants = StringList(item, "invariants");
    if (item.contains("faults_fired") && item["faults_fired"].is_object()) {
      for (const auto& [point, count] : item["faults_fired"].items()) {
        if (count.is_number_integer()) r.faults_fired[point] = count.get<int>();
      }
    }
    results.push_back(std::move(r));
    if (end == jsonl_text.size()) break;
  }
  return results;
}

std::string DefaultCommand(const ScenarioRef& ref) {
  if (ref.kind == kKindIntegration) {
    return "python3 tests/integration/" + (ref.script.empty() ? std::string("<script>") : ref.script) + " " +
           ref.name;
  }
  if (ref.kind == kKindCtest) return "ctest --test-dir build -R '^" + ref.name + "$'";
  if (ref.kind == kKindRegress) return "python3 tests/run-all --only regress  # pg_regress suite " + ref.name;
  if (ref.kind == kKindSimulation) {  // NAME, or NAME__defect_D for its paired defect run
    const size_t defect = ref.name.find("__defect_");
    if (defect == std::string::npos) return "build/bin/trellara_sim --run " + ref.name;
    return "build/bin/trellara_sim --run " + ref.name.substr(0, defect) + " --defect " + ref.name.substr(defect + 9);
  }
  return ref.name;
}

Report Decide(const std::vector<MatrixRow>& matrix, const std::vector<ScenarioResult>& results) {
  Report report;
  std::map<std::string, const ScenarioResult*> latest;
  std::vector<const ScenarioResult*> ordered;
  for (const auto& result : results) {
    latest[Key(result.kind, result.name)] = &result;
    ordered.push_back(&result);
  }

  std::set<std::string> referenced;
  std::map<std::string, std::set<std::string>> bound;  // row name -> scenario names the matrix binds
  for (const auto& row : matrix) {
    for (const auto& ref : row.proof) {
      referenced.insert(Key(ref.kind, ref.name));
      bound[row.name].insert(ref.name);
    }
    if (row.defect_scenario) referenced.insert(Key(row.defect_scenario->kind, row.defect_scenario->name));
  }

  std::vector<const MatrixRow*> sorted;
  for (const auto& row : matrix) sorted.push_back(&row);
  std::stable_sort(sorted.begin(), sorted.end(), [](const MatrixRow* a, const MatrixRow* b) {
    return SuiteRank(a->suite) < SuiteRank(b->suite);
  });
  for (const MatrixRow* row : sorted) {
    RowDecision decision = DecideRow(*row, latest, ordered);
    report.counts[std::string(RowStatusName(decision.status))] += 1;
    report.rows.push_back(std::move(decision));
  }
  // Defect scenarios found through pairs_with are referenced too.
  for (const auto& decision : report.rows) {
    if (decision.defect_command.empty()) continue;
    for (const ScenarioResult* result : ordered) {
      if (!result->defect.empty() && bound[decision.row.name].count(result->pairs_with)) {
        referenced.insert(Key(result->kind, result->name));
      }
    }
  }

  std::set<std::string> row_names;
  for (const auto& row : matrix) row_names.insert(row.name);
  bool any_failed_result = false;
  for (const auto& [key, result] : latest) {
    if (!result->passed()) any_failed_result = true;
    if (!referenced.count(key)) report.other_results.push_back(*result);
    for (const auto& claimed : result->seed_rows) {
      if (!row_names.count(claimed)) {
        report.warnings.push_back(result->name + " claims seed row " + claimed + ", which the matrix does not list");
      } else if (!bound[claimed].count(result->name)) {
        report.warnings.push_back(result->name + " claims seed row " + claimed +
                                  ", but the matrix does not bind it to that row (tests/chaos/import_seed.py)");
      }
    }
  }
  std::set<std::string> scenario_set;
  for (const auto& result : results) scenario_set.insert(result.kind + " " + result.script + " " + result.name);
  report.scenario_set.assign(scenario_set.begin(), scenario_set.end());
  std::sort(report.other_results.begin(), report.other_results.end(),
            [](const ScenarioResult& a, const ScenarioResult& b) {
              return std::tie(a.kind, a.script, a.name) < std::tie(b.kind, b.script, b.name);
            });

  const auto count = [&](RowStatus s) {
    auto it = report.counts.find(std::string(RowStatusName(s)));
    return it == report.counts.end() ? 0 : it->second;
  };
  if (count(RowStatus::kFailed) > 0 || any_failed_result) {
    report.overall = "FAIL";
  } else if (count(RowStatus::kNoResult) + count(RowStatus::kUnpaired) + count(RowStatus::kUntested) > 0 ||
             results.empty()) {
    report.overall = "INCOMPLETE";
  } else {
    report.overall = "PASS";
  }
  return report;
}

namespace {
// The fields of a row scripts depend on (header: RenderJson), shared by the JSON report and the
// verified projection.
json RowContract(const RowDecision& d) {
  return json{
      {"name", d.row.name},
      {"suite", d.row.suite},
      {"status", std::string(RowStatusName(d.status))},
      {"command", d.command.empty() ? json(nullptr) : json(d.command)},
      {"defect", d.defect.empty() ? json(nullptr) : json(d.defect)},
      {"defect_command", d.defect_command.empty() ? json(nullptr) : json(d.defect_command)},
      {"defect_caught", d.defect_caught ? json(*d.defect_caught) : json(nullptr)},
  };
}
}  // namespace

std::string RenderJson(const Report& report, const ReportIdentity& identity) {
  json rows = json::array();
  for (const auto& d : report.rows) {
    json faults = json::object();
    for (const auto& [point, count] : d.faults_fired) faults[point] = count;
    json proof = json::array();
    for (const auto& ref : d.row.proof) proof.push_back(json{{"kind", ref.kind}, {"name", ref.name}});
    json row = RowContract(d);
    row.update(json{
        {"detail", d.detail},
        {"failure_point", d.row.failure_point},
        {"boundary", d.row.boundary},
        {"invariant", d.row.invariant},
        {"safety_property", d.row.safety_property},
        {"recovery", d.row.recovery},
        {"proof", proof},
        {"proof_passed", d.proof_passed},
        {"proof_total", d.proof_total},
        {"faults_fired", faults},
        {"note", d.row.note},
    });
    rows.push_back(std::move(row));
  }
  json others = json::array();
  for (const auto& r : report.other_results) others.push_back(ResultJson(r));
  json counts = json::object();
  for (const auto& [name, n] : report.counts) counts[name] = n;
  json out{{"overall", report.overall},
           {"revision", identity.revision},
           {"source_tree", identity.source_tree},
           {"generated_at", identity.generated_at},
           {"results_dir", identity.results_dir},
           {"matrix", identity.matrix_path},
           {"counts", counts},
           {"rows", rows},
           {"other_results", others},
           {"warnings", report.warnings},
           {"verified", json::parse(VerifiedProjection(report, identity))}};
  return out.dump(2) + "\n";
}

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string RenderHtml(const Report& report, const ReportIdentity& identity) {
  const auto e = [](std::string_view s) { return HtmlEscape(s); };
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    << "<title>Trellara correctness report</title>\n<style>\n"
    << "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;"
       "margin:1em 0;width:100%}th,td{border:1px solid #ccc;padding:4px 6px;vertical-align:top;"
       "font-size:13px;text-align:left}th{background:#f3f3f3}code{font-size:12px;word-break:break-all}"
       ".covered{background:#d9f2d9}.failed{background:#f8d0d0}.no_result{background:#fff1c2}"
       ".unpaired{background:#e6eefc}.not_built,.untested{background:#eee}"
       ".overall-PASS{color:#1a7f1a}.overall-FAIL{color:#b00}.overall-INCOMPLETE{color:#a66b00}\n"
    << "</style></head><body>\n";
  h << "<h1>Trellara correctness report</h1>\n";
  h << "<p>Generated by <code>trellara chaos report</code> from the machine-readable results of one run; "
       "never hand-written. A row is <b>covered</b> only when its clean scenario passed in these results, its "
       "fault fired, and its paired defect was caught.</p>\n";
  h << "<table><tr><th>Overall</th><td class=\"overall-" << e(report.overall) << "\"><b>" << e(report.overall)
    << "</b></td></tr>\n";
  h << "<tr><th>Source revision</th><td><code>" << e(identity.revision) << "</code></td></tr>\n";
  h << "<tr><th>Source tree</th><td><code>" << e(identity.source_tree)
    << "</code> (the tracked files without this report, at generation; for a person: "
       "<code>make verify-correctness-report</code> compares outcomes, not sources)</td></tr>\n";
  h << "<tr><th>Generated</th><td>" << e(identity.generated_at) << "</td></tr>\n";
  h << "<tr><th>Results</th><td><code>" << e(identity.results_dir) << "</code></td></tr>\n";
  h << "<tr><th>Matrix</th><td><code>" << e(identity.matrix_path) << "</code> <code>" << e(identity.matrix_digest)
    << "</code></td></tr>\n";
  h << "<tr><th>Scenarios</th><td>" << report.scenario_set.size() << " ran</td></tr>\n";
  h << "<tr><th>Rows</th><td>";
  bool first = true;
  for (const auto& [name, n] : report.counts) {
    h << (first ? "" : ", ") << e(name) << " " << n;
    first = false;
  }
  h << "</td></tr></table>\n";

  std::string suite;
  bool open = false;
  for (const auto& d : report.rows) {
    if (!open || d.row.suite != suite) {
      if (open) h << "</table>\n";
      suite = d.row.suite;
      open = true;
      h << "<h2>" << e(SuiteTitle(suite)) << "</h2>\n<table><tr><th>Row</th><th>Status</th><th>Boundary</th>"
        << "<th>Invariant</th><th>Safety property</th><th>Evidence</th><th>Reproduce</th><th>Paired defect</th>"
        << "<th>Recovery</th></tr>\n";
    }
    const std::string status(RowStatusName(d.status));
    h << "<tr class=\"" << e(status) << "\"><td><code>" << e(d.row.name) << "</code></td><td><b>" << e(status)
      << "</b><br>" << e(d.detail) << "</td><td>" << e(d.row.boundary) << "</td><td>" << e(d.row.invariant)
      << "</td><td>" << e(d.row.safety_property) << "</td><td>";
    if (d.proof_total > 0) h << d.proof_passed << "/" << d.proof_total << " scenarios passed";
    for (const auto& [point, count] : d.faults_fired) h << "<br>fault " << e(point) << " fired " << count << "x";
    if (!d.row.note.empty()) h << "<br><i>" << e(d.row.note) << "</i>";
    h << "</td><td><code>" << e(d.command) << "</code></td><td>";
    if (!d.defect.empty()) {
      h << "<code>" << e(d.defect) << "</code>: "
        << (d.defect_caught ? (*d.defect_caught ? "caught" : "NOT caught") : "no result");
      if (!d.defect_command.empty()) h << "<br><code>" << e(d.defect_command) << "</code>";
    } else {
      h << "none";
    }
    h << "</td><td>" << e(d.row.recovery) << "</td></tr>\n";
  }
  if (open) h << "</table>\n";

  h << "<h2>Not built</h2>\n<table><tr><th>Row</th><th>Suite</th><th>Reason</th></tr>\n";
  for (const auto& d : report.rows) {
    if (d.status != RowStatus::kNotBuilt) continue;
    h << "<tr><td><code>" << e(d.row.name) << "</code></td><td>" << e(SuiteTitle(d.row.suite)) << "</td><td>"
      << e(d.row.reason) << "</td></tr>\n";
  }
  h << "</table>\n";

  h << "<h2>Other results of this run</h2>\n<p>Scenarios and tests no row refers to.</p>\n";
  std::map<std::string, std::pair<int, int>> per_kind;  // kind -> passed, failed
  for (const auto& r : report.other_results) (r.passed() ? per_kind[r.kind].first : per_kind[r.kind].second) += 1;
  h << "<table><tr><th>Kind</th><th>Passed</th><th>Failed</th></tr>\n";
  for (const auto& [kind, pf] : per_kind) {
    h << "<tr><td>" << e(kind) << "</td><td>" << pf.first << "</td><td>" << pf.second << "</td></tr>\n";
  }
  h << "</table>\n<table><tr><th>Scenario</th><th>Status</th><th>Defect</th><th>Reproduce</th></tr>\n";
  for (const auto& r : report.other_results) {
    if (r.kind != kKindIntegration && r.passed()) continue;  // passing unit tests are counted above
    h << "<tr class=\"" << (r.passed() ? "covered" : "failed") << "\"><td><code>" << e(r.name) << "</code></td><td>"
      << e(r.status) << (r.error.empty() ? "" : "<br>") << e(r.error) << "</td><td>" << e(r.defect)
      << "</td><td><code>" << e(r.command) << "</code></td></tr>\n";
  }
  h << "</table>\n";
  if (!report.warnings.empty()) {
    h << "<h2>Warnings</h2>\n<ul>\n";
    for (const auto& w : report.warnings) h << "<li>" << e(w) << "</li>\n";
    h << "</ul>\n";
  }
  // The verified projection, for `trellara chaos verify`. '<', '>' and '&' are written as JSON
  // \u escapes (the same JSON strings), so nothing in a value can end the block or open a tag.
  std::string projection;
  for (char c : VerifiedProjection(report, identity)) {
    if (c == '<') projection += "\\u003c";
    else if (c == '>') projection += "\\u003e";
    else if (c == '&') projection += "\\u0026";
    else projection += c;
  }
  h << "<script type=\"application/json\" id=\"trellara-verified\">\n" << projection << "</script>\n";
  h << "</body></html>\n";
  return h.str();
}

namespace {
constexpr std::string_view kVerifiedOpen = "<script type=\"application/json\" id=\"trellara-verified\">";
constexpr int kVerifiedFormat = 2;  // 2: compared by outcome (matrix, scenario set), not source tree

std::string Hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xF]);
  }
  return out;
}

std::string Describe(const json& value) { return value.is_null() ? "(none)" : value.dump(); }
}  // namespace

std::string SourceTreeDigest(std::string_view ls_tree_output, const std::vector<std::string>& excluded_paths) {
  // `git ls-tree -r` lines: "<mode> <type> <object>\t<path>".
  std::string kept;
  size_t start = 0;
  while (start < ls_tree_output.size()) {
    size_t end = ls_tree_output.find('\n', start);
    if (end == std::string_view::npos) end = ls_tree_output.size();
    const std::string_view line = ls_tree_output.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    const size_t tab = line.find('\t');
    const std::string_view path = tab == std::string_view::npos ? std::string_view{} : line.substr(tab + 1);
    if (std::find(excluded_paths.begin(), excluded_paths.end(), path) != excluded_paths.end()) continue;
    kept.append(line);
    kept.push_back('\n');
  }
  const Sha256 digest = Sha256Of(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kept.data()), kept.size()));
  return "sha256:" + Hex(std::span<const uint8_t>(digest.data(), digest.size()));
}

std::string MatrixDigest(std::string_view matrix_text) {
  const Sha256 digest = Sha256Of(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(matrix_text.data()),
                                                          matrix_text.size()));
  return "sha256:" + Hex(std::span<const uint8_t>(digest.data(), digest.size()));
}

std::string VerifiedProjection(const Report& report, const ReportIdentity& identity) {
  json rows = json::array();
  for (const auto& d : report.rows) {
    json faults = json::array();
    for (const auto& [point, count] : d.faults_fired) {
      if (count > 0) faults.push_back(point);
    }
    json row = RowContract(d);
    row.update(json{{"proof_passed", d.proof_passed}, {"proof_total", d.proof_total}, {"faults_fired", faults}});
    rows.push_back(std::move(row));
  }
  json others = json::object();
  for (const auto& r : report.other_results) {
    json& kind = others[r.kind.empty() ? std::string("unknown") : r.kind];
    if (kind.is_null()) kind = json{{"passed", 0}, {"failed", 0}};
    kind[r.passed() ? "passed" : "failed"] = kind[r.passed() ? "passed" : "failed"].get<int>() + 1;
  }
  json counts = json::object();
  for (const auto& [name, n] : report.counts) counts[name] = n;
  // source_tree and revision say where the run was made, for a person; they are not compared.
  const json out{{"format", kVerifiedFormat},    {"source_tree", identity.source_tree},
                 {"revision", identity.revision}, {"matrix", identity.matrix_digest},
                 {"scenarios", report.scenario_set},
                 {"overall", report.overall},    {"counts", counts},
                 {"rows", rows},                 {"other_results", others}};
  return out.dump(1) + "\n";  // nlohmann's json sorts object keys: the text is canonical
}

Result<std::string> ExtractVerifiedProjection(std::string_view html, std::string_view source) {
  const size_t open = html.find(kVerifiedOpen);
  if (open == std::string_view::npos) {
    return Error{std::string(source) + " has no verified block (<script id=\"trellara-verified\">): it was not "
                 "written by this version of trellara chaos report; regenerate it (make correctness-report)"};
  }
  const size_t begin = open + kVerifiedOpen.size();
  const size_t close = html.find("</script>", begin);
  if (close == std::string_view::npos) {
    return Error{std::string(source) + ": the verified block is not closed (the file is truncated?); regenerate it"};
  }
  const std::string text(html.substr(begin, close - begin));
  const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Error{std::string(source) + ": the verified block is not a JSON object; regenerate it"};
  }
  return parsed.dump(1) + "\n";
}

Result<std::vector<std::string>> CompareVerifiedProjections(std::string_view committed, std::string_view current) {
  const json a = json::parse(committed, nullptr, false);
  const json b = json::parse(current, nullptr, false);
  for (const auto& [value, which] : {std::pair<const json*, const char*>{&a, "committed"},
                                     std::pair<const json*, const char*>{&b, "current"}}) {
    if (value->is_discarded() || !value->is_object() || !value->contains("rows") || !(*value)["rows"].is_array()) {
      return Error{std::string("the ") + which + " verified projection is not a projection object with rows"};
    }
  }
  std::vector<std::string> diffs;
  if (a.value("format", 0) != b.value("format", 0)) {
    diffs.push_back("projection format " + Describe(a.value("format", json())) + " in the committed report, " +
                    Describe(b.value("format", json())) + " now");
  }
  for (const char* key : {"matrix", "overall", "counts", "other_results"}) {
    const json av = a.contains(key) ? a[key] : json();
    const json bv = b.contains(key) ? b[key] : json();
    if (av != bv) diffs.push_back(std::string(key) + ": " + Describe(av) + " in the committed report, " + Describe(bv) + " in this run");
  }
  // The set of scenarios: each one added or gone is named.
  std::set<std::string> had, has;
  if (a.contains("scenarios") && a["scenarios"].is_array())
    for (const auto& s : a["scenarios"]) had.insert(s.is_string() ? s.get<std::string>() : s.dump());
  if (b.contains("scenarios") && b["scenarios"].is_array())
    for (const auto& s : b["scenarios"]) has.insert(s.is_string() ? s.get<std::string>() : s.dump());
  for (const auto& s : has)
    if (!had.count(s)) diffs.push_back("scenario " + s + ": ran in this run, not in the committed report");
  for (const auto& s : had)
    if (!has.count(s)) diffs.push_back("scenario " + s + ": in the committed report, did not run in this run");
  std::map<std::string, json> committed_rows;
  for (const auto& row : a["rows"]) committed_rows[row.value("suite", "") + "/" + row.value("name", "")] = row;
  std::set<std::string> seen;
  for (const auto& row : b["rows"]) {
    const std::string key = row.value("suite", "") + "/" + row.value("name", "");
    seen.insert(key);
    auto it = committed_rows.find(key);
    if (it == committed_rows.end()) {
      diffs.push_back("row " + key + ": not in the committed report (status in this run: " + Describe(row.value("status", json())) + ")");
      continue;
    }
    for (const auto& [field, value] : row.items()) {
      const json old = it->second.contains(field) ? it->second[field] : json();
      if (old != value) {
        diffs.push_back("row " + key + ": " + field + " " + Describe(old) + " in the committed report, " + Describe(value) +
                        " in this run");
      }
    }
  }
  for (const auto& [key, row] : committed_rows) {
    if (!seen.count(key)) diffs.push_back("row " + key + ": in the committed report, not in this run's matrix");
  }
  return diffs;
}

}  // namespace trellara::chaos
