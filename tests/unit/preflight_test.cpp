// preflight_test.cpp — `trellara check`'s decisions (core preflight.h): severity aggregation into a
// status and an exit code, which target triggers and rules fire for replicated rows under each
// session_replication_role, and the text and JSON forms.
#include <catch2/catch.hpp>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "trellara/report/preflight.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_preflight_test {

using namespace trellara;

namespace {

PreflightFinding Finding(PreflightSeverity severity, const std::string& check, const std::string& remedy = "") {
  return PreflightFinding{severity, check, "subject of " + check, "detail of " + check, remedy};
}

TargetTriggerFact Trigger(char enabled, bool is_rule = false) {
  return TargetTriggerFact{"public.orders", "public.orders", "audit orders", enabled, "INSERT OR UPDATE", is_rule};
}

}  // namespace

TEST_CASE("preflight_status_is_the_worst_severity_with_info_counted_as_ok", "[preflight]") {
  PreflightReport report;
  report.flow = "app";
  CHECK(std::string(PreflightStatus(report)) == "ok");
  CHECK(PreflightExitCode(report) == 0);

  report.source.findings.push_back(Finding(PreflightSeverity::Ok, "wal_level"));
  report.target.findings.push_back(Finding(PreflightSeverity::Info, "replication_origin"));
  CHECK(std::string(PreflightStatus(report)) == "ok");
  CHECK(PreflightExitCode(report) == 0);

  report.target.findings.push_back(Finding(PreflightSeverity::Warning, "target_trigger_fires"));
  CHECK(std::string(PreflightStatus(report)) == "warning");
  CHECK(PreflightExitCode(report) == 0);

  // A critical finding on either side alone makes the whole report critical, exit 2.
  PreflightReport source_only = report;
  source_only.source.findings.push_back(Finding(PreflightSeverity::Critical, "slot"));
  CHECK(std::string(PreflightStatus(source_only)) == "critical");
  CHECK(PreflightExitCode(source_only) == 2);
  report.target.findings.push_back(Finding(PreflightSeverity::Critical, "target_table"));
  CHECK(WorstSeverity(report) == PreflightSeverity::Critical);
  CHECK(PreflightExitCode(report) == 2);
}

TEST_CASE("preflight_severity_names_round_trip_and_unknown_names_are_refused", "[preflight]") {
  for (auto s : {PreflightSeverity::Ok, PreflightSeverity::Info, PreflightSeverity::Warning, PreflightSeverity::Critical})
    CHECK(ParsePreflightSeverity(PreflightSeverityName(s)) == s);
  CHECK_FALSE(ParsePreflightSeverity("error").has_value());
  CHECK_FALSE(ParsePreflightSeverity("Critical").has_value());
  CHECK_FALSE(ParsePreflightSeverity("").has_value());
}

TEST_CASE("preflight_trigger_fires_under_replica_only_when_enabled_always_or_replica", "[preflight]") {
  CHECK(ReplicatedTriggerFinding(Trigger('A'), "replica").has_value());
  CHECK(ReplicatedTriggerFinding(Trigger('R'), "replica").has_value());
  CHECK_FALSE(ReplicatedTriggerFinding(Trigger('O'), "replica").has_value());
  CHECK_FALSE(ReplicatedTriggerFinding(Trigger('D'), "replica").has_value());
}

TEST_CASE("preflight_trigger_fires_under_origin_when_enabled_or_always_never_when_disabled", "[preflight]") {
  CHECK(ReplicatedTriggerFinding(Trigger('O'), "origin").has_value());
  CHECK(ReplicatedTriggerFinding(Trigger('A'), "origin").has_value());
  CHECK_FALSE(ReplicatedTriggerFinding(Trigger('R'), "origin").has_value());
  CHECK_FALSE(ReplicatedTriggerFinding(Trigger('D'), "origin").has_value());
}

TEST_CASE("preflight_trigger_finding_is_a_warning_naming_table_trigger_and_remedy", "[preflight]") {
  auto f = ReplicatedTriggerFinding(Trigger('A'), "replica");
  REQUIRE(f.has_value());
  CHECK(f->severity == PreflightSeverity::Warning);
  CHECK(f->check == "target_trigger_fires");
  CHECK(f->subject == "public.orders trigger audit orders");
  CHECK(f->detail.find("ENABLE ALWAYS") != std::string::npos);
  CHECK(f->remedy.find("ALTER TABLE public.orders DISABLE TRIGGER \"audit orders\"") != std::string::npos);

  auto rule = ReplicatedTriggerFinding(Trigger('O', true), "origin");
  REQUIRE(rule.has_value());
  CHECK(rule->check == "target_rule_fires");
  CHECK(rule->remedy.find("session_replication_role = \"replica\"") != std::string::npos);
  CHECK(rule->remedy.find("DISABLE RULE \"audit orders\"") != std::string::npos);
}

TEST_CASE("preflight_text_groups_source_before_target_and_ends_with_a_summary", "[preflight]") {
  PreflightReport report;
  report.flow = "app";
  report.source.reachable = true;
  report.target.reachable = true;
  report.target.findings.push_back(Finding(PreflightSeverity::Critical, "target_table", "create it"));
  report.source.findings.push_back(Finding(PreflightSeverity::Ok, "wal_level"));
  report.source.findings.push_back(Finding(PreflightSeverity::Warning, "slot_wal", "watch it"));
  const std::string text = RenderPreflightText(report);
  const auto wal = text.find("source  ok        wal_level  subject of wal_level: detail of wal_level\n");
  const auto slot = text.find("source  warning   slot_wal  subject of slot_wal: detail of slot_wal; next: watch it\n");
  const auto table = text.find("target  critical  target_table  subject of target_table: detail of target_table; next: create it\n");
  REQUIRE(wal != std::string::npos);
  REQUIRE(slot != std::string::npos);
  REQUIRE(table != std::string::npos);
  CHECK(wal < slot);
  CHECK(slot < table);
  CHECK(text.find("check flow app: source checked, target checked; 1 ok, 0 info, 1 warning, 1 critical: critical") >
        table);
}

TEST_CASE("preflight_json_has_flow_sides_reachability_findings_and_status", "[preflight]") {
  PreflightReport report;
  report.flow = "app";
  report.source.reachable = false;
  report.source.findings.push_back(Finding(PreflightSeverity::Critical, "source_reachable", "start it"));
  report.target.reachable = true;
  report.target.findings.push_back(Finding(PreflightSeverity::Ok, "target_reachable"));
  const auto j = nlohmann::json::parse(RenderPreflightJson(report));
  CHECK(j["flow"] == "app");
  CHECK(j["status"] == "critical");
  CHECK(j["source"]["reachable"] == false);
  REQUIRE(j["source"]["findings"].size() == 1);
  CHECK(j["source"]["findings"][0]["severity"] == "critical");
  CHECK(j["source"]["findings"][0]["check"] == "source_reachable");
  CHECK(j["source"]["findings"][0]["subject"] == "subject of source_reachable");
  CHECK(j["source"]["findings"][0]["detail"] == "detail of source_reachable");
  CHECK(j["source"]["findings"][0]["remedy"] == "start it");
  CHECK(j["target"]["reachable"] == true);
  CHECK(j["target"]["findings"][0]["remedy"].is_null());
}

TEST_CASE("preflight_text_keeps_one_finding_per_line_and_json_keeps_the_text_unchanged", "[preflight]") {
  PreflightReport report;
  report.flow = "app";
  report.source.findings.push_back({PreflightSeverity::Critical, "source_reachable", "host=/tmp port=1",
                                    "connection failed: No such file\n\tIs the server running?", "start it"});
  const std::string text = RenderPreflightText(report);
  CHECK(text.find("connection failed: No such file Is the server running?; next: start it\n") != std::string::npos);
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);  // the finding and the summary
  const auto j = nlohmann::json::parse(RenderPreflightJson(report));
  CHECK(j["source"]["findings"][0]["detail"] == "connection failed: No such file\n\tIs the server running?");
}

}  // namespace unit_preflight_test
