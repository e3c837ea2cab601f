// chaos_report_test.cpp — the correctness report's row decisions (core/chaos_report.h): a row is
// covered only by this run's passing clean scenario, a fired fault and a caught paired defect;
// anything missing is "no result", never passed; a row without a defect is "unpaired". Also: every
// value in the HTML is escaped, the JSON field names scripts depend on, and the committed matrix
// lists every seed-000 row. And the committed report's verified projection (what CI compares).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "trellara/report/chaos_report.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_chaos_report_test {

using namespace trellara::chaos;

namespace {

const char* kMatrix = R"({"rows": [
  {"name": "row_a", "suite": "curated", "boundary": "b", "invariant": "i", "safety_property": "s",
   "recovery": "r", "status": "planned",
   "proof": [{"kind": "integration", "name": "clean_a", "script": "test_a.py"}],
   "defect": {"name": "defect_a", "scenario": {"kind": "integration", "name": "negative_a", "script": "test_a.py"}}},
  {"name": "row_unpaired", "suite": "curated", "status": "planned", "proof": [{"kind": "ctest", "name": "unit_b"}]},
  {"name": "row_pairs_with", "suite": "curated", "status": "planned",
   "proof": [{"kind": "integration", "name": "snap_clean", "script": "test_snapshot*.py"}],
   "defect": {"name": "snapshot_boundary", "scenario": null}},
  {"name": "row_not_built", "suite": "simulation_replayable", "status": "not_built", "reason": "no simulator"},
  {"name": "row_untested", "suite": "curated", "status": "untested", "reason": "nobody bound it"}
]})";

std::vector<MatrixRow> Matrix(const char* text = kMatrix) {
  auto parsed = ParseMatrix(text);
  REQUIRE(parsed.ok());
  return std::move(parsed).value();
}

std::vector<ScenarioResult> Results(const std::string& jsonl) {
  auto parsed = ParseResults(jsonl, "test");
  if (!parsed.ok()) FAIL(parsed.error().message);
  return std::move(parsed).value();
}

std::string Line(const std::string& kind, const std::string& name, const std::string& status,
                 const std::string& extra = "") {
  return R"({"kind": ")" + kind + R"(", "name": ")" + name + R"(", "status": ")" + status + R"(")" +
         (extra.empty() ? "" : ", " + extra) + "}\n";
}

const RowDecision& Row(const Report& report, const std::string& name) {
  for (const auto& d : report.rows) {
    if (d.row.name == name) return d;
  }
  FAIL("no row " << name);
  return report.rows.front();
}

}  // namespace

TEST_CASE("row_is_covered_only_when_clean_passed_fault_fired_and_defect_caught", "[chaos_report]") {
  const std::string faults = R"("fault_points": ["apply.x"], "faults_fired": {"apply.x": 2})";
  auto report = Decide(Matrix(), Results(Line("integration", "clean_a", "passed", faults) +
                                         Line("integration", "negative_a", "passed", R"("defect": "defect_a")")));
  const auto& row = Row(report, "row_a");
  CHECK(row.status == RowStatus::kCovered);
  CHECK(row.defect_caught == true);
  CHECK(row.faults_fired.at("apply.x") == 2);
  CHECK(row.command == "python3 tests/integration/test_a.py clean_a");
}

TEST_CASE("row_whose_scenario_has_no_result_is_no_result_never_passed", "[chaos_report]") {
  auto report = Decide(Matrix(), Results(Line("integration", "negative_a", "passed")));
  CHECK(Row(report, "row_a").status == RowStatus::kNoResult);
  CHECK(Row(report, "row_pairs_with").status == RowStatus::kNoResult);
  CHECK(Row(report, "row_unpaired").status == RowStatus::kNoResult);
  CHECK(report.overall == "INCOMPLETE");
  // The clean half alone is not enough either: its defect has no result.
  auto clean_only = Decide(Matrix(), Results(Line("integration", "clean_a", "passed")));
  CHECK(Row(clean_only, "row_a").status == RowStatus::kNoResult);
  CHECK_FALSE(Row(clean_only, "row_a").defect_caught.has_value());
  // No results at all is never a pass.
  CHECK(Decide(Matrix(), {}).overall == "INCOMPLETE");
}

TEST_CASE("a_declared_fault_that_never_fired_fails_the_row", "[chaos_report]") {
  auto report = Decide(Matrix(), Results(Line("integration", "clean_a", "passed", R"("fault_points": ["apply.x"])") +
                                         Line("integration", "negative_a", "passed")));
  CHECK(Row(report, "row_a").status == RowStatus::kFailed);
  CHECK_THAT(Row(report, "row_a").detail, Catch::Contains("apply.x never fired"));
  CHECK(report.overall == "FAIL");
}

TEST_CASE("an_uncaught_defect_or_a_failed_clean_run_fails_the_row", "[chaos_report]") {
  auto uncaught = Decide(Matrix(), Results(Line("integration", "clean_a", "passed") +
                                           Line("integration", "negative_a", "failed", R"("error": "passed anyway")")));
  CHECK(Row(uncaught, "row_a").status == RowStatus::kFailed);
  CHECK(Row(uncaught, "row_a").defect_caught == false);
  auto clean_failed = Decide(Matrix(), Results(Line("integration", "clean_a", "failed") +
                                               Line("integration", "negative_a", "passed")));
  CHECK(Row(clean_failed, "row_a").status == RowStatus::kFailed);
}

TEST_CASE("a_defect_run_whose_fault_never_fired_is_not_a_caught_defect", "[chaos_report]") {
  auto report = Decide(Matrix(), Results(Line("integration", "clean_a", "passed") +
                                         Line("integration", "negative_a", "passed", R"("fault_points": ["f"])")));
  CHECK(Row(report, "row_a").status == RowStatus::kFailed);
  CHECK(Row(report, "row_a").defect_caught == false);
}

TEST_CASE("a_row_without_a_paired_defect_is_unpaired_never_covered", "[chaos_report]") {
  auto report = Decide(Matrix(), Results(Line("ctest", "unit_b", "passed")));
  CHECK(Row(report, "row_unpaired").status == RowStatus::kUnpaired);
  CHECK(Row(report, "row_unpaired").command == "ctest --test-dir build -R '^unit_b$'");
}

TEST_CASE("a_defect_declaring_pairs_with_pairs_with_the_rows_clean_scenario", "[chaos_report]") {
  auto report = Decide(
      Matrix(), Results(Line("integration", "snap_clean", "passed", R"("command": "python3 tests/integration/test_snapshot.py snap_clean")") +
                        Line("integration", "snap_defect", "passed",
                             R"("defect": "apply_at_boundary", "pairs_with": "snap_clean", "command": "python3 tests/integration/test_snapshot.py snap_defect")")));
  const auto& row = Row(report, "row_pairs_with");
  CHECK(row.status == RowStatus::kCovered);
  CHECK(row.defect_command == "python3 tests/integration/test_snapshot.py snap_defect");
  CHECK(row.command == "python3 tests/integration/test_snapshot.py snap_clean");
  for (const auto& other : report.other_results) CHECK(other.name != "snap_defect");
}

TEST_CASE("not_built_and_untested_rows_keep_their_reason_whatever_the_results", "[chaos_report]") {
  auto report = Decide(Matrix(), Results(Line("integration", "clean_a", "passed")));
  CHECK(Row(report, "row_not_built").status == RowStatus::kNotBuilt);
  CHECK(Row(report, "row_not_built").detail == "no simulator");
  CHECK(Row(report, "row_untested").status == RowStatus::kUntested);
  // Simulation rows are shown before the curated matrix, like the seed.
  CHECK(report.rows.front().row.name == "row_not_built");
}

TEST_CASE("an_evidence_row_is_covered_only_by_a_qualifying_run_and_names_the_longest_otherwise", "[chaos_report]") {
  const char* matrix = R"({"rows": [
    {"name": "row_soak", "suite": "simulation_qualification", "status": "evidence", "reason": "24 h soak",
     "evidence": {"kind": "soak", "min_duration_s": 86400}}
  ]})";
  // Nothing recorded: untested, saying what is needed.
  auto none = Decide(Matrix(matrix), {});
  CHECK(Row(none, "row_soak").status == RowStatus::kUntested);
  CHECK(Row(none, "row_soak").detail.find("make soak SOAK_DURATION=24h") != std::string::npos);
  CHECK(Row(none, "row_soak").detail.find("none is recorded") != std::string::npos);
  // A two-hour run, even a failed one, neither covers nor fails the row: it is named.
  const std::string short_run = Line("soak", "soak", "failed",
                                     R"("duration_s": 7200, "revision": "abcdef0123456789", )"
                                     R"("finished_at": "2026-12-06T08:00:00Z", "error": "memory ceiling")");
  auto shorter = Decide(Matrix(matrix), Results(short_run));
  CHECK(Row(shorter, "row_soak").status == RowStatus::kUntested);
  CHECK(Row(shorter, "row_soak").detail.find("soak of 2.0 h at revision abcdef012345") != std::string::npos);
  CHECK(Row(shorter, "row_soak").detail.find("2026-12-06T08:00:00Z") != std::string::npos);
  CHECK(shorter.overall != "FAIL");
  CHECK(shorter.other_results.empty());
  // A 24-hour run that passed covers it; the latest qualifying run decides (a failed one fails it).
  const std::string day = Line("soak", "soak", "passed",
                               R"("duration_s": 86410, "revision": "1111", "finished_at": "2026-12-07T09:00:00Z", )"
                               R"("command": "make soak SOAK_DURATION=24h")");
  auto covered = Decide(Matrix(matrix), Results(short_run + day));
  CHECK(Row(covered, "row_soak").status == RowStatus::kCovered);
  CHECK(Row(covered, "row_soak").command == "make soak SOAK_DURATION=24h");
  const std::string failed_day = Line("soak", "soak", "failed", R"("duration_s": 90000, "revision": "2222")");
  auto failed = Decide(Matrix(matrix), Results(day + failed_day));
  CHECK(Row(failed, "row_soak").status == RowStatus::kFailed);
  CHECK(failed.overall == "FAIL");
  // An evidence row must say what evidence proves it.
  CHECK_FALSE(ParseMatrix(R"({"rows": [{"name": "x", "suite": "curated", "status": "evidence", "reason": "r"}]})").ok());
}

TEST_CASE("the_last_result_of_a_rerun_counts", "[chaos_report]") {
  auto report = Decide(Matrix(), Results(Line("integration", "clean_a", "failed") +
                                         Line("integration", "negative_a", "passed") +
                                         Line("integration", "clean_a", "passed")));
  CHECK(Row(report, "row_a").status == RowStatus::kCovered);
}

TEST_CASE("a_failing_result_no_row_refers_to_fails_the_report", "[chaos_report]") {
  auto report = Decide(Matrix(), Results(Line("ctest", "something_else", "failed")));
  CHECK(report.overall == "FAIL");
  REQUIRE(report.other_results.size() == 1);
}

TEST_CASE("a_scenario_claiming_a_row_the_matrix_does_not_bind_is_warned_about", "[chaos_report]") {
  auto report = Decide(Matrix(), Results(Line("integration", "stray", "passed", R"("seed_rows": ["row_a", "nope"])")));
  REQUIRE(report.warnings.size() == 2);
  CHECK(Row(report, "row_a").status == RowStatus::kNoResult);
}

TEST_CASE("matrix_and_results_errors_name_the_row_or_line", "[chaos_report]") {
  auto no_reason = ParseMatrix(R"({"rows": [{"name": "x", "suite": "curated", "status": "not_built"}]})");
  REQUIRE_FALSE(no_reason.ok());
  CHECK_THAT(no_reason.error().message, Catch::Contains("(x)") && Catch::Contains("reason"));
  auto bad_kind = ParseMatrix(R"({"rows": [{"name": "x", "status": "planned", "proof": [{"kind": "k", "name": "n"}]}]})");
  REQUIRE_FALSE(bad_kind.ok());
  CHECK_THAT(bad_kind.error().message, Catch::Contains("kind 'k'"));
  auto bad_line = ParseResults("\n{\"kind\": \"ctest\"}\n", "results/unit.jsonl");
  REQUIRE_FALSE(bad_line.ok());
  CHECK_THAT(bad_line.error().message, Catch::Contains("results/unit.jsonl line 2"));
}

TEST_CASE("html_escapes_every_value", "[chaos_report]") {
  const char* hostile = R"({"rows": [{"name": "<script>alert(1)</script>", "suite": "curated", "status": "planned",
    "boundary": "a & b", "invariant": "\"q\"", "safety_property": "'s'", "recovery": "<r>",
    "proof": [{"kind": "integration", "name": "x<y", "script": "t.py"}]}]})";
  auto report = Decide(Matrix(hostile), Results(Line("integration", "x<y", "failed", R"("error": "<img src=x onerror=1>")")));
  std::string html = RenderHtml(report, ReportIdentity{"<rev>", "2026-01-01T00:00:00Z", "dir&", "m"});
  CHECK(html.find("<script>") == std::string::npos);
  CHECK(html.find("<img") == std::string::npos);
  CHECK(html.find("<rev>") == std::string::npos);
  CHECK(html.find("&lt;script&gt;alert(1)&lt;/script&gt;") != std::string::npos);
  CHECK(html.find("a &amp; b") != std::string::npos);
  CHECK(HtmlEscape("<a href='x'>\"&") == "&lt;a href=&#39;x&#39;&gt;&quot;&amp;");
}

TEST_CASE("json_rows_carry_the_field_names_scripts_depend_on", "[chaos_report]") {
  auto report = Decide(Matrix(), Results(Line("integration", "clean_a", "passed") +
                                         Line("integration", "negative_a", "passed", R"("defect": "defect_a")")));
  auto document = nlohmann::json::parse(RenderJson(report, ReportIdentity{"abc", "t", "d", "m"}));
  CHECK(document["revision"] == "abc");
  CHECK(document["overall"] == "INCOMPLETE");
  bool found = false;
  for (const auto& row : document["rows"]) {
    for (const char* key : {"name", "suite", "status", "command", "defect", "defect_command", "defect_caught"}) {
      CHECK(row.contains(key));
    }
    if (row["name"] == "row_a") {
      found = true;
      CHECK(row["status"] == "covered");
      CHECK(row["defect"] == "defect_a");
      CHECK(row["defect_caught"] == true);
      CHECK(row["defect_command"] == "python3 tests/integration/test_a.py negative_a");
    }
    if (row["name"] == "row_unpaired") CHECK(row["defect_caught"].is_null());
  }
  CHECK(found);
}

TEST_CASE("the_committed_matrix_lists_every_seed_row_and_says_why_each_unbuilt_row_is_unbuilt",
          "[chaos_report]") {
  std::ifstream file(std::string(TRELLARA_SOURCE_DIR) + "/tests/chaos/matrix.json");
  REQUIRE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  auto parsed = ParseMatrix(text.str());
  REQUIRE(parsed.ok());
  int simulations = 0;
  int curated = 0;
  for (const auto& row : parsed.value()) {
    if (row.suite.rfind("simulation_", 0) == 0) ++simulations;
    if (row.suite == "curated") ++curated;
    if (row.planned == "planned") {
      CHECK_FALSE(row.proof.empty());  // a planned row names what proves it
    } else {
      CHECK_FALSE(row.reason.empty());
    }
    // Every paired defect is named.
    if (row.defect_scenario) CHECK(row.defect_name.has_value());
  }
  CHECK(simulations == 28);  // seed 000: Simulations 28
  CHECK(curated == 63);      // seed 000: curated failure matrix
}

TEST_CASE("every_defect_point_in_the_code_is_a_paired_defect_of_a_matrix_row", "[chaos_report]") {
  // Seed 002: every defect exists to be caught by a scenario. A `defect.<name>` fault point in
  // applier/, extension/ or core/src that no matrix row names (with the scenario that must catch
  // it) is a negative control the report cannot show.
  namespace fs = std::filesystem;
  std::ifstream file(std::string(TRELLARA_SOURCE_DIR) + "/tests/chaos/matrix.json");
  std::stringstream text;
  text << file.rdbuf();
  auto parsed = ParseMatrix(text.str());
  REQUIRE(parsed.ok());
  std::set<std::string> paired;
  for (const auto& row : parsed.value()) {
    if (row.defect_name && row.defect_scenario) paired.insert(*row.defect_name);
  }
  std::set<std::string> in_code;
  const std::string needle = "Hit(\"defect.";
  for (const char* tree : {"applier", "extension", "core/src"}) {
    for (const auto& entry : fs::recursive_directory_iterator(std::string(TRELLARA_SOURCE_DIR) + "/" + tree)) {
      if (!entry.is_regular_file() || entry.path().extension() != ".cpp") continue;
      std::ifstream source(entry.path());
      std::string content((std::istreambuf_iterator<char>(source)), std::istreambuf_iterator<char>());
      for (size_t at = content.find(needle); at != std::string::npos; at = content.find(needle, at + 1)) {
        const size_t begin = at + needle.size();
        in_code.insert(content.substr(begin, content.find('"', begin) - begin));
      }
    }
  }
  // Decisions made in SQL switch theirs through trellara._test_defect('<name>') (extension
  // functions/test_defects.cpp).
  const std::string sql_needle = "trellara._test_defect('";
  for (const auto& entry : fs::directory_iterator(std::string(TRELLARA_SOURCE_DIR) + "/sql")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".sql") continue;
    std::ifstream source(entry.path());
    std::string content((std::istreambuf_iterator<char>(source)), std::istreambuf_iterator<char>());
    for (size_t at = content.find(sql_needle); at != std::string::npos; at = content.find(sql_needle, at + 1)) {
      const size_t begin = at + sql_needle.size();
      in_code.insert(content.substr(begin, content.find('\'', begin) - begin));
    }
  }
  CHECK(in_code.count("failover_posture_unchecked") == 1);  // the SQL scan works
  CHECK(in_code.size() >= 9);  // the scan works: the defects present when this test was written
  for (const auto& defect : in_code) {
    INFO("defect." << defect << " is switched in the code but no matrix row pairs a scenario with it "
                      "(tests/chaos/import_seed.py)");
    CHECK(paired.count(defect) == 1);
  }
}

// ---- the committed report and `make verify-correctness-report` ----

TEST_CASE("source_tree_digest_excludes_only_the_committed_report", "[chaos_report]") {
  const std::string tree =
      "100644 blob 1111111111111111111111111111111111111111\tcore/a.cpp\n"
      "100644 blob 2222222222222222222222222222222222222222\tdocs/correctness.md\n";
  const std::string with_report =
      tree + "100644 blob 3333333333333333333333333333333333333333\tdocs/correctness-report.html\n";
  const std::vector<std::string> excluded{"docs/correctness-report.html"};
  CHECK(SourceTreeDigest(tree, excluded) == SourceTreeDigest(with_report, excluded));
  CHECK(SourceTreeDigest(tree, excluded).rfind("sha256:", 0) == 0);
  CHECK(SourceTreeDigest(tree, excluded).size() == 7 + 64);
  std::string changed = tree;
  changed[20] = '9';  // another blob of core/a.cpp
  CHECK(SourceTreeDigest(changed, excluded) != SourceTreeDigest(tree, excluded));
  // Excluding another path changes the digest: only the report is left out.
  CHECK(SourceTreeDigest(with_report, {}) != SourceTreeDigest(tree, excluded));
}

TEST_CASE("the_verified_projection_round_trips_through_the_html_and_ignores_what_varies_per_run",
          "[chaos_report]") {
  const char* hostile = R"({"rows": [{"name": "</script><b>x & y", "suite": "curated", "status": "planned",
    "proof": [{"kind": "integration", "name": "clean", "script": "t.py"}],
    "defect": {"name": "d", "scenario": {"kind": "integration", "name": "neg", "script": "t.py"}}}]})";
  auto first = Decide(Matrix(hostile),
                      Results(Line("integration", "clean", "passed", R"("faults_fired": {"p.x": 2})") +
                              Line("integration", "neg", "passed", R"("defect": "d")") + Line("ctest", "u1", "passed")));
  auto second = Decide(Matrix(hostile),
                       Results(Line("integration", "clean", "passed", R"("faults_fired": {"p.x": 7})") +
                               Line("integration", "neg", "passed", R"("defect": "d")") + Line("ctest", "u1", "passed")));
  const std::string html = RenderHtml(first, ReportIdentity{"rev1", "2026-01-01T00:00:00Z", "/tmp/a", "m", "sha256:t"});
  CHECK(html.find("</script><b>") == std::string::npos);
  auto committed = ExtractVerifiedProjection(html, "report.html");
  REQUIRE(committed.ok());
  // Another run of the same tree: other time, directory, revision label and fault counts.
  const std::string current = VerifiedProjection(second, ReportIdentity{"rev2", "2026-02-02T00:00:00Z", "b", "m", "sha256:t"});
  auto diffs = CompareVerifiedProjections(committed.value(), current);
  REQUIRE(diffs.ok());
  CHECK(diffs->empty());
  CHECK(nlohmann::json::parse(committed.value())["rows"][0]["name"] == "</script><b>x & y");
}

TEST_CASE("verify_names_every_row_and_field_that_differs", "[chaos_report]") {
  const std::string clean = Line("integration", "clean_a", "passed", R"("fault_points": ["apply.x"], "faults_fired": {"apply.x": 1})");
  auto good = Decide(Matrix(), Results(clean + Line("integration", "negative_a", "passed", R"("defect": "defect_a")")));
  auto bad = Decide(Matrix(), Results(clean + Line("integration", "negative_a", "failed", R"("defect": "defect_a")")));
  const std::string committed = VerifiedProjection(good, ReportIdentity{"r1", "", "", "", "sha256:old", "sha256:m"});
  // Another source tree with the same outcomes: still verified (freshness by outcome).
  auto same = CompareVerifiedProjections(committed, VerifiedProjection(good, ReportIdentity{"r2", "", "", "", "sha256:new", "sha256:m"}));
  REQUIRE(same.ok());
  CHECK(same->empty());
  // Another matrix: stale, though every row is equal.
  auto stale = CompareVerifiedProjections(committed, VerifiedProjection(good, ReportIdentity{"", "", "", "", "sha256:old", "sha256:m2"}));
  REQUIRE(stale.ok());
  REQUIRE(stale->size() == 1);
  CHECK(stale->front().find("matrix") == 0);
  // Another set of scenarios (one added): named.
  auto more = Decide(Matrix(), Results(clean + Line("integration", "negative_a", "passed", R"("defect": "defect_a")") +
                                       Line("integration", "brand_new", "passed")));
  auto added = CompareVerifiedProjections(committed, VerifiedProjection(more, ReportIdentity{"", "", "", "", "", "sha256:m"}));
  REQUIRE(added.ok());
  bool named_scenario = false;
  for (const auto& line : *added) {
    if (line.find("scenario integration  brand_new: ran in this run") == 0) named_scenario = true;
  }
  CHECK(named_scenario);
  auto differs = CompareVerifiedProjections(committed, VerifiedProjection(bad, ReportIdentity{"", "", "", "", "sha256:old", "sha256:m"}));
  REQUIRE(differs.ok());
  bool named_row = false;
  for (const auto& line : *differs) {
    if (line.find("row curated/row_a: status \"covered\" in the committed report") == 0) named_row = true;
  }
  CHECK(named_row);
  CHECK_FALSE(ExtractVerifiedProjection("<html><body>old report</body></html>", "old.html").ok());
  CHECK_FALSE(CompareVerifiedProjections("not json", committed).ok());
}

}  // namespace unit_chaos_report_test
