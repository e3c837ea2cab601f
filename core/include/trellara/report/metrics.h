// metrics.h — the Prometheus text exposition format (version 0.0.4) and the applier's metric set.
//
// Pure formatting: metric families in, the body of a `GET /metrics` answer out, with HELP and TYPE
// lines, escaped label values and a stable order (families and samples as given). It also parses
// the `[metrics] listen` setting. It never opens a socket, starts a thread or reads a clock: the
// applier (applier/engine/metrics_server.cpp) serves what this renders, with values it hands over.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "trellara/base/result.h"

namespace trellara::metrics {

// What a scraper is told the body is.
inline constexpr const char* kExpositionContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kCounter, kGauge };

struct Sample {
  std::vector<std::pair<std::string, std::string>> labels;  // name, value (in the order given)
  // An integer is printed exactly (an LSN does not fit a double's 53-bit mantissa); a double
  // with the shortest text that reads back the same, NaN and +Inf/-Inf as Prometheus spells them.
  std::variant<uint64_t, double> value;
};

struct Family {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<Sample> samples;
};

// Label values: backslash, double quote and line feed escaped (\\, \", \n).
std::string EscapeLabelValue(std::string_view value);
// HELP text: backslash and line feed escaped (\\, \n).
std::string EscapeHelp(std::string_view help);
std::string FormatValue(double value);

bool IsValidMetricName(std::string_view name);  // [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidLabelName(std::string_view name);   // [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__"

// The exposition body. Refuses an invalid metric or label name, a family named twice, a counter
// with a negative or NaN value, and two samples of a family with the same labels — the error
// names the family.
Result<std::string> RenderExposition(const std::vector<Family>& families);

// ---- the applier's metrics (docs/apply.md "Metrics") --------------------------------------

// The applier's states as the trellara_apply_state gauge shows them (one sample per state, 1 for
// the current one).
enum class ApplyState { kRunning, kCaughtUp, kBlocked, kRetrying, kStopped };
const char* ApplyStateName(ApplyState state);

// What the applier last published; rendered as it stands.
struct ApplySnapshot {
  std::string flow;
  ApplyState state = ApplyState::kRunning;
  uint64_t transactions_applied = 0;
  uint64_t duplicates_skipped = 0;
  uint64_t quarantined = 0;        // transactions this process quarantined
  uint64_t quarantine_open = 0;    // unresolved quarantine rows of the flow on the target, as last read
  uint64_t retries = 0;            // transient failures retried
  uint64_t statements = 0;
  uint64_t last_commit_lsn = 0;    // the highest commit LSN applied (or found applied)
  uint64_t lag_records = 0;        // log records between the consumer's read position and the published end
  double lag_seconds = 0;          // see ApplyLagSeconds
  double last_checkpoint_unix_seconds = 0;  // when the consumer offset was last written; 0 never
  bool broker_quorum_available = true;      // a remote applier: the stream answers (for /readyz)
};

// The lag in seconds: 0 when the applier has read and applied everything the log publishes (or
// nothing was applied yet), otherwise now minus the source commit time of the last transaction it
// applied, never negative (a source clock ahead of the applier's counts as 0).
double ApplyLagSeconds(bool caught_up, int64_t last_commit_time_unix_us, int64_t now_unix_us);

// The families of `trellara_apply_*`, in a fixed order, every sample labelled flow="<flow>".
std::vector<Family> ApplyFamilies(const ApplySnapshot& snapshot);

// ---- the forwarder's metrics (docs/broker.md "Metrics and readiness") ---------------------
struct ForwardSnapshot {
  std::string flow;
  std::string stream;
  bool quorum_available = true;  // the last publish (or connect) was acknowledged
  bool stopped = false;
  uint64_t published = 0;        // records the stream acknowledged as new
  uint64_t already_held = 0;     // records the stream acknowledged as duplicates
  uint64_t publish_retries = 0;  // publishes not acknowledged and tried again
  uint64_t resyncs = 0;
  uint64_t refills = 0;           // refill requests answered by publishing again
  uint64_t refilled_records = 0;
  uint64_t positions = 0;         // remote appliers' positions recorded
  uint64_t next_offset = 0;       // the next log offset to publish
  uint64_t acks = 0;              // acknowledgements timed
  double ack_latency_seconds_sum = 0;
  double ack_latency_seconds_max = 0;
};
// The families of `trellara_forward_*`, in a fixed order, labelled flow="<flow>" (and stream).
std::vector<Family> ForwardFamilies(const ForwardSnapshot& snapshot);

// GET /readyz: whether the process does its job right now, and a one-line reason. A forwarder is
// not ready while the broker has no quorum (`broker_quorum_unavailable`) or once it stopped; an
// applier while it is blocked by a quarantine, retrying or stopped.
struct Readiness {
  bool ready = true;
  std::string reason;  // "ready", or the state that keeps it from being ready
};
Readiness ForwardReadiness(const ForwardSnapshot& snapshot);
Readiness ApplyReadiness(const ApplySnapshot& snapshot, bool broker_quorum_available);

// ---- the listen setting -------------------------------------------------------------------

struct ListenAddress {
  enum class Kind { kIpv4, kIpv6 } kind = Kind::kIpv4;
  std::string host;  // the literal address ("127.0.0.1", "::1")
  uint16_t port = 0;
};

// "HOST:PORT": HOST an IPv4 literal, "localhost" (127.0.0.1) or a bracketed IPv6 literal
// ("[::1]"); PORT 1..65535. The error says what is wrong with the value (the caller names the
// setting).
Result<ListenAddress> ParseListenAddress(std::string_view value);

}  // namespace trellara::metrics
