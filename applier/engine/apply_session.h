// apply_session.h — the applier's target session: one long-lived connection per flow
// (DESIGN §6), set up once (pinned settings, session_replication_role, synchronous_commit, the
// flow's advisory lock, the state schema, the replication origin, the prepared statements), and
// every statement the applier runs against the trellara state tables: the evidence of a batch of
// commit LSNs, the apply status, quarantine records, the origin's flushed progress, the target's
// definition of a relation, the prepared-statement cache of planned changes, and what the flow
// knows of each source relation (trellara.relation_schemas, core ddl_apply.h "Drift").
//
// It decides nothing: core's DecideApply, CheckTargetRelation and BuildQuarantine decide; this
// file reads what they need and writes what they built. It never commits anything of a source
// transaction itself (the one-at-a-time path and the pipeline do, apply_transaction.cpp and
// apply_pipeline.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/apply_snapshot.h"
#include "kit/errors.h"
#include "pg/session.h"
#include "kit/config.h"
#include "pg/pg_connection.h"
#include "trellara/apply/apply_decision.h"
#include "trellara/apply/apply_plan.h"
#include "trellara/apply/apply_schema.h"
#include "trellara/log/barrier.h"
#include "trellara/apply/ddl_apply.h"
#include "trellara/capture/slot_sync.h"

namespace trellara::cli::apply {

using Clock = std::chrono::steady_clock;

// Thrown out of the apply loop to end the command; main() prints it.
[[noreturn]] inline void Fail(const std::string& message, int code = 1) { throw CommandFailed(message, code); }

// A failure that says nothing about the transaction (core IsTransientFailure: serialization
// failure, deadlock, lock or statement timeout, cancel, shutdown, lost connection, read-only
// target...). Thrown out of wherever it happens, caught by the apply loop (Applier::Run), which
// drops the session, backs off, reconnects and resumes from the consumer offset: never
// quarantined. Without a retry around it (main) it ends the command with exit 1 like Fail.
struct TransientFailure : CommandFailed {
  TransientFailure(const std::string& message, std::string sqlstate_, bool connection_lost_)
      : CommandFailed(message, 1), sqlstate(std::move(sqlstate_)), connection_lost(connection_lost_) {}
  std::string sqlstate;  // "" when the failure did not come from the server
  bool connection_lost;
};
[[noreturn]] inline void FailTransient(const std::string& message, const std::string& sqlstate, bool connection_lost) {
  throw TransientFailure(message, sqlstate, connection_lost);
}
// Throws TransientFailure when `result` failed transiently (or the connection is gone), naming
// `what`; returns otherwise, leaving every other failure to the caller.
void ThrowIfTransient(const PgResult& result, PgConnection& conn, const std::string& what);

// What the target has recorded about one transaction boundary.
struct Evidence {
  TargetEvidence target;
  uint32_t previous_attempts = 0;
  std::string quarantine_message;  // the stored operator message, when quarantined
};

// The figures trellara.apply_status shows for the flow.
struct StatusFigures {
  uint64_t consumer_offset = 0;
  uint64_t applied = 0;
  uint64_t skipped_duplicates = 0;
};

class ApplySession {
 public:
  explicit ApplySession(const FlowConfig& config);

  // Connects and sets the session up (see the file comment). Ends the command on failure. When
  // `reconnecting` (the apply loop lost its session), a failure to connect, the flow's advisory
  // lock or replication origin still held by the old backend, are transient (TransientFailure).
  void Connect(bool reconnecting = false);
  // Drops the connection and everything that belonged to it (prepared statements, checked
  // relations). The server rolls back an open transaction and the origin setup ends with it.
  void Disconnect();
  bool connected() const { return conn_ != nullptr; }

  PgConnection& conn() { return *conn_; }
  const std::string& origin_name() const { return origin_name_; }

  // `result`, or the end of the command naming `what`, the target and the error.
  PgResult Must(PgResult result, const std::string& what);

  // Parameters of the prepared trellara_commit_record: the dedup row and
  // pg_replication_origin_xact_setup(commit_lsn, commit_time) of `ready`.
  SqlParams CommitRecordParams(const ReadyTransaction& ready) const;
  // trellara_commit_records: the dedup rows of a grouped batch's members (in log order, at least one).
  SqlParams CommitRecordsParams(const std::vector<const ReadyTransaction*>& group) const;

  // Parameters of the prepared trellara_require_unapplied: the target's check, inside a grouped
  // batch formed on assumed evidence, that none of `members` has been seen (apply_pipeline.cpp).
  SqlParams RequireUnappliedParams(const std::vector<const ReadyTransaction*>& members) const;

  // Best effort: a status write never hides the error that ended the run.
  void WriteStatus(const std::string& state, const std::string& last_error, const StatusFigures& figures);

  // The target's evidence for each of `txs`, in one round trip.
  std::vector<Evidence> ReadEvidence(const std::vector<const TxIdentity*>& txs);
  Evidence ReadEvidence(const TxIdentity& tx) { return ReadEvidence(std::vector<const TxIdentity*>{&tx}).front(); }

  // The one way out of a failed target transaction, on every path (a statement failed, the COMMIT
  // itself failed, a batch of the pipeline failed, a plan or a chunk re-read failed): ROLLBACK if
  // the session is still inside the transaction block, then reset the session's replication-origin
  // state, before anything else runs on this connection. pg_replication_origin_xact_setup sets the
  // origin LSN for the session until it is reset: a failed transaction leaves it behind, and the
  // next transaction of the session (the quarantine record) would otherwise commit with it and
  // move origin progress past a transaction that was never applied. `what` names the transaction
  // for errors. Ends the command if the session cannot be brought back to a clean state.
  void EndFailedTransaction(const std::string& what);

  // The commit LSN up to which the target has flushed this flow's transactions: origin progress
  // read with flush = true (the server flushes WAL up to that progress first).
  uint64_t FlushedProgress();
  // The commit LSN of the flow's last dedup row in this database (0: none; core ContinuityFacts).
  uint64_t LastDedupLsn();
  // What the target says about the flow's source timelines (core DecideTimelineContinuity): the
  // latest recorded, and the dedup rows past `branch_lsn`.
  TargetTimelineFacts ReadTimelineFacts(uint64_t branch_lsn);
  // Records that the target now follows `timeline` (trellara.source_timelines).
  void RecordTimeline(const LogTimeline& timeline);

  // Whether the target can take changes of `relation` (core CheckTargetRelation), read from its
  // catalog the first time this session meets the relation's fingerprint. Only an accepted
  // definition is remembered, so a repaired target is re-read on the retry.
  std::optional<QuarantineCause> CheckRelation(const RelationInfo& relation);
  // Every relation a change writes to, checked (CheckRelation).
  std::optional<QuarantineCause> CheckRelationsOf(const Change& change, const std::vector<RelationInfo>& relations);
  // The target's definition of `relation` was checked and accepted in this session (CheckRelation
  // would send no query).
  bool RelationAccepted(const RelationInfo& relation) const {
    return accepted_relations_.contains(HexEncode(relation.fingerprint));
  }
  // Whether `relation` is partitioned on the target, as CheckRelation last read it (false when it
  // has not: ONLY, which fails closed on a partitioned table; core apply_plan.h PartitionedOnTarget).
  bool PartitionedOnTarget(const RelationInfo& relation) const {
    auto found = partitioned_.find(relation.oid);
    return found != partitioned_.end() && found->second;
  }
  // The same, as the planner takes it.
  trellara::PartitionedOnTarget Partitioned() const {
    return [this](const RelationInfo& relation) { return PartitionedOnTarget(relation); };
  }
  // Whether `column` of `relation` is GENERATED ALWAYS AS IDENTITY on the target, as CheckRelation
  // last read it (core apply_plan.h AlwaysIdentityOnTarget), as the planner takes it.
  trellara::AlwaysIdentityOnTarget AlwaysIdentity() const {
    return [this](const RelationInfo& relation, const std::string& column) {
      auto found = always_identity_.find(relation.oid);
      return found != always_identity_.end() && found->second.contains(column);
    };
  }

  // The target's definition of schema.name as it is now (inside the open transaction when there is
  // one): columns, primary key columns in key order and the key's constraint name; with
  // `with_rows` (a DDL's table: PlanDdl) also whether the table holds any row.
  TargetRelation ReadTargetRelation(const std::string& schema, const std::string& name, bool with_rows = false);
  // The target's definition changed (a DDL ran): every accepted fingerprint is checked again.
  void ForgetAcceptedRelations() { accepted_relations_.clear(); }

  // ---- what the flow knows of each source relation (trellara.relation_schemas) ----
  // Loaded by Connect. Inside an open apply transaction, RecordKnown / ForgetKnown write the row
  // and keep the change in a pending layer that Known reads first; CommitKnown merges it once the
  // COMMIT succeeded, DiscardKnown drops it on every other way out (a rolled-back transaction
  // leaves the cache as it was).
  std::optional<KnownRelation> Known(uint32_t oid) const;
  void RecordKnown(const RelationInfo& relation, const TxIdentity& tx);
  void ForgetKnown(uint32_t oid, const TxIdentity& tx);
  void CommitKnown();
  void DiscardKnown() { pending_known_.clear(); }

  // Inside the open apply transaction: a DDL `ddl_description` of `tx` changes schema.name while
  // its snapshot copy is not finished (docs/schema-changes.md "Snapshot"). Under the control lock
  // taken exclusive, with the control version bumped (every session reloads its registry), the
  // table's row becomes failed_recoverable with an error naming the DDL and the rerun command, and
  // leaves its run (run_id 'ddl@<commit LSN>', never a valid run id), so no copy that started
  // under the old schema can make it handoff_ready: only `trellara snapshot --table T --force`
  // copies it again, every chunk, under the new schema. Returns whether a table was withheld.
  bool WithholdSnapshotHandoff(const std::string& schema, const std::string& name, const TxIdentity& tx,
                               const std::string& ddl_description);

  // The prepared statement of `plan`, queued or run: its name, and whether it must be prepared.
  std::pair<std::string, bool> StatementFor(const ChangePlan& plan);
  // The statement of `statement_key` was not prepared after all (its Parse failed or was skipped).
  void ForgetStatement(const std::string& statement_key) { statements_.erase(statement_key); }

  // Writes the quarantine record built by core (BuildQuarantine) in its own transaction.
  void RecordQuarantine(const QuarantineRecord& q, const TxIdentity& tx);

  // ---- the snapshot registry and holds (docs/snapshot.md, apply_snapshot.h) ----
  // Replaces `registry` with the target's rows of this flow (control version, snapshot_tables,
  // snapshot_chunks, requested holds), read in one transaction holding the control lock shared, so
  // they are one consistent version. A requested hold the target is already beyond (origin
  // progress > its lsn) is marked `passed` in that transaction and not returned. Returns the
  // origin progress it compared with (the highest commit LSN the target holds).
  uint64_t LoadSnapshotRegistry(SnapshotRegistry& registry);
  static uint64_t SnapshotLsnOf(const std::string& text, const std::string& chunk, const std::string& table);
  // Parameters of the prepared trellara_control_check ($flow, $version): the first statement of
  // every applier transaction, both paths.
  SqlParams ControlCheckParams(uint64_t version) const {
    return {config_.flow_name, std::to_string(version)};
  }
  // The control version now (the idle applier polls it to learn of holds and registrations).
  uint64_t ReadControlVersion();
  // Inside the open applier transaction: the chunk row read FOR SHARE (waits for a copy of the
  // chunk in flight; the row stays locked until the transaction ends, so the copy waits for it).
  // Ends the command when the row is missing or malformed (the registry was edited by hand).
  ChunkView ReadChunkForShare(const SnapshotTable& table, int32_t chunk_no, uint64_t version);
  // Inside the open applier transaction: records that `tx` was left out of `chunk_no` (pending).
  void RecordSkip(const SnapshotTable& table, int32_t chunk_no, const TxIdentity& tx);
  // In its own transaction: the hold is `reached` (applied_lsn = origin progress) or `passed`.
  // False when the hold is no longer requested (the holder removed it or gave up).
  bool MarkHold(const std::string& hold_id, const char* state);
  // The hold lock, shared, at session level (docs/snapshot.md "Locks"): true once taken.
  bool TryHoldLock();
  void ReleaseHoldLock();
  // Whether `hold_id`'s row is still in trellara.apply_holds (its holder deletes it after letting go
  // of the hold lock).
  bool HoldRowExists(const std::string& hold_id);

 private:
  void LoadKnownRelations();  // Connect: the flow's rows of trellara.relation_schemas

  const FlowConfig& config_;
  std::string origin_name_;
  std::unique_ptr<PgConnection> conn_;
  std::unordered_map<std::string, std::string> statements_;  // statement_key -> prepared name
  std::unordered_set<std::string> accepted_relations_;       // fingerprints the target can take
  std::unordered_map<uint32_t, bool> partitioned_;            // source relation oid -> relkind 'p' on the target
  std::unordered_map<uint32_t, std::set<std::string>> always_identity_;  // oid -> GENERATED ALWAYS identity columns
  uint64_t statement_serial_ = 0;  // names prepared statements; never reused
  std::unordered_map<uint32_t, KnownRelation> known_;  // committed rows of trellara.relation_schemas
  // The open transaction's changes to known_: nullopt = forgotten (DROP TABLE).
  std::unordered_map<uint32_t, std::optional<KnownRelation>> pending_known_;
};

}  // namespace trellara::cli::apply
