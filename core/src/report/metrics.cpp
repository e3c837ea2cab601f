// metrics.cpp — the Prometheus text exposition format and the applier's metric set (metrics.h).
// Formatting and parsing only: no sockets, no threads, no clocks.
#include "trellara/report/metrics.h"

#include <arpa/inet.h>

#include <charconv>
#include <cmath>
#include <set>

namespace trellara::metrics {
namespace {

bool IsNameStart(char c, bool colon_ok) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
}
bool IsNameChar(char c, bool colon_ok) { return IsNameStart(c, colon_ok) || (c >= '0' && c <= '9'); }

bool IsValidName(std::string_view name, bool colon_ok) {
  if (name.empty() || !IsNameStart(name.front(), colon_ok)) return false;
  for (char c : name)
    if (!IsNameChar(c, colon_ok)) return false;
  return true;
}

std::string FormatSampleValue(const std::variant<uint64_t, double>& value) {
  if (const auto* u = std::get_if<uint64_t>(&value)) return std::to_string(*u);
  return FormatValue(std::get<double>(value));
}

std::string LabelSet(const std::vector<std::pair<std::string, std::string>>& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); i++) {
    if (i > 0) out += ",";
    out += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
  }
  return out + "}";
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  if (ec != std::errc()) return "NaN";  // cannot happen with 64 bytes for a finite double
  return std::string(buffer, end);
}

bool IsValidMetricName(std::string_view name) { return IsValidName(name, true); }
bool IsValidLabelName(std::string_view name) { return IsValidName(name, false) && !name.starts_with("__"); }

Result<std::string> RenderExposition(const std::vector<Family>& families) {
  std::string out;
  std::set<std::string> names;
  for (const Family& f : families) {
    if (!IsValidMetricName(f.name))
      return MakeError("metric family \"" + f.name + "\" has an invalid name; names match [a-zA-Z_:][a-zA-Z0-9_:]*");
    if (!names.insert(f.name).second)
      return MakeError("metric family " + f.name + " is listed twice; each family is rendered once");
    out += "# HELP " + f.name + " " + EscapeHelp(f.help) + "\n";
    out += "# TYPE " + f.name + " " + (f.type == MetricType::kCounter ? "counter" : "gauge") + "\n";
    std::set<std::string> label_sets;
    for (const Sample& s : f.samples) {
      std::set<std::string> label_names;
      for (const auto& [label, _] : s.labels) {
        if (!IsValidLabelName(label))
          return MakeError("metric family " + f.name + " has a sample with an invalid label name \"" + label +
                           "\"; label names match [a-zA-Z_][a-zA-Z0-9_]* and do not start with __");
        if (!label_names.insert(label).second)
          return MakeError("metric family " + f.name + " has a sample with label " + label + " twice");
      }
      if (f.type == MetricType::kCounter) {
        if (const auto* d = std::get_if<double>(&s.value); d != nullptr && (std::isnan(*d) || *d < 0))
          return MakeError("counter " + f.name + " has the value " + FormatValue(*d) +
                           "; a counter is a non-negative number");
      }
      const std::string labels = LabelSet(s.labels);
      if (!label_sets.insert(labels).second)
        return MakeError("metric family " + f.name + " has two samples with the labels " +
                         (labels.empty() ? std::string("{}") : labels));
      out += f.name + labels + " " + FormatSampleValue(s.value) + "\n";
    }
  }
  return out;
}

const char* ApplyStateName(ApplyState state) {
  switch (state) {
    case ApplyState::kRunning:
      return "running";
    case ApplyState::kCaughtUp:
      return "caught_up";
    case ApplyState::kBlocked:
      return "blocked";
    case ApplyState::kRetrying:
      return "retrying";
    case ApplyState::kStopped:
      return "stopped";
  }
  return "unknown";
}

double ApplyLagSeconds(bool caught_up, int64_t last_commit_time_unix_us, int64_t now_unix_us) {
  if (caught_up || last_commit_time_unix_us <= 0 || now_unix_us <= last_commit_time_unix_us) return 0;
  return static_cast<double>(now_unix_us - last_commit_time_unix_us) / 1e6;
}

std::vector<Family> ApplyFamilies(const ApplySnapshot& s) {
  const std::vector<std::pair<std::string, std::string>> flow{{"flow", s.flow}};
  auto one = [&](std::string name, MetricType type, std::string help, std::variant<uint64_t, double> value) {
    return Family{std::move(name), std::move(help), type, {Sample{flow, value}}};
  };
  std::vector<Family> families;
  families.push_back(one("trellara_apply_up", MetricType::kGauge,
                         "1 while the trellara apply process of the flow serves metrics", uint64_t{1}));
  Family state{"trellara_apply_state", "The applier's state: 1 for the current state, 0 for the others",
               MetricType::kGauge, {}};
  for (ApplyState st : {ApplyState::kRunning, ApplyState::kCaughtUp, ApplyState::kBlocked, ApplyState::kRetrying,
                        ApplyState::kStopped})
    state.samples.push_back(
        Sample{{{"flow", s.flow}, {"state", ApplyStateName(st)}}, uint64_t{st == s.state ? 1u : 0u}});
  families.push_back(std::move(state));
  families.push_back(one("trellara_apply_transactions_applied_total", MetricType::kCounter,
                         "Source transactions this process committed to the target", s.transactions_applied));
  families.push_back(one("trellara_apply_duplicates_skipped_total", MetricType::kCounter,
                         "Source transactions this process found already applied (dedup) and skipped",
                         s.duplicates_skipped));
  families.push_back(one("trellara_apply_quarantined_total", MetricType::kCounter,
                         "Source transactions this process quarantined", s.quarantined));
  families.push_back(one("trellara_apply_quarantine_open", MetricType::kGauge,
                         "Unresolved quarantine rows of the flow on the target (quarantined or replay_ready), "
                         "as last read",
                         s.quarantine_open));
  families.push_back(one("trellara_apply_retries_total", MetricType::kCounter,
                         "Transient failures (deadlock, lost connection, ...) this process retried", s.retries));
  families.push_back(one("trellara_apply_statements_total", MetricType::kCounter,
                         "Row statements this process executed on the target", s.statements));
  families.push_back(one("trellara_apply_last_commit_lsn", MetricType::kGauge,
                         "The highest source commit LSN applied to the target, as a number", s.last_commit_lsn));
  families.push_back(one("trellara_apply_lag_records", MetricType::kGauge,
                         "Log records between the applier's read position and the log's published end",
                         s.lag_records));
  families.push_back(one("trellara_apply_lag_seconds", MetricType::kGauge,
                         "0 when caught up, otherwise now minus the source commit time of the last applied "
                         "transaction",
                         s.lag_seconds));
  families.push_back(one("trellara_apply_last_checkpoint_timestamp_seconds", MetricType::kGauge,
                         "Unix time the consumer offset was last written (0: not yet by this process)",
                         s.last_checkpoint_unix_seconds));
  return families;
}

std::vector<Family> ForwardFamilies(const ForwardSnapshot& s) {
  const std::vector<std::pair<std::string, std::string>> labels{{"flow", s.flow}, {"stream", s.stream}};
  auto one = [&](std::string name, MetricType type, std::string help, std::variant<uint64_t, double> value) {
    return Family{std::move(name), std::move(help), type, {Sample{labels, value}}};
  };
  std::vector<Family> f;
  f.push_back(one("trellara_forward_up", MetricType::kGauge, "1 while the trellara forward process of the flow serves "
                  "metrics", uint64_t{1}));
  f.push_back(one("trellara_forward_broker_quorum_available", MetricType::kGauge,
                  "1 while the broker acknowledges publishes, 0 while it has no quorum or cannot be reached",
                  uint64_t{s.quorum_available ? 1u : 0u}));
  f.push_back(one("trellara_forward_published_total", MetricType::kCounter,
                  "Log records the stream acknowledged as new", s.published));
  f.push_back(one("trellara_forward_already_held_total", MetricType::kCounter,
                  "Log records the stream acknowledged as duplicates (it held them)", s.already_held));
  f.push_back(one("trellara_forward_publish_retries_total", MetricType::kCounter,
                  "Publishes not acknowledged (no quorum, timeout, connection down) and tried again",
                  s.publish_retries));
  f.push_back(one("trellara_forward_resyncs_total", MetricType::kCounter,
                  "Times the forwarder resumed after the stream's last record", s.resyncs));
  f.push_back(one("trellara_forward_refills_total", MetricType::kCounter,
                  "Remote appliers' refill requests answered by publishing again", s.refills));
  f.push_back(one("trellara_forward_refilled_records_total", MetricType::kCounter,
                  "Log records published again for refills", s.refilled_records));
  f.push_back(one("trellara_forward_positions_total", MetricType::kCounter,
                  "Remote appliers' durable positions recorded as consumers of the log", s.positions));
  f.push_back(one("trellara_forward_next_offset", MetricType::kGauge, "The next log offset the forwarder publishes",
                  s.next_offset));
  f.push_back(one("trellara_forward_ack_latency_seconds_sum", MetricType::kCounter,
                  "Sum of the broker's acknowledgement latencies", s.ack_latency_seconds_sum));
  f.push_back(one("trellara_forward_ack_latency_seconds_count", MetricType::kCounter,
                  "Acknowledgements timed", s.acks));
  f.push_back(one("trellara_forward_ack_latency_seconds_max", MetricType::kGauge,
                  "The longest acknowledgement latency seen by this process", s.ack_latency_seconds_max));
  return f;
}

Readiness ForwardReadiness(const ForwardSnapshot& s) {
  if (s.stopped) return {false, "stopped"};
  if (!s.quorum_available) return {false, "broker_quorum_unavailable"};
  return {true, "ready"};
}

Readiness ApplyReadiness(const ApplySnapshot& s, bool broker_quorum_available) {
  switch (s.state) {
    case ApplyState::kBlocked: return {false, "blocked"};
    case ApplyState::kRetrying: return {false, "retrying"};
    case ApplyState::kStopped: return {false, "stopped"};
    case ApplyState::kRunning:
    case ApplyState::kCaughtUp: break;
  }
  if (!broker_quorum_available) return {false, "broker_quorum_unavailable"};
  return {true, "ready"};
}

Result<ListenAddress> ParseListenAddress(std::string_view value) {
  ListenAddress address;
  std::string_view host;
  std::string_view port;
  if (value.starts_with("[")) {
    const auto close = value.find(']');
    if (close == std::string_view::npos || close + 1 >= value.size() || value[close + 1] != ':')
      return MakeError("\"" + std::string(value) + "\" is not [IPV6]:PORT");
    host = value.substr(1, close - 1);
    port = value.substr(close + 2);
    address.kind = ListenAddress::Kind::kIpv6;
  } else {
    const auto colon = value.rfind(':');
    if (colon == std::string_view::npos) return MakeError("\"" + std::string(value) + "\" has no :PORT");
    host = value.substr(0, colon);
    port = value.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return MakeError("\"" + std::string(value) + "\": an IPv6 address is written in brackets, [::1]:PORT");
  }
  if (host.empty()) return MakeError("\"" + std::string(value) + "\" has no host");
  address.host = host == "localhost" ? "127.0.0.1" : std::string(host);
  unsigned char buffer[sizeof(struct in6_addr)];
  const int family = address.kind == ListenAddress::Kind::kIpv6 ? AF_INET6 : AF_INET;
  if (inet_pton(family, address.host.c_str(), buffer) != 1)
    return MakeError("\"" + std::string(value) + "\": host " + std::string(host) + " is not an " +
                     (family == AF_INET6 ? "IPv6" : "IPv4") + " address literal (or localhost)");
  uint32_t number = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || number < 1 || number > 65535)
    return MakeError("\"" + std::string(value) + "\": port " + std::string(port) + " is not a number 1..65535");
  address.port = static_cast<uint16_t>(number);
  return address;
}

}  // namespace trellara::metrics
