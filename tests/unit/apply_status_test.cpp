// apply_status_test.cpp — `trellara status`'s state and safe next action, from facts alone.
#include <catch2/catch.hpp>

#include "trellara/report/apply_status.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_apply_status_test {

using namespace trellara;

namespace {

ApplyStatusFacts Facts() {
  ApplyStatusFacts f;
  f.flow = "app";
  f.config_path = "/etc/trellara/app.toml";
  f.target_state_present = true;
  f.recorded_state = "caught_up";
  return f;
}

}  // namespace

TEST_CASE("a_quarantined_boundary_blocks_whether_or_not_an_applier_runs", "[status]") {
  ApplyStatusFacts f = Facts();
  f.blocking = StatusBoundary{"7421", "0/3A1F2B0", "quarantined transaction 7421 (commit 0/3A1F2B0) of flow app: ..."};
  f.lag_records = 12;
  auto stopped = DecideApplyStatus(f);
  CHECK(stopped.state == "blocked");
  CHECK_THAT(stopped.next_action,
             Catch::StartsWith("quarantined transaction 7421") &&
                 Catch::Contains("trellara quarantine replay-ready --config /etc/trellara/app.toml --xid 7421 "
                                 "--commit-lsn 0/3A1F2B0, then run trellara apply --config /etc/trellara/app.toml"));
  f.applier_running = true;
  auto running = DecideApplyStatus(f);
  CHECK(running.state == "blocked");
  CHECK_THAT(running.next_action, Catch::Contains("the running applier retries it within a second"));
}

TEST_CASE("a_running_applier_is_running_or_caught_up_by_lag", "[status]") {
  ApplyStatusFacts f = Facts();
  f.applier_running = true;
  CHECK(DecideApplyStatus(f).state == "caught_up");
  CHECK_THAT(DecideApplyStatus(f).next_action, Catch::StartsWith("nothing to do"));
  f.lag_records = 40;
  auto v = DecideApplyStatus(f);
  CHECK(v.state == "running");
  CHECK_THAT(v.next_action, Catch::Contains("40 records behind the log"));
}

TEST_CASE("without_an_applier_the_action_names_the_command_to_run", "[status]") {
  ApplyStatusFacts f = Facts();
  auto idle = DecideApplyStatus(f);
  CHECK(idle.state == "caught_up");
  CHECK_THAT(idle.next_action, Catch::Contains("no applier is running") &&
                                   Catch::Contains("run trellara apply --config /etc/trellara/app.toml"));

  f.lag_records = 5;
  f.lag_bytes = 900;
  auto behind = DecideApplyStatus(f);
  CHECK(behind.state == "stopped");
  CHECK_THAT(behind.next_action, Catch::Contains("(5 records, 900 bytes to apply"));

  ApplyStatusFacts never = Facts();
  never.target_state_present = false;
  never.recorded_state.clear();
  never.lag_records = 3;
  CHECK_THAT(DecideApplyStatus(never).next_action, Catch::Contains("trellara apply has not run for flow app"));
  // A new flow whose log is still empty: not "caught_up" before the applier ever ran.
  never.lag_records = 0;
  auto fresh = DecideApplyStatus(never);
  CHECK(fresh.state == "stopped");
  CHECK_THAT(fresh.next_action, Catch::Contains("trellara apply has not run for flow app"));

  ApplyStatusFacts waiting = Facts();
  waiting.waiting = StatusBoundary{"9", "0/10", ""};
  auto retry = DecideApplyStatus(waiting);
  CHECK(retry.state == "stopped");  // a replay-ready boundary is work even with no log lag
  CHECK_THAT(retry.next_action, Catch::Contains("it retries transaction 9 (commit 0/10), marked replay-ready"));
}

TEST_CASE("a_live_applier_retrying_or_reconnecting_shows_the_last_error", "[status]") {
  ApplyStatusFacts f = Facts();
  f.target_error = "cannot connect to the target (connection refused)";
  f.retry = ApplierRetryState{"reconnecting", "lost the connection to the target", "", 3, "2026-11-30T12:00:00Z"};
  auto reconnecting = DecideApplyStatus(f);
  CHECK(reconnecting.state == "reconnecting");
  CHECK_THAT(reconnecting.next_action, Catch::Contains("attempt 3, since 2026-11-30T12:00:00Z") &&
                                           Catch::Contains("last error: lost the connection to the target"));
  f.target_error.clear();
  f.retry = ApplierRetryState{"retrying", "cannot execute INSERT in a read-only transaction", "25006", 2, "t0"};
  f.applier_running = true;
  f.lag_records = 5;
  auto retrying = DecideApplyStatus(f);
  CHECK(retrying.state == "retrying");
  CHECK_THAT(retrying.next_action, Catch::Contains("(SQLSTATE 25006)") && Catch::Contains("read-only"));
}

TEST_CASE("a_quarantine_wins_over_a_retry_and_a_running_state_is_not_a_retry", "[status]") {
  ApplyStatusFacts f = Facts();
  f.retry = ApplierRetryState{"retrying", "deadlock detected", "40P01", 1, "t0"};
  f.blocking = StatusBoundary{"7", "0/10", "quarantined transaction 7 (commit 0/10) of flow app: ..."};
  CHECK(DecideApplyStatus(f).state == "blocked");
  f.blocking.reset();
  f.retry->state = "running";  // a state file after recovery: not a retry
  f.applier_running = true;
  CHECK(DecideApplyStatus(f).state == "caught_up");
}

TEST_CASE("an_unreachable_target_without_a_retrying_applier_says_so", "[status]") {
  ApplyStatusFacts f = Facts();
  f.target_error = "cannot connect to the target (connection refused)";
  auto v = DecideApplyStatus(f);
  CHECK(v.state == "target_unreachable");
  CHECK_THAT(v.next_action, Catch::Contains("connection refused") && Catch::Contains("[target] conninfo"));
}

TEST_CASE("an_unfinished_initial_copy_is_named_with_its_rerun", "[status]") {
  ApplyStatusFacts f = Facts();
  f.applier_running = true;
  f.snapshot_tables_unfinished = 2;
  f.snapshot_unfinished_run = "snap-1";
  const ApplyStatusVerdict v = DecideApplyStatus(f);
  CHECK(v.state == "caught_up");
  CHECK(v.next_action.find("2 table(s) of snapshot run snap-1") != std::string::npos);
  CHECK(v.next_action.find("--run-id snap-1") != std::string::npos);
  f.snapshot_tables_unfinished = 0;
  CHECK(DecideApplyStatus(f).next_action.find("snapshot") == std::string::npos);
}

}  // namespace unit_apply_status_test
