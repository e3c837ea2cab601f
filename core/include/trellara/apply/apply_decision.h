// apply_decision.h — the applier's exactly-once decisions, as pure functions of what the log holds
// and what the target has recorded (DESIGN §2 "log -> target" and "target divergence", §6).
//
//   DecideApply      for one verified source transaction: Apply, SkipDuplicate (the same
//                    transaction was already committed), QuarantineConflict (the target recorded a
//                    different transaction at that boundary, or evidence is missing), or
//                    WaitReplayReady (the transaction is quarantined and the operator has not yet
//                    marked it replay-ready).
//   BuildQuarantine  the quarantine record and its operator-facing message.
//   DecideReplayReady whether `quarantine_replay_ready(xid, commit_lsn)` may mark a boundary:
//                    only an exactly matching quarantined (flow, xid, commit_lsn).
//   CheckpointAfter  the checkpoint never moves backwards.
//
// The dedup row for (flow, commit_lsn) is the authority; the checkpoint (replication origin
// progress) is a consequence committed in the same target transaction. Nothing here talks to the
// target: the libpq adapter reads the evidence, calls these functions, and executes the answer.
// These functions never advance a checkpoint or write a dedup row for a transaction that is not
// applied, and never treat "different checksum" as "duplicate".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/record/envelope.h"
#include "trellara/base/result.h"

namespace trellara {

// The dedup row the target holds for (flow, commit_lsn), if any (trellara.applied_transactions).
struct DedupRow {
  uint64_t origin_sysid = 0;
  uint32_t xid = 0;
  Sha256 checksum{};
};

enum class QuarantineState : uint8_t { Quarantined, ReplayReady, Resolved };
const char* QuarantineStateName(QuarantineState state);  // "quarantined", "replay_ready", "resolved"

// What the target knows about one transaction boundary, read by the applier before applying it.
struct TargetEvidence {
  std::optional<DedupRow> dedup;            // row for (flow, commit_lsn)
  uint64_t checkpoint_lsn = 0;              // origin progress (remote_lsn) of this flow; 0 = none
  // Dedup rows below this LSN were deleted deliberately (retention), so their absence is not
  // evidence of anything. 0 = never pruned (the default: rows are kept).
  uint64_t dedup_pruned_below_lsn = 0;
  std::optional<QuarantineState> quarantine;  // quarantine row for (flow, xid, commit_lsn), if any
};

enum class QuarantineReason : uint8_t {
  ZeroRowsMatched,      // UPDATE/DELETE matched 0 rows
  ManyRowsMatched,      // UPDATE/DELETE by key matched more than one row (target lacks the key's uniqueness)
  DuplicateKey,         // INSERT hit an existing key (SQLSTATE 23505)
  MissingTable,         // 42P01
  MissingColumn,        // 42703
  SchemaMismatch,       // the target cannot accept the relation's schema fingerprint
  SqlError,             // any other SQL error
  ChecksumConflict,     // same boundary, different checksum (or xid / origin)
  MissingDedupEvidence, // commit LSN at or below the checkpoint without a dedup row
  PlanError,            // the planner cannot express a change (no identity, type without equality)
  BarrierFailure,       // the log holds no complete verified copy of the transaction
  SnapshotPartialUpdate,  // only the new row of a key-moving UPDATE applies under the snapshot handoff,
                          // and it carries an unchanged TOASTed value the stream did not send
  DdlUnsupported,   // a captured DDL the applier cannot reproduce exactly on the target (ddl_apply.h)
  DdlPolicyHalt,    // a captured DDL under [apply] ddl = "halt"
  SchemaDrift,      // a relation's fingerprint changed with no DDL record that explains it
};
inline constexpr QuarantineReason kLastQuarantineReason = QuarantineReason::SchemaDrift;
const char* QuarantineReasonName(QuarantineReason reason);  // snake_case, stored in the table

// What went wrong, as the applier observed it. Fields not relevant to the reason stay empty.
struct QuarantineCause {
  QuarantineReason reason = QuarantineReason::SqlError;
  std::string operation;   // "UPDATE", "DELETE", "INSERT", "TRUNCATE" (row-level reasons)
  std::string relation;    // "public.orders"
  std::string match;       // "(id)=(42)"
  std::string column;      // MissingColumn
  std::string sqlstate;    // five characters, when a statement failed
  std::string detail;      // server message, plan error, barrier reason, conflicting checksum...
  uint64_t rows = 0;       // ManyRowsMatched: how many
  bool match_is_key = true;  // false: `match` is a whole old row (REPLICA IDENTITY FULL)
};

// A statement of a transaction failed on the target: what kind of failure it is, from the
// server's SQLSTATE and message. The row-count check of a planned statement (RowCheckedSql) raises
// TR001 for no matching row and TR002 with the count in DETAIL for more than one.
// `plan_relation`/`plan_match` describe the planned statement (empty when the failure was not in a
// planned change). Nothing is guessed: an unknown SQLSTATE is SqlError with the server's words.
QuarantineCause CauseFromStatementError(const std::string& sqlstate, const std::string& message,
                                        const std::string& detail);

enum class ApplyAction : uint8_t { Apply, SkipDuplicate, QuarantineConflict, WaitReplayReady };
const char* ApplyActionName(ApplyAction action);

struct ApplyDecision {
  ApplyAction action = ApplyAction::Apply;
  std::string reason;     // in words, for logs; empty for a plain Apply
  QuarantineCause cause;  // QuarantineConflict: what to pass to BuildQuarantine
};

// `tx` and `checksum` are the transaction as the barrier verified it (ReadyTransaction).
ApplyDecision DecideApply(const TxIdentity& tx, const Sha256& checksum, const TargetEvidence& target);

// The checkpoint after committing `commit_lsn`: it never moves backwards (a transaction replayed
// below the checkpoint by operator decision leaves it where it is), as origin progress does.
uint64_t CheckpointAfter(uint64_t checkpoint_lsn, uint64_t commit_lsn);

// ---- quarantine --------------------------------------------------------------------------

struct QuarantineRecord {
  std::string flow;
  uint64_t origin_sysid = 0;
  uint32_t xid = 0;
  uint64_t commit_lsn = 0;
  QuarantineReason reason = QuarantineReason::SqlError;
  std::string sqlstate;
  std::string detail;
  Sha256 checksum{};
  uint32_t attempts = 1;
  QuarantineState state = QuarantineState::Quarantined;
  std::string message;    // the whole operator-facing sentence
  std::string next_step;  // the safe next action alone (for `status`)
};

// `previous_attempts`: attempts recorded by an earlier quarantine of the same boundary (0 if none).
QuarantineRecord BuildQuarantine(const TxIdentity& tx, const Sha256& checksum, const QuarantineCause& cause,
                                 uint32_t previous_attempts);

// SELECT trellara.quarantine_replay_ready(7421, '0/3A1F2B0')
std::string ReplayReadyCall(uint32_t xid, uint64_t commit_lsn);

// ---- consumer offset ----------------------------------------------------------------------

// Which consumer offset the applier may record, given what the target has made durable
// (DESIGN §2 "log -> target", §6 throughput: with synchronous_commit = off a COMMIT returns before
// its WAL is flushed, so the offset may only pass transactions whose commit the target reports as
// flushed, through pg_replication_origin_progress(origin, true)).
//
// The applier reports, in log order, every offset it has finished with: Done(offset, lsn) means
// "every record below `offset` is applied, skipped as a duplicate, or carries nothing to apply, and
// all of it is durable on the target once origin progress >= lsn" (lsn 0: nothing to wait for).
// Durable(flushed_lsn) returns the largest offset whose requirement is met. It never moves back.
class ApplyOffsetTracker {
 public:
  explicit ApplyOffsetTracker(uint64_t start_offset) : safe_(start_offset) {}
  void Done(uint64_t offset, uint64_t required_lsn);
  uint64_t Durable(uint64_t flushed_lsn);
  uint64_t safe() const { return safe_; }
  // Offsets reported but waiting for the target to flush.
  size_t waiting() const { return pending_.size(); }

 private:
  struct Mark {
    uint64_t offset;
    uint64_t required_lsn;
  };
  std::vector<Mark> pending_;  // increasing offsets and required LSNs
  size_t head_ = 0;
  uint64_t safe_;
  uint64_t max_required_ = 0;
};

// ---- replay-ready ------------------------------------------------------------------------

struct QuarantineEntry {  // one row of trellara.quarantine for the flow
  uint32_t xid = 0;
  uint64_t commit_lsn = 0;
  QuarantineState state = QuarantineState::Quarantined;
  QuarantineReason reason = QuarantineReason::SqlError;
};

enum class ReplayReadyOutcome : uint8_t { Mark, AlreadyReplayReady, Refuse };
struct ReplayReadyDecision {
  ReplayReadyOutcome outcome = ReplayReadyOutcome::Refuse;
  std::string message;  // why, in words; names the boundary and, on refusal, what to do
};

// Replay-ready is granted only for an exactly matching (xid, commit_lsn) in state quarantined.
// A boundary already replay_ready is reported as such (idempotent, nothing changes). Anything else
// is refused: unknown boundary, xid not matching the quarantined commit LSN (or the reverse), or a
// resolved entry. (Marking a checksum conflict replay-ready is allowed but does not override it:
// DecideApply quarantines it again while the conflicting dedup row is still there.)
ReplayReadyDecision DecideReplayReady(const std::string& flow, const std::vector<QuarantineEntry>& quarantine,
                                      uint32_t xid, uint64_t commit_lsn);

}  // namespace trellara
