// apply_retry.cpp — see apply_retry.h. The transient table, the backoff and the continuity rule.
#include "trellara/apply/apply_retry.h"

#include <algorithm>
#include <array>

#include "trellara/record/envelope.h"

namespace trellara {
namespace {

// The one table of transient SQLSTATEs. A failure here says nothing about the transaction: the
// same statements succeed once the target can take them again.
constexpr std::array<TransientSqlstate, 10> kTransient{{
    {"40001", "serialization_failure"},
    {"40P01", "deadlock_detected"},
    {"55P03", "lock_not_available"},         // lock_timeout, NOWAIT
    {"57014", "query_canceled"},             // statement_timeout, pg_cancel_backend
    {"57P01", "admin_shutdown"},             // fast/immediate shutdown, pg_terminate_backend
    {"57P02", "crash_shutdown"},             // another backend crashed
    {"57P03", "cannot_connect_now"},         // the server is starting up or in recovery
    {"53300", "too_many_connections"},
    {"25006", "read_only_sql_transaction"},  // a standby, or a primary being failed over
    {"08", "connection_exception"},          // the whole class
}};
// Deliberately not transient: 58030 io_error and 53100 disk_full (retrying forever would hide a
// broken or full disk behind a "retrying" state; they quarantine and halt, loudly), 53200
// out_of_memory, and every data or schema error.

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::span<const TransientSqlstate> TransientSqlstates() { return kTransient; }

std::string_view TransientName(std::string_view sqlstate) {
  if (sqlstate.empty()) return "connection_failure";
  for (const auto& row : kTransient) {
    if (row.code.size() == 5 && row.code == sqlstate) return row.name;
    if (row.code.size() == 2 && sqlstate.size() == 5 && sqlstate.substr(0, 2) == row.code) return row.name;
  }
  return "";
}

bool IsTransientFailure(std::string_view sqlstate, bool connection_lost) {
  return connection_lost || !TransientName(sqlstate).empty();
}

uint64_t RetryBackoff::NextRandom() { return SplitMix64(state_); }

uint64_t RetryBackoff::NextDelayMs() {
  attempt_++;
  uint64_t base = std::max<uint64_t>(policy_.initial_ms, 1);
  for (uint32_t i = 1; i < attempt_ && base < policy_.cap_ms; i++) base *= 2;
  base = std::min(base, policy_.cap_ms);
  const uint64_t half = base / 2;
  return half + NextRandom() % (base - half + 1);
}

uint64_t ProvenProgress(const ContinuityFacts& f) {
  return f.last_dedup_lsn ? std::min(f.origin_progress_lsn, *f.last_dedup_lsn) : f.origin_progress_lsn;
}

ContinuityDecision DecideContinuity(const ContinuityFacts& f) {
  ContinuityDecision d;
  const uint64_t proven = ProvenProgress(f);
  if (!f.claimed_lsn || *f.claimed_lsn <= proven) return d;  // Continue
  const std::string progress = proven ? FormatLsn(proven) : std::string("none");
  const bool evidence_behind = proven < f.origin_progress_lsn;
  const std::string gap =
      (evidence_behind
           ? "the target database's last dedup row of flow " + f.flow + " is at " + progress +
                 " while the server's replication origin trellara_" + f.flow + " is at " +
                 FormatLsn(f.origin_progress_lsn) +
                 " (origins belong to the server, not the database: a database restored from a dump, or another "
                 "database of the same flow), and"
           : "the target's replication origin trellara_" + f.flow + " is at " + progress + " but") +
      " the consumer offset " + std::to_string(f.consumer_offset) + " claims every transaction up to commit " +
      FormatLsn(*f.claimed_lsn) + " is applied";
  const bool log_holds_gap = f.log_first_offset == 0 || (f.log_first_lsn && *f.log_first_lsn <= proven);
  if (log_holds_gap && f.first_offset_after_progress && *f.first_offset_after_progress < f.consumer_offset) {
    d.action = ContinuityAction::Rewind;
    d.rewind_to_offset = *f.first_offset_after_progress;
    d.message = "apply flow=" + f.flow + " event=rewind origin_progress=" + progress +
                " consumer_offset=" + std::to_string(f.consumer_offset) + " claimed_commit_lsn=" +
                FormatLsn(*f.claimed_lsn) + " rewind_to_offset=" + std::to_string(d.rewind_to_offset) +
                (evidence_behind
                     ? " server_origin_progress=" + FormatLsn(f.origin_progress_lsn) +
                           " reason=\"the database's dedup rows end before the server's origin progress (restored from "
                           "a dump, or another database of the flow); the transactions between are quarantined as "
                           "missing_dedup_evidence unless this database's origin is set back\""
                     : std::string(" reason=\"target behind its consumer offset (restored from a backup or failed over "
                                   "to a lagging standby); the log still holds the gap, the dedup rows make "
                                   "re-reading safe\""));
    return d;
  }
  d.action = ContinuityAction::Refuse;
  d.message = "flow " + f.flow + " cannot continue: " + gap + ", and the log no longer holds the transactions in " +
              "between (the first offset it holds is " + std::to_string(f.log_first_offset) +
              (f.log_first_lsn ? ", its first transaction commits at " + FormatLsn(*f.log_first_lsn) : std::string()) +
              "); the target lost transactions that cannot be replayed (restored from a backup or failed over to a "
              "lagging standby). Nothing was applied. Reseed: copy the flow's tables to the target again from a "
              "consistent source snapshot and start the flow afresh, or restore "
              "a target backup whose origin progress is at or past commit " +
              (f.log_first_lsn ? FormatLsn(*f.log_first_lsn) : std::string("the log's first transaction"));
  return d;
}

}  // namespace trellara
