// soak_test.cpp — the pure decisions of `trellara soak` (core/include/trellara/report/soak.h).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "trellara/report/soak.h"
#include "trellara/base/duration.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_soak_test {

using namespace trellara::soak;

TEST_CASE("soak_duration_accepts_seconds_minutes_hours_and_plain_seconds", "[soak]") {
  CHECK(*ParseDurationSeconds("30s", "--duration") == 30);
  CHECK(*ParseDurationSeconds("10m", "--duration") == 600);
  CHECK(*ParseDurationSeconds("1h", "--duration") == 3600);
  CHECK(*ParseDurationSeconds("45", "--duration") == 45);
}

TEST_CASE("soak_duration_rejects_zero_empty_signs_fractions_unknown_units_and_overflow", "[soak]") {
  for (const char* bad : {"", "0", "0s", "s", "-5", "+5", "1.5h", "10d", "10 s", "1h30m", "abc",
                          "99999999999999999999999", "169h"}) {
    INFO(bad);
    auto r = ParseDurationSeconds(bad, "--duration");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("--duration") != std::string::npos);
    CHECK(r.error().message.find("30s, 10m, 1h") != std::string::npos);
  }
  CHECK(*ParseDurationSeconds("168h", "--duration") == kDurationSecondsMax);
}

TEST_CASE("proc_status_fields_are_read_in_kib_and_absent_fields_are_nullopt", "[soak]") {
  const std::string status =
      "Name:\tpostgres\nVmPeak:\t  300000 kB\nVmHWM:\t   51234 kB\nVmRSS:\t   40960 kB\nThreads:\t1\n";
  CHECK(ParseProcStatusKib(status, "VmHWM") == 51234u);
  CHECK(ParseProcStatusKib(status, "VmRSS") == 40960u);
  CHECK_FALSE(ParseProcStatusKib(status, "VmSwap").has_value());
  CHECK_FALSE(ParseProcStatusKib(status, "Threads").has_value());  // not in kB
  CHECK_FALSE(ParseProcStatusKib(status, "Vm").has_value());       // a prefix is not the field
  CHECK_FALSE(ParseProcStatusKib("Name:\tkworker\n", "VmHWM").has_value());
}

TEST_CASE("lag_percentiles_are_nearest_rank_and_empty_is_zero_samples", "[soak]") {
  std::vector<double> lag;
  for (int i = 100; i >= 1; i--) lag.push_back(i);  // unsorted on purpose
  const LagSummary s = SummarizeLag(lag);
  CHECK(s.samples == 100);
  CHECK(s.p50_ms == 50);
  CHECK(s.p99_ms == 99);
  CHECK(s.max_ms == 100);
  CHECK(Percentile({7}, 99) == 7);
  CHECK(Percentile({1, 2, 3}, 50) == 2);
  const LagSummary none = SummarizeLag({});
  CHECK(none.samples == 0);
  CHECK(none.max_ms == 0);
}

TEST_CASE("table_digest_check_fails_on_count_or_digest_difference_and_on_unreadable_side", "[soak]") {
  CHECK(CompareTableDigests("public.t", {10, "123", ""}, {10, "123", ""}).ok);
  const Check count = CompareTableDigests("public.t", {10, "123", ""}, {9, "100", ""});
  CHECK_FALSE(count.ok);
  CHECK(count.detail.find("source 10 rows") != std::string::npos);
  CHECK(count.detail.find("target 9 rows") != std::string::npos);
  CHECK_FALSE(CompareTableDigests("public.t", {10, "123", ""}, {10, "124", ""}).ok);
  const Check missing = CompareTableDigests("public.t", {10, "123", ""}, {0, "", "relation does not exist"});
  CHECK_FALSE(missing.ok);
  CHECK(missing.detail.find("relation does not exist") != std::string::npos);
}

TEST_CASE("memory_limit_check_fails_on_a_peak_above_the_limit_or_a_process_never_sampled", "[soak]") {
  ProcessMemory relay{101, 5, 50 * 1024, 40 * 1024};
  ProcessMemory applier{202, 5, 20 * 1024, 20 * 1024};
  CHECK(MemoryLimitCheck(relay, applier, 64).ok);
  CHECK(MemoryLimitCheck(relay, applier, 50).ok);  // equal to the limit is within it
  const Check over = MemoryLimitCheck(relay, applier, 49);
  CHECK_FALSE(over.ok);
  CHECK(over.detail.find("relay (pid 101) peak VmHWM 51200 KiB EXCEEDS") != std::string::npos);
  ProcessMemory unseen{std::nullopt, 0, 0, 0};
  CHECK_FALSE(MemoryLimitCheck(relay, unseen, 1024).ok);
}

TEST_CASE("settled_check_names_the_first_pending_transaction", "[soak]") {
  CHECK(SettledCheck(5, 5, 600, "").ok);
  const Check c = SettledCheck(5, 3, 600, "xid 77 committed before 0/3000000");
  CHECK_FALSE(c.ok);
  CHECK(c.detail.find("3 of 5") != std::string::npos);
  CHECK(c.detail.find("xid 77") != std::string::npos);
}

TEST_CASE("soak_report_json_has_the_contract_fields_and_ok_needs_every_check", "[soak]") {
  Report r;
  r.flow = "app";
  r.table = "public.trellara_soak";
  r.duration_s = 20;
  r.committed = 12;
  r.rolled_back = 3;
  r.savepoint_rollbacks = 3;
  r.relay = {101, 10, 4096, 3000, 1500, 900, 600};
  r.applier = {202, 10, 2048, 2000, std::nullopt, std::nullopt, std::nullopt};
  r.lag = SummarizeLag({5, 10, 15});
  r.checks = {{"settled", true, "x"}, {"table_digest", true, "y"}};
  auto j = nlohmann::json::parse(RenderReportJson(r));
  CHECK(j["duration_s"] == 20);
  CHECK(j["transactions"]["committed"] == 12);
  CHECK(j["transactions"]["rolled_back"] == 3);
  CHECK(j["transactions"]["savepoint_rollbacks"] == 3);
  CHECK(j["relay"]["pid"] == 101);
  CHECK(j["relay"]["peak_rss_kib"] == 4096);
  CHECK(j["relay"]["max_vmrss_kib"] == 3000);
  CHECK(j["applier"]["peak_rss_kib"] == 2048);
  // The VmRSS split (private heap vs. file vs. shared memory), null where the kernel has none.
  CHECK(j["relay"]["max_rss_anon_kib"] == 1500);
  CHECK(j["relay"]["max_rss_file_kib"] == 900);
  CHECK(j["relay"]["max_rss_shmem_kib"] == 600);
  CHECK(j["applier"]["max_rss_anon_kib"].is_null());
  CHECK(RenderReportText(r).find("max RssAnon 1500 KiB private") != std::string::npos);
  CHECK(j["lag_ms"]["p50"] == 10);
  CHECK(j["lag_ms"]["max"] == 15);
  CHECK(j["lag_ms"]["samples"] == 3);
  CHECK(j["checks"].size() == 2);
  CHECK(j["ok"] == true);
  r.checks.push_back({"memory_limit", false, "relay exceeds"});
  CHECK(nlohmann::json::parse(RenderReportJson(r))["ok"] == false);
  CHECK(RenderReportText(r).find("FAILED  memory_limit") != std::string::npos);
  r.checks.clear();
  CHECK_FALSE(r.ok());  // no checks is no evidence
  r.relay = {std::nullopt, 0, 0, 0};
  CHECK(nlohmann::json::parse(RenderReportJson(r))["relay"]["peak_rss_kib"].is_null());
}

TEST_CASE("durations_one_parser_for_settings_and_options", "[duration]") {
  using trellara::ParseDurationMs;
  CHECK(*ParseDurationMs("250ms") == 250);
  CHECK(*ParseDurationMs("5s") == 5000);
  CHECK(*ParseDurationMs("2m") == 120000);
  CHECK(*ParseDurationMs("2min") == 120000);
  CHECK(*ParseDurationMs("1h") == 3600000);
  CHECK(*ParseDurationMs("0s") == 0);  // bounds are the caller's
  // A bare number only where the caller gives its unit.
  CHECK_FALSE(ParseDurationMs("45").ok());
  CHECK(ParseDurationMs("45").error().message.find("no unit") != std::string::npos);
  CHECK(*ParseDurationMs("45", 1000) == 45000);
  for (const char* bad : {"", "ms", "-5s", "+5s", "1.5s", "5 s", "5sec", "1h30m", "5S", "99999999999999999999999s",
                          "18446744073709551615h"}) {
    INFO(bad);
    CHECK_FALSE(ParseDurationMs(bad, 1000).ok());
  }
  // Seconds for trellara soak: whole seconds only.
  CHECK(*ParseDurationSeconds("2000ms", "--duration") == 2);
  CHECK_FALSE(ParseDurationSeconds("1500ms", "--duration").ok());
}

}  // namespace unit_soak_test
