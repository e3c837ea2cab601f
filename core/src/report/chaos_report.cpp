// chaos_report.cpp — decides each correctness-report row from the matrix and one run's results.
// Pure functions of their inputs: no files, no clock. Never marks a row covered unless this run's
// results earned it (chaos_report.h). Rendering is chaos_report_render.cpp, the freshness check
// chaos_report_verify.cpp.
#include "trellara/report/chaos_report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "chaos_report_internal.h"

namespace trellara::chaos {

using namespace detail;

namespace {

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

std::string Hours(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f h", seconds / 3600.0);
  return text;
}

std::string DescribeEvidence(const ScenarioResult& r) {
  return r.kind + " of " + Hours(r.duration_s) + " at revision " + (r.revision.empty() ? "?" : r.revision.substr(0, 12)) +
         ", finished " + (r.finished_at.empty() ? "(time not recorded)" : r.finished_at) + ", " + r.status +
         (r.error.empty() ? "" : " (" + r.error + ")");
}

// A row proven by a qualification run: the latest result of its kind that lasted long enough
// decides (passed: covered, anything else: failed); shorter runs are named, never counted.
RowDecision DecideEvidenceRow(RowDecision decision, const EvidenceSpec& spec,
                              const std::vector<const ScenarioResult*>& ordered) {
  const ScenarioResult* qualifying = nullptr;
  const ScenarioResult* longest = nullptr;
  for (const ScenarioResult* r : ordered) {
    if (r->kind != spec.kind) continue;
    if (r->duration_s >= spec.min_duration_s) qualifying = r;  // the last one listed is the latest
    if (longest == nullptr || r->duration_s > longest->duration_s) longest = r;
  }
  const std::string needed = "a " + spec.kind + " of at least " + Hours(spec.min_duration_s) +
                             " (make soak SOAK_DURATION=" + std::to_string(static_cast<long>(spec.min_duration_s / 3600)) +
                             "h, then commit its evidence file and regenerate the report)";
  if (qualifying == nullptr) {
    decision.status = RowStatus::kUntested;
    decision.detail = "no qualifying evidence: needs " + needed +
                      (longest ? "; the longest recorded is a " + DescribeEvidence(*longest) : "; none is recorded");
    return decision;
  }
  decision.command = qualifying->command;
  decision.proof_total = 1;
  decision.proof_passed = qualifying->passed() ? 1 : 0;
  decision.status = qualifying->passed() ? RowStatus::kCovered : RowStatus::kFailed;
  decision.detail = "evidence: " + DescribeEvidence(*qualifying);
  return decision;
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
  if (row.evidence) return DecideEvidenceRow(std::move(decision), *row.evidence, ordered);
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


}  // namespace

namespace detail {

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

}  // namespace detail

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
    if (row.planned != "planned" && row.planned != "not_built" && row.planned != "untested" &&
        row.planned != "evidence") {
      return MakeError(where + ": status '" + row.planned + "' is not one of planned, not_built, untested, evidence");
    }
    if (row.planned == "evidence") {
      const json spec = item.contains("evidence") ? item["evidence"] : json();
      if (!spec.is_object() || StringField(spec, "kind").empty() || !spec.contains("min_duration_s") ||
          !spec["min_duration_s"].is_number())
        return MakeError(where + ": an evidence row needs \"evidence\": {\"kind\": ..., \"min_duration_s\": ...}");
      row.evidence = EvidenceSpec{StringField(spec, "kind"), spec["min_duration_s"].get<double>()};
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
    r.revision = StringField(item, "revision");
    r.finished_at = StringField(item, "finished_at");
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
  std::set<std::string> evidence_kinds;                // kinds of qualification evidence rows decide
  for (const auto& row : matrix) {
    for (const auto& ref : row.proof) {
      referenced.insert(Key(ref.kind, ref.name));
      bound[row.name].insert(ref.name);
    }
    if (row.defect_scenario) referenced.insert(Key(row.defect_scenario->kind, row.defect_scenario->name));
    if (row.evidence) evidence_kinds.insert(row.evidence->kind);
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
    // Qualification evidence is decided by its rows (a failed qualifying run fails its row).
    if (evidence_kinds.count(result->kind)) continue;
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

}  // namespace trellara::chaos
