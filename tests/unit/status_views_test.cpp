// status_views_test.cpp — `trellara status --view alerts`: which alerts fire, their severity,
// thresholds and next actions, and the exit code, from facts alone (core status_views.h).
#include <catch2/catch.hpp>

#include "trellara/report/status_views.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_status_views_test {

using namespace trellara;

namespace {

AlertFacts Healthy() {
  AlertFacts f;
  f.flow = "app";
  f.config_path = "/etc/trellara/app.toml";
  f.apply_next_action = "nothing to do";
  f.target_reachable = true;
  f.applier_running = true;
  f.log_bytes = 4096;
  f.source_checked = true;
  f.relay_state = "streaming";
  return f;
}

const Alert& Find(const std::vector<Alert>& alerts, const std::string& name) {
  for (const Alert& a : alerts)
    if (a.name == name) return a;
  FAIL("no alert " << name);
  throw std::logic_error("unreachable");
}

std::vector<std::string> Firing(const std::vector<Alert>& alerts) {
  std::vector<std::string> out;
  for (const Alert& a : alerts)
    if (a.firing) out.push_back(a.name);
  return out;
}

}  // namespace

TEST_CASE("a_healthy_flow_reports_every_alert_and_fires_none", "[status_views]") {
  auto alerts = DecideAlerts(Healthy(), AlertThresholds{});
  std::vector<std::string> names;
  for (const Alert& a : alerts) names.push_back(a.name);
  CHECK(names == std::vector<std::string>{"quarantine_present", "applier_not_running", "target_unreachable",
                                          "relay_error", "log_consumer_lost", "lag_records", "lag_bytes",
                                          "log_retention_bytes"});
  CHECK(Firing(alerts).empty());
  CHECK(AlertsExitCode(alerts) == kAlertsExitNone);
  CHECK(AlertsSummary(alerts) == "ok");
  for (const Alert& a : alerts) {
    CHECK((a.severity == "critical" || a.severity == "warning"));
    CHECK(a.next_action == "nothing to do");
    CHECK_FALSE(a.why.empty());
  }
}

TEST_CASE("a_quarantine_fires_critical_with_the_quarantine_remedy_and_exit_3", "[status_views]") {
  AlertFacts f = Healthy();
  f.applier_running = false;
  f.quarantined = 2;
  f.blocking_xid = "7421";
  f.blocking_commit_lsn = "0/3A1F2B0";
  f.lag_records = 5;
  f.transactions_pending = true;
  f.apply_next_action = "repair the target row, then trellara quarantine replay-ready ...";
  auto alerts = DecideAlerts(f, AlertThresholds{});
  CHECK(Firing(alerts) == std::vector<std::string>{"quarantine_present", "applier_not_running"});
  const Alert& q = Find(alerts, "quarantine_present");
  CHECK(q.severity == "critical");
  CHECK(q.numeric);
  CHECK(q.value == "2");
  CHECK(q.threshold == "0");
  CHECK_THAT(q.why, Catch::Contains("xid 7421 (commit 0/3A1F2B0)"));
  CHECK(q.next_action == f.apply_next_action);
  CHECK_THAT(Find(alerts, "applier_not_running").next_action, Catch::StartsWith("repair the quarantine first"));
  CHECK(AlertsExitCode(alerts) == kAlertsExitCritical);
  CHECK(AlertsSummary(alerts) == "critical");
}

TEST_CASE("a_stopped_applier_with_pending_records_fires_critical", "[status_views]") {
  AlertFacts f = Healthy();
  f.applier_running = false;
  f.lag_records = 3;
  f.lag_bytes = 900;
  f.transactions_pending = true;
  auto alerts = DecideAlerts(f, AlertThresholds{});
  CHECK(Firing(alerts) == std::vector<std::string>{"applier_not_running"});
  const Alert& a = Find(alerts, "applier_not_running");
  CHECK(a.value == "3");
  CHECK(a.next_action == "run trellara apply --config /etc/trellara/app.toml (or start its service)");
  CHECK(AlertsExitCode(alerts) == kAlertsExitCritical);
  // Stopped with only the relay's progress markers past the offset is not an alert.
  f.transactions_pending = false;
  auto markers = DecideAlerts(f, AlertThresholds{});
  CHECK(Firing(markers).empty());
  CHECK_THAT(Find(markers, "applier_not_running").why, Catch::Contains("only 3 progress record(s)"));
  // Nor with nothing at all to apply.
  f.lag_records = 0;
  f.lag_bytes = 0;
  CHECK(Firing(DecideAlerts(f, AlertThresholds{})).empty());
}

TEST_CASE("lag_thresholds_fire_warnings_strictly_above_and_0_disables", "[status_views]") {
  AlertFacts f = Healthy();
  AlertThresholds t;
  t.lag_records = 100;
  t.lag_bytes = 1000;
  f.lag_records = 100;
  f.lag_bytes = 1000;
  CHECK(Firing(DecideAlerts(f, t)).empty());
  f.lag_records = 101;
  auto alerts = DecideAlerts(f, t);
  CHECK(Firing(alerts) == std::vector<std::string>{"lag_records"});
  CHECK(Find(alerts, "lag_records").severity == "warning");
  CHECK(Find(alerts, "lag_records").threshold == "100");
  CHECK_THAT(Find(alerts, "lag_records").next_action, Catch::Contains("--view diagnostics"));
  CHECK(AlertsExitCode(alerts) == kAlertsExitWarning);
  CHECK(AlertsSummary(alerts) == "warning");
  f.lag_bytes = 1001;
  CHECK(Firing(DecideAlerts(f, t)) == std::vector<std::string>{"lag_records", "lag_bytes"});
  t.lag_records = 0;
  t.lag_bytes = 0;
  alerts = DecideAlerts(f, t);
  CHECK(Firing(alerts).empty());
  CHECK_THAT(Find(alerts, "lag_records").why, Catch::Contains("disabled"));
  // Defaults are the documented ones.
  CHECK(AlertThresholds{}.lag_records == 10000);
  CHECK(AlertThresholds{}.lag_bytes == 64ull * 1024 * 1024);
  CHECK(AlertThresholds{}.log_retention_bytes == 1024ull * 1024 * 1024);
}

TEST_CASE("the_relay_is_judged_only_when_the_source_was_reached", "[status_views]") {
  AlertFacts f = Healthy();
  f.relay_state = "failed";
  f.relay_last_error = "could not write segment: No space left on device";
  auto alerts = DecideAlerts(f, AlertThresholds{});
  CHECK(Firing(alerts) == std::vector<std::string>{"relay_error"});
  CHECK_THAT(Find(alerts, "relay_error").why, Catch::Contains("No space left on device"));
  f.relay_state = "backoff";
  CHECK(Firing(DecideAlerts(f, AlertThresholds{})) == std::vector<std::string>{"relay_error"});
  // The error state (the flow cannot continue; the relay is not restarted) is the most critical.
  f.relay_state = "error";
  alerts = DecideAlerts(f, AlertThresholds{});
  CHECK(Firing(alerts) == std::vector<std::string>{"relay_error"});
  CHECK_THAT(Find(alerts, "relay_error").next_action, Catch::Contains("not restarted"));
  f.relay_state = "running";
  CHECK(Firing(DecideAlerts(f, AlertThresholds{})).empty());
  f.relay_state = "";  // the source answers but has no such flow
  CHECK(Find(DecideAlerts(f, AlertThresholds{}), "relay_error").value == "absent");
  CHECK(Find(DecideAlerts(f, AlertThresholds{}), "relay_error").firing);
  f.source_checked = false;
  f.source_unchecked_reason = "cannot connect to the source: connection refused";
  alerts = DecideAlerts(f, AlertThresholds{});
  const Alert& r = Find(alerts, "relay_error");
  CHECK_FALSE(r.firing);
  CHECK(r.value == "unknown");
  CHECK_THAT(r.why, Catch::Contains("connection refused"));
  CHECK(AlertsExitCode(alerts) == kAlertsExitNone);
}

TEST_CASE("an_unreachable_target_fires_and_leaves_the_quarantine_unknown", "[status_views]") {
  AlertFacts f = Healthy();
  f.target_reachable = false;
  f.target_error = "cannot connect to the target of flow app: connection refused";
  f.applier_running = false;
  auto alerts = DecideAlerts(f, AlertThresholds{});
  CHECK(Firing(alerts) == std::vector<std::string>{"target_unreachable"});
  CHECK(Find(alerts, "target_unreachable").why == f.target_error);
  CHECK(Find(alerts, "quarantine_present").value == "unknown");
  CHECK_FALSE(Find(alerts, "quarantine_present").numeric);
  CHECK(AlertsExitCode(alerts) == kAlertsExitCritical);
}

TEST_CASE("log_retention_pressure_and_a_lost_consumer", "[status_views]") {
  AlertFacts f = Healthy();
  AlertThresholds t;
  t.log_retention_bytes = 1 << 20;
  f.log_bytes = (1 << 20) + 1;
  auto alerts = DecideAlerts(f, t);
  CHECK(Firing(alerts) == std::vector<std::string>{"log_retention_bytes"});
  CHECK(AlertsExitCode(alerts) == kAlertsExitWarning);
  f.log_bytes.reset();
  const Alert& unknown = Find(DecideAlerts(f, t), "log_retention_bytes");
  CHECK_FALSE(unknown.firing);
  CHECK(unknown.value == "unknown");
  f.log_bytes = 10;
  f.consumer_lost = true;
  alerts = DecideAlerts(f, t);
  CHECK(Firing(alerts) == std::vector<std::string>{"log_consumer_lost"});
  CHECK_THAT(Find(alerts, "log_consumer_lost").next_action,
             Catch::Contains("trellara reseed --config /etc/trellara/app.toml") &&
                 Catch::Contains("trellara.unregister_consumer('app', 'applier')"));
  CHECK(AlertsExitCode(alerts) == kAlertsExitCritical);
}

TEST_CASE("a_broker_flow_reports_broker_quorum_unavailable_from_the_process_that_talks_to_it", "[status_views]") {
  AlertFacts f = Healthy();
  // A local flow does not report it at all.
  for (const Alert& a : DecideAlerts(f, AlertThresholds{})) CHECK(a.name != "broker_quorum_unavailable");
  f.broker = true;
  const Alert& unknown = Find(DecideAlerts(f, AlertThresholds{}), "broker_quorum_unavailable");
  CHECK_FALSE(unknown.firing);
  CHECK(unknown.value == "unknown");
  f.broker_process = "trellara forward (pid 42)";
  f.broker_state = "running";
  CHECK(Firing(DecideAlerts(f, AlertThresholds{})).empty());
  f.broker_state = "broker_quorum_unavailable";
  f.broker_since = "2026-12-06T14:00:00Z";
  f.broker_error = "No responders available for request";
  auto alerts = DecideAlerts(f, AlertThresholds{});
  CHECK(Firing(alerts) == std::vector<std::string>{"broker_quorum_unavailable"});
  CHECK(AlertsExitCode(alerts) == kAlertsExitCritical);
  const Alert& firing = Find(alerts, "broker_quorum_unavailable");
  CHECK(firing.severity == "critical");
  CHECK(firing.why.find("since 2026-12-06T14:00:00Z") != std::string::npos);
  CHECK(firing.next_action.find("docs/broker.md") != std::string::npos);
}

}  // namespace unit_status_views_test
