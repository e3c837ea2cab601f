// apply_metrics.cpp — what the applier hands its GET /metrics endpoint ([metrics] listen;
// docs/apply.md "Metrics"): a snapshot of its counters, lag and checkpoint (PublishMetrics), and
// the count of the flow's open quarantine rows read from the target (ReadQuarantineOpen).
// metrics_server.cpp serves what is handed over.
//
// A no-op without [metrics] listen. Never changes what the applier does: a figure it cannot read
// keeps its last value, and nothing here fails the loop.
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>

#include "engine/applier.h"
#include "trellara/base/cadence.h"
#include "trellara/log/scan.h"

namespace trellara::cli::apply {
namespace {

// The metrics snapshot is handed to the server at most this often while applying (and at every
// state change): a copy under a mutex and, then only, one read of the log's index for its end.
constexpr auto kMetricsPublishInterval = cadence::kApplierMetricsPublish;

}  // namespace

void Applier::PublishMetrics(metrics::ApplyState state, bool force) {
  if (!metrics_) return;
  const auto now = Clock::now();
  if (!force && now - last_metrics_publish_ < kMetricsPublishInterval) return;
  last_metrics_publish_ = now;
  metrics::ApplySnapshot s;
  s.flow = config_.flow_name;
  s.state = state;
  s.transactions_applied = counters_.applied;
  s.duplicates_skipped = counters_.skipped_duplicates;
  s.quarantined = quarantined_;
  s.quarantine_open = quarantine_open_;
  s.retries = retries_;
  s.statements = counters_.statements;
  s.last_commit_lsn = applied_lsn_;
  if (reader_ && device_) {
    // The published end: one read of the last segment's index (log/scan.h). Unreadable for a
    // moment (a segment being rolled) it keeps the last figure rather than inventing one.
    auto end = log::PublishedEndOffset(*device_, config_.log_directory);
    if (end)
      s.lag_records = *end > reader_->next_offset() ? *end - reader_->next_offset() : 0;
    else
      s.lag_records = metrics_snapshot_.Get().lag_records;
  }
  const bool caught_up = state == metrics::ApplyState::kCaughtUp || (s.lag_records == 0 && pipeline_.size() == 0);
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  s.lag_seconds = metrics::ApplyLagSeconds(caught_up, last_commit_time_us_, now_us);
  s.last_checkpoint_unix_seconds = offset_written_unix_seconds_;
  s.broker_quorum_available = !receiver_ || receiver_->broker_available();
  metrics_snapshot_.Set(s);
}

void Applier::ReadQuarantineOpen() {
  if (!metrics_ || conn_ == nullptr) return;
  PgResult r = conn_->ExecParams(
      "SELECT count(*) FROM trellara.quarantine WHERE flow = $1 AND state IN ('quarantined', 'replay_ready')",
      {config_.flow_name});
  if (!r.ok() || r.rows() != 1 || !r.Value(0, 0)) {
    // The figure stays as last read; the apply loop's own statements report a lost target.
    std::cerr << "trellara: warning: flow " << config_.flow_name
              << ": cannot read the open quarantine rows for trellara_apply_quarantine_open (kept at "
              << quarantine_open_ << "): " << r.Describe() << "\n";
    return;
  }
  quarantine_open_ = std::stoull(*r.Value(0, 0));
}

}  // namespace trellara::cli::apply
