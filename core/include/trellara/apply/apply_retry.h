// apply_retry.h — which target failures the applier retries instead of quarantining, how long it
// waits between attempts, and where it resumes when the target is behind its consumer offset
// (DESIGN §2 rows "transient target errors" and "continuity").
//
// Pure decisions, no Postgres and no clock: the applier (applier/engine/applier.cpp) classifies
// every failed statement with IsTransientFailure, waits RetryBackoff::Next() between attempts and
// asks DecideContinuity once per (re)connection. A transient failure is never quarantined: the
// transaction did nothing wrong, the target was momentarily unable to take it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace trellara {

// One row of the transient table: a SQLSTATE (5 characters) or a class ("08"), and its name.
struct TransientSqlstate {
  std::string_view code;  // 5 characters, or 2 for a whole class
  std::string_view name;
};

// The table itself (one definition; docs/apply.md lists it). Everything not listed is not
// transient: it is the transaction's own failure and is quarantined.
std::span<const TransientSqlstate> TransientSqlstates();

// Whether a failure is transient. `sqlstate` is the server's SQLSTATE ("" when the failure did
// not come from the server, e.g. a connection that broke); `connection_lost` says the session is
// gone. A lost connection is always transient, whatever the SQLSTATE.
bool IsTransientFailure(std::string_view sqlstate, bool connection_lost);
// The name of a transient SQLSTATE ("deadlock_detected"), "connection_failure" for "" and class
// 08, or "" when it is not transient.
std::string_view TransientName(std::string_view sqlstate);

// Capped exponential backoff with jitter: attempt n (1-based) waits a uniformly drawn time in
// [base/2, base] where base = min(cap, initial * 2^(n-1)). The jitter comes from a seeded
// generator (splitmix64), so a seed reproduces the waits. Reset() after progress.
struct BackoffPolicy {
  uint64_t initial_ms = 200;
  uint64_t cap_ms = 30000;  // 30 s: no wait is longer
};

class RetryBackoff {
 public:
  RetryBackoff(BackoffPolicy policy, uint64_t seed) : policy_(policy), state_(seed) {}
  // The wait before the next attempt; counts the attempt.
  uint64_t NextDelayMs();
  // Attempts counted since the last Reset (the one NextDelayMs just counted included).
  uint32_t attempt() const { return attempt_; }
  void Reset() { attempt_ = 0; }

 private:
  uint64_t NextRandom();
  BackoffPolicy policy_;
  uint64_t state_;
  uint32_t attempt_ = 0;
};

// ---- continuity: the target's origin progress against the consumer offset ----------------

// What the applier knows when it (re)connects.
struct ContinuityFacts {
  std::string flow;
  uint64_t origin_progress_lsn = 0;  // pg_replication_origin_progress(origin, true); 0 = none
  // The commit LSN of the flow's last dedup row in this database (0 = none). It commits with the
  // origin progress, so the two are equal — unless the database was restored from a dump (or
  // copied) on a server whose origin, which belongs to the server and not to the database, moved
  // on: then this database holds less than the origin claims, and this is what it holds.
  // nullopt: not read (then the origin progress alone is what the target holds).
  std::optional<uint64_t> last_dedup_lsn;
  uint64_t consumer_offset = 0;      // consumers/applier: everything below is claimed applied
  // Commit LSN of the last transaction (envelope or commit marker) below the consumer offset, as
  // far as the log still holds one; nullopt when none is left below it (nothing to compare).
  std::optional<uint64_t> claimed_lsn;
  uint64_t log_first_offset = 0;  // the first offset the log still holds (0: nothing reclaimed)
  // The commit LSN of the first transaction record the log still holds (nullopt: none).
  std::optional<uint64_t> log_first_lsn;
  // The first offset of the first transaction whose commit LSN is above the origin progress
  // (its first chunk for a chunked one), when the log holds one below the consumer offset.
  std::optional<uint64_t> first_offset_after_progress;
};

enum class ContinuityAction { Continue, Rewind, Refuse };

struct ContinuityDecision {
  ContinuityAction action = ContinuityAction::Continue;
  uint64_t rewind_to_offset = 0;  // Rewind: where the reader resumes
  std::string message;            // Rewind: the structured line; Refuse: the error with the remedy
};

// Continue when the target holds everything the consumer offset claims (origin progress at or past
// the claimed LSN, or nothing to compare). Otherwise the target is behind (restored from a
// backup, failed over to a lagging standby): Rewind to the first transaction above the origin
// progress when the log still holds every transaction after it — nothing was reclaimed
// (log_first_offset == 0) or the first retained transaction is at or below the progress — since
// dedup rows make re-reading safe; else Refuse, naming the gap and the remedy (reseed).
// What the target holds is min(origin progress, last dedup row): a database whose dedup rows end
// below the server's origin progress is behind like a restored backup (rewound, and the
// transactions between are met by DecideApply's missing_dedup_evidence rule: fail closed).
ContinuityDecision DecideContinuity(const ContinuityFacts& facts);
// min(origin progress, last dedup row): the progress this database proves.
uint64_t ProvenProgress(const ContinuityFacts& facts);

}  // namespace trellara
