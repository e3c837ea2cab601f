// chaos_report_verify.cpp — freshness by outcome: the verified projection of a report (matrix
// digest, the set of scenarios, each row's status, faults fired and defect caught, counts per
// kind), and its comparison with this run's. The source tree and revision are recorded for a
// person, never compared.
#include "trellara/report/chaos_report.h"

#include <cstdint>
#include <span>

#include "trellara/record/checksum.h"

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
