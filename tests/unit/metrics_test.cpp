// metrics_test.cpp — the Prometheus text exposition (core metrics.h): escaping, HELP/TYPE lines,
// stable order, refusals, the applier's metric set, the lag definition and the listen setting.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "trellara/report/metrics.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_metrics_test {

using namespace trellara::metrics;

TEST_CASE("label_values_escape_backslash_quote_and_newline", "[metrics]") {
  CHECK(EscapeLabelValue("plain") == "plain");
  CHECK(EscapeLabelValue("a\\b") == "a\\\\b");
  CHECK(EscapeLabelValue("say \"hi\"") == "say \\\"hi\\\"");
  CHECK(EscapeLabelValue("two\nlines") == "two\\nlines");
  CHECK(EscapeHelp("a \"quoted\" \\ help\nline") == "a \"quoted\" \\\\ help\\nline");
}

TEST_CASE("values_print_exactly_and_special_doubles_as_prometheus_spells_them", "[metrics]") {
  CHECK(FormatValue(0.0) == "0");
  CHECK(FormatValue(1.5) == "1.5");
  CHECK(FormatValue(std::numeric_limits<double>::quiet_NaN()) == "NaN");
  CHECK(FormatValue(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(FormatValue(-std::numeric_limits<double>::infinity()) == "-Inf");
  // An LSN above 2^53 is printed exactly, not rounded through a double.
  Family f{"lsn", "an lsn", MetricType::kGauge, {Sample{{}, uint64_t{0xFFFFFFFFFFFFFFFFull}}}};
  auto body = RenderExposition({f});
  REQUIRE(body);
  CHECK(*body == "# HELP lsn an lsn\n# TYPE lsn gauge\nlsn 18446744073709551615\n");
}

TEST_CASE("exposition_has_help_and_type_before_samples_in_the_given_order", "[metrics]") {
  std::vector<Family> families{
      {"b_total", "second", MetricType::kCounter, {Sample{{{"flow", "x\"y"}}, uint64_t{3}}}},
      {"a", "first", MetricType::kGauge,
       {Sample{{{"flow", "f"}, {"state", "one"}}, 1.0}, Sample{{{"flow", "f"}, {"state", "two"}}, 0.25}}},
  };
  auto body = RenderExposition(families);
  REQUIRE(body);
  CHECK(*body ==
        "# HELP b_total second\n# TYPE b_total counter\nb_total{flow=\"x\\\"y\"} 3\n"
        "# HELP a first\n# TYPE a gauge\na{flow=\"f\",state=\"one\"} 1\na{flow=\"f\",state=\"two\"} 0.25\n");
}

TEST_CASE("exposition_refuses_bad_names_duplicates_and_negative_counters", "[metrics]") {
  auto err = [](std::vector<Family> families) {
    auto body = RenderExposition(families);
    REQUIRE_FALSE(body);
    return body.error().message;
  };
  CHECK_THAT(err({{"1bad", "h", MetricType::kGauge, {}}}), Catch::Contains("1bad"));
  CHECK_THAT(err({{"ok", "h", MetricType::kGauge, {Sample{{{"bad-label", "v"}}, 1.0}}}}),
             Catch::Contains("bad-label"));
  CHECK_THAT(err({{"ok", "h", MetricType::kGauge, {Sample{{{"__reserved", "v"}}, 1.0}}}}),
             Catch::Contains("__reserved"));
  CHECK_THAT(err({{"twice", "h", MetricType::kGauge, {}}, {"twice", "h", MetricType::kGauge, {}}}),
             Catch::Contains("twice is listed twice"));
  CHECK_THAT(err({{"c_total", "h", MetricType::kCounter, {Sample{{}, -1.0}}}}), Catch::Contains("c_total"));
  CHECK_THAT(err({{"same", "h", MetricType::kGauge, {Sample{{{"flow", "a"}}, 1.0}, Sample{{{"flow", "a"}}, 2.0}}}}),
             Catch::Contains("two samples"));
  CHECK(IsValidMetricName("trellara:apply_up"));
  CHECK_FALSE(IsValidLabelName("a:b"));
}

TEST_CASE("apply_families_label_every_sample_with_the_flow_and_show_one_state", "[metrics]") {
  ApplySnapshot s;
  s.flow = "app";
  s.state = ApplyState::kBlocked;
  s.transactions_applied = 7;
  s.duplicates_skipped = 2;
  s.quarantined = 1;
  s.quarantine_open = 1;
  s.retries = 4;
  s.statements = 21;
  s.last_commit_lsn = 0x3A1F2B0;
  s.lag_records = 5;
  s.lag_seconds = 2.5;
  s.last_checkpoint_unix_seconds = 1700000000.25;
  const auto families = ApplyFamilies(s);
  std::vector<std::string> names;
  for (const auto& f : families) {
    names.push_back(f.name);
    for (const auto& sample : f.samples) {
      REQUIRE_FALSE(sample.labels.empty());
      CHECK(sample.labels.front() == std::pair<std::string, std::string>{"flow", "app"});
    }
    CHECK(f.type == (f.name.ends_with("_total") ? MetricType::kCounter : MetricType::kGauge));
  }
  CHECK(names == std::vector<std::string>{
                     "trellara_apply_up", "trellara_apply_state", "trellara_apply_transactions_applied_total",
                     "trellara_apply_duplicates_skipped_total", "trellara_apply_quarantined_total",
                     "trellara_apply_quarantine_open", "trellara_apply_retries_total",
                     "trellara_apply_statements_total", "trellara_apply_last_commit_lsn", "trellara_apply_lag_records",
                     "trellara_apply_lag_seconds", "trellara_apply_last_checkpoint_timestamp_seconds"});
  auto body = RenderExposition(families);
  REQUIRE(body);
  CHECK_THAT(*body, Catch::Contains("trellara_apply_state{flow=\"app\",state=\"blocked\"} 1\n"));
  CHECK_THAT(*body, Catch::Contains("trellara_apply_state{flow=\"app\",state=\"running\"} 0\n"));
  CHECK_THAT(*body, Catch::Contains("trellara_apply_transactions_applied_total{flow=\"app\"} 7\n"));
  CHECK_THAT(*body, Catch::Contains("trellara_apply_last_commit_lsn{flow=\"app\"} 60945072\n"));
  CHECK_THAT(*body, Catch::Contains("trellara_apply_lag_seconds{flow=\"app\"} 2.5\n"));
  CHECK_THAT(*body, Catch::Contains("trellara_apply_last_checkpoint_timestamp_seconds{flow=\"app\"} 1700000000.25\n"));
}

TEST_CASE("lag_seconds_is_zero_when_caught_up_and_never_negative", "[metrics]") {
  CHECK(ApplyLagSeconds(true, 1'000'000, 9'000'000) == 0);
  CHECK(ApplyLagSeconds(false, 0, 9'000'000) == 0);          // nothing applied yet
  CHECK(ApplyLagSeconds(false, 10'000'000, 9'000'000) == 0);  // source clock ahead
  CHECK(ApplyLagSeconds(false, 1'000'000, 3'500'000) == 2.5);
}

TEST_CASE("listen_setting_accepts_host_port_and_refuses_the_rest", "[metrics]") {
  auto ok = ParseListenAddress("127.0.0.1:9187");
  REQUIRE(ok);
  CHECK(ok->host == "127.0.0.1");
  CHECK(ok->port == 9187);
  auto local = ParseListenAddress("localhost:1");
  REQUIRE(local);
  CHECK(local->host == "127.0.0.1");
  auto v6 = ParseListenAddress("[::1]:65535");
  REQUIRE(v6);
  CHECK(v6->kind == ListenAddress::Kind::kIpv6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == 65535);
  for (const char* bad : {"", "9187", "127.0.0.1", "127.0.0.1:", ":9187", "127.0.0.1:0", "127.0.0.1:65536",
                          "127.0.0.1:91x", "example.com:9187", "::1:9187", "[::1]9187", "[nothost]:1", "1.2.3:80"}) {
    INFO(bad);
    CHECK_FALSE(ParseListenAddress(bad));
  }
}

TEST_CASE("forward_families_render_and_readiness_follows_the_broker_quorum", "[metrics]") {
  ForwardSnapshot s;
  s.flow = "app";
  s.stream = "TRELLARA_APP";
  s.published = 12;
  s.publish_retries = 3;
  s.acks = 12;
  s.ack_latency_seconds_sum = 0.024;
  s.ack_latency_seconds_max = 0.005;
  auto body = RenderExposition(ForwardFamilies(s));
  REQUIRE(body.ok());
  CHECK(body->find("trellara_forward_published_total{flow=\"app\",stream=\"TRELLARA_APP\"} 12\n") != std::string::npos);
  CHECK(body->find("trellara_forward_publish_retries_total{flow=\"app\",stream=\"TRELLARA_APP\"} 3\n") != std::string::npos);
  CHECK(body->find("trellara_forward_broker_quorum_available{flow=\"app\",stream=\"TRELLARA_APP\"} 1\n") != std::string::npos);
  CHECK(ForwardReadiness(s).ready);
  s.quorum_available = false;
  CHECK_FALSE(ForwardReadiness(s).ready);
  CHECK(ForwardReadiness(s).reason == "broker_quorum_unavailable");
  s.quorum_available = true;
  s.stopped = true;
  CHECK(ForwardReadiness(s).reason == "stopped");

  ApplySnapshot a;
  a.flow = "app";
  CHECK(ApplyReadiness(a, true).ready);
  CHECK(ApplyReadiness(a, false).reason == "broker_quorum_unavailable");
  a.state = ApplyState::kBlocked;
  CHECK(ApplyReadiness(a, true).reason == "blocked");
  a.state = ApplyState::kCaughtUp;
  CHECK(ApplyReadiness(a, true).ready);
}

}  // namespace unit_metrics_test
