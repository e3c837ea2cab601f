// soak_lag.cpp — the end-to-end lag `trellara soak` measures: each committed transaction from
// the moment COMMIT returned on the source until it is seen applied on the target (LagTracker,
// polled every 10 ms on its own target session).
//
// Applied position: a transaction's commit record lies between pg_current_wal_insert_lsn() read
// inside it before COMMIT (lower) and after COMMIT returned (upper). It is applied once the
// target's replication-origin progress (what `trellara status` reports as applied_commit_lsn) is
// at or past the upper bound, or is at or past the lower bound and trellara.applied_transactions
// holds its xid in [lower, upper] (the row commits with the data and the origin progress).
//
// It only reads the target, and never counts a transaction applied on the origin's progress alone
// while that progress lies inside the transaction's bounds: the dedup row decides.
#include "soak_command_internal.h"

namespace trellara::cli::soak_detail {

LagTracker::LagTracker(const FlowConfig& config) : config_(config) {
  target_ = ConnectPinned(config, config.target_conninfo, "target", "trellara-soak-lag/" + config.flow_name);
  origin_ = "trellara_" + config.flow_name;
  thread_ = std::thread([this] { Loop(); });
}

std::string LagTracker::FirstPending() {
  std::lock_guard lock(mu_);
  if (pending_.empty()) return "";
  const auto& t = pending_.front();
  return t.what + " (source xid " + t.xid + ", commit between " + FormatLsn(t.lower_lsn) + " and " +
         FormatLsn(t.upper_lsn) + "); target applied position " +
         (applied_lsn_ ? FormatLsn(*applied_lsn_) : std::string("none (no replication origin " + origin_ + ")")) +
         (last_error_.empty() ? std::string() : "; last error reading the target: " + last_error_);
}

void LagTracker::Loop() {
  while (!stop_) {
    const auto started = Clock::now();
    Poll();
    std::this_thread::sleep_until(started + kLagPollInterval);
  }
}

void LagTracker::Poll() {
  auto r = target_->ExecParams("SELECT CASE WHEN pg_catalog.pg_replication_origin_oid($1) IS NOT NULL THEN "
                               "pg_catalog.pg_replication_origin_progress($1, false) END::text",
                               {origin_});
  const auto seen_at = Clock::now();
  std::unique_lock lock(mu_);
  if (!r.ok()) {
    last_error_ = r.Describe();
    return;
  }
  if (!r.Value(0, 0)) return;
  auto progress = ParseLsn(*r.Value(0, 0));
  if (!progress) return;
  applied_lsn_ = *progress;
  while (!pending_.empty() && *progress >= pending_.front().lower_lsn) {
    CommittedTransaction head = pending_.front();
    if (*progress < head.upper_lsn) {
      // The origin is inside this transaction's bounds: only its dedup row says whether it is ours.
      lock.unlock();
      auto row = target_->ExecParams("SELECT 1 FROM trellara.applied_transactions WHERE flow = $1 AND "
                                     "commit_lsn BETWEEN $2::pg_lsn AND $3::pg_lsn AND xid IN ($4::bigint, $5::bigint)",
                                     {config_.flow_name, FormatLsn(head.lower_lsn), FormatLsn(head.upper_lsn),
                                      head.xid, head.xid32});
      lock.lock();
      if (!row.ok()) {
        last_error_ = row.Describe();
        return;
      }
      if (row.rows() == 0) return;
    }
    lag_ms_.push_back(std::chrono::duration<double, std::milli>(seen_at - head.committed_at).count());
    pending_.pop_front();
  }
}

}  // namespace trellara::cli::soak_detail
