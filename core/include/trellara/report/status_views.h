// status_views.h — the decisions behind `trellara status --view alerts` (docs/status.md): which alerts fire for a flow, with which severity, value and threshold, why, and
// the safe next action of each; and the command's exit code for that view. Pure: the adapter
// (applier/commands/status_command.cpp) reads the facts from the target, the log directory and, when
// reachable, the source; nothing here does I/O.
//
// Alerts (every one is always reported, firing or not, so a monitor sees the full set):
//   quarantine_present        critical  a transaction of the flow is quarantined (the applier halts
//                                       at it until it is repaired and marked replay-ready)
//   applier_not_running       critical  no applier runs while the log holds transactions past its
//                                       consumer offset (nothing will apply them); value: the
//                                       records past the offset
//   target_unreachable        critical  status cannot reach the target (its facts are unknown)
//   relay_error               critical  the source's relay for the flow is in state failed/backoff/error;
//                                       evaluated only when the source is reachable (otherwise not
//                                       firing, value "unknown", and `why` says the source was not
//                                       reachable or not configured)
//   log_consumer_lost         critical  the log's retention ceiling marked the applier's consumer
//                                       lost: records it needed are gone, the flow must be reseeded
//   lag_records               warning   records past the consumer offset > threshold
//   lag_bytes                 warning   bytes past the consumer offset > threshold
//   log_retention_bytes       warning   bytes the log directory's segments hold > threshold (the
//                                       log is retained for the slowest consumer: pressure on the
//                                       source's disk)
// A threshold of 0 for a warning alert disables it (it is reported, never firing).
// A flow whose configuration names a broker ([transport] kind = "nats") also reports:
//   broker_quorum_unavailable critical  the forwarder (source host) or the remote applier (its
//                                       host) says the broker does not acknowledge: nothing is
//                                       published or received; with source_ack = broker_quorum the
//                                       source's slot does not advance (its WAL is kept)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trellara {

// Defaults documented in docs/status.md and `trellara status --help`.
struct AlertThresholds {
  uint64_t lag_records = 10000;
  uint64_t lag_bytes = 64ull << 20;           // 64 MiB
  uint64_t log_retention_bytes = 1ull << 30;  // 1 GiB
};

struct AlertFacts {
  std::string flow;
  std::string config_path;      // for the commands the next actions name
  std::string apply_next_action;  // DecideApplyStatus's next action (the quarantine's own remedy)
  // The target.
  bool target_reachable = false;
  std::string target_error;     // why not, when !target_reachable
  bool applier_running = false;
  uint64_t quarantined = 0;
  std::string blocking_xid;     // the oldest quarantined boundary ("" when none)
  std::string blocking_commit_lsn;
  // The log directory.
  uint64_t lag_records = 0;
  uint64_t lag_bytes = 0;
  // At least one transaction (envelope or commit marker) is past the consumer offset: the relay's
  // progress markers alone (written while the source's WAL moves without published changes) are
  // no work left undone, so they do not make applier_not_running fire.
  bool transactions_pending = false;
  std::optional<uint64_t> log_bytes;  // sum of segment bytes; nullopt when unknown
  bool consumer_lost = false;
  // The source (relay). source_checked: a [source] conninfo is configured and status connected.
  bool source_checked = false;
  std::string source_unchecked_reason;  // why not, when !source_checked
  std::string relay_state;              // trellara.status().state; "" when the flow has no row
  std::string relay_last_error;
  // The broker ([transport] kind = "nats"): what the running forwarder or remote applier says.
  bool broker = false;
  std::string broker_process;  // "" when neither runs (the state is unknown)
  std::string broker_state;    // running | broker_quorum_unavailable | stopped
  std::string broker_since;
  std::string broker_error;
};

struct Alert {
  std::string name;
  std::string severity;  // critical | warning
  bool firing = false;
  bool numeric = false;  // value and threshold are decimal integers (JSON numbers)
  std::string value;
  std::string threshold;
  std::string why;
  std::string next_action;
};

std::vector<Alert> DecideAlerts(const AlertFacts& facts, const AlertThresholds& thresholds);

// Exit codes of `trellara status --view alerts` (the output is printed either way):
//   0 no alert fires; 3 at least one critical alert fires; 4 only warning alerts fire.
// Other views exit 0 whenever the status could be read.
constexpr int kAlertsExitNone = 0;
constexpr int kAlertsExitCritical = 3;
constexpr int kAlertsExitWarning = 4;
int AlertsExitCode(const std::vector<Alert>& alerts);

// The single summary line of the alerts view: "critical" | "warning" | "ok".
std::string AlertsSummary(const std::vector<Alert>& alerts);

}  // namespace trellara
