// apply_transaction.cpp — the applier's one-at-a-time path: one verified source transaction,
// decided by core (DecideApply), applied in its own BEGIN .. COMMIT with its dedup row and origin
// progress, or rolled back and quarantined (BuildQuarantine) in its own transaction, halting there.
//
// Chunked transactions, transactions being replayed after a quarantine, transactions a batch
// failed on, and transactions holding DDL or naming a relation the flow sees for the first time or
// with another fingerprint always take this path. It never commits anything of a transaction that
// failed.
//
// Schema changes (docs/schema-changes.md, core ddl_apply.h), in the source transaction's order:
// every change naming relations is first checked against what the flow knows of them
// (trellara.relation_schemas): first sight -> the target catalog check, then the row is recorded in
// the same target transaction; drift -> schema_drift, before anything of the transaction commits.
// A Ddl change is planned by core PlanDdl against the target's definition read inside the
// transaction, and its statements run there; the relation's row moves with it. The session's
// cache of known relations moves only once the COMMIT succeeded.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>
#include <unordered_map>

#include "trellara/base/cadence.h"
#include "engine/applier.h"
#include "trellara/apply/ddl_apply.h"
#include "trellara/apply/relation_drift.h"
#include "trellara/base/fault.h"

namespace trellara::cli::apply {
namespace {
constexpr auto kReplayReadyPollInterval = cadence::kReplayReadyPoll;

std::string Quoted(std::string text) {
  for (auto& c : text)
    if (c == '"' || c == '\n') c = '\'';
  return "\"" + text + "\"";
}
}  // namespace

// A statement's failure as a quarantine cause, with what the plan knows about the change.
QuarantineCause Applier::CauseOf(const PgResult& result, const ChangePlan& plan) {
  QuarantineCause cause = CauseFromStatementError(result.sqlstate(), result.message(), result.detail());
  cause.operation = PlanKindName(plan.kind);
  cause.relation = plan.relation_display;
  cause.match = plan.match_description;
  cause.match_is_key = plan.match != MatchMode::FullRow;
  if (cause.reason == QuarantineReason::DuplicateKey && cause.match.empty()) cause.match = result.detail();
  return cause;
}

// Core's DecideApply. Negative control (tests only,
// TRELLARA_FAULTS=defect.apply_ignore_dedup:1:defect): a duplicate is applied again, which the
// re-read tests must catch.
ApplyDecision Applier::Decide(const ReadyTransaction& ready, const TargetEvidence& target) {
  ApplyDecision decision = DecideApply(ready.tx, ready.checksum, target);
  if (decision.action == ApplyAction::SkipDuplicate &&
      fault::Hit("defect.apply_ignore_dedup") == fault::Action::Defect)
    decision = ApplyDecision{};
  return decision;
}

// ---- one transaction -----------------------------------------------------------------

// Runs one captured change inside the open transaction. Returns the cause when the target
// refused it; a lost connection ends the command (nothing of the transaction committed). A change
// of a table under snapshot goes through the handoff rule first (apply_snapshot.cpp), which may
// read chunk states FOR SHARE, record skips, and replace the change by what applies of it.
std::optional<QuarantineCause> Applier::ExecuteChange(const Change& change, const std::vector<RelationInfo>& relations,
                                             const TxIdentity& tx) {
  if (change.op == Op::Ddl) return ExecuteDdl(change, relations, tx);
  if (auto cause = CheckDrift(change, relations, tx)) return cause;
  if (UnderSnapshot(change, relations, tx.commit_lsn)) {
    // The target's catalog first: the rewrite's plans name each table as the target stores it.
    if (auto cause = session_.CheckRelationsOf(change, relations)) return cause;
    SnapshotRewrite rewrite = RewriteForSnapshot(change, relations, tx, /*in_transaction=*/true);
    if (rewrite.cause) return rewrite.cause;
    for (const auto& [table, chunk_no] : rewrite.skips) {
      session_.RecordSkip(*table, chunk_no, tx);
      counters_.snapshot_skips++;
    }
    counters_.snapshot_in_copy += rewrite.left_out;
    if (rewrite.plans.empty()) return std::nullopt;
    for (const ChangePlan& plan : rewrite.plans)
      if (auto cause = ExecutePlan(plan, tx)) return cause;
    return std::nullopt;
  }
  // Whether the target's catalog was read for every relation the change names: the plan names a
  // table with ONLY unless the target partitions it (apply_plan.h PartitionedOnTarget).
  bool target_read = true;
  for (uint32_t oid : NamedRelations(change))
    if (const RelationInfo* relation = RelationOf(relations, oid))
      target_read = target_read && session_.RelationAccepted(*relation);
  const auto plan_error = [&](const Error& error) {
    QuarantineCause cause;
    cause.reason = QuarantineReason::PlanError;
    cause.operation = OpName(change.op);
    cause.detail = error.message;
    return cause;
  };
  auto plan = PlanChange(change, relations, session_.Partitioned(), session_.AlwaysIdentity());
  if (!plan) return plan_error(plan.error());
  if (plan->kind == PlanKind::NotApplied) {
    counters_.not_applied_changes++;
    return std::nullopt;
  }
  if (auto cause = session_.CheckRelationsOf(change, relations)) return cause;
  if (!target_read)  // now it was
    plan = PlanChange(change, relations, session_.Partitioned(), session_.AlwaysIdentity());
  if (!plan) return plan_error(plan.error());
  return ExecutePlan(*plan, tx);
}

// Drift (core DriftOfChange): every relation the change names against what the flow knows of it,
// as moved by the earlier changes of this transaction. A relation seen for the first time passes
// the target catalog check (CheckRelation) and is recorded in this transaction.
std::optional<QuarantineCause> Applier::CheckDrift(const Change& change, const std::vector<RelationInfo>& relations,
                                                   const TxIdentity& tx) {
  ChangeDrift drift = DriftOfChange(change, relations, FlowKnows(), replay_ready_);
  if (drift.cause) return drift.cause;
  for (const RelationInfo* relation : drift.first_sights) {
    if (auto cause = session_.CheckRelation(*relation)) {
      cause->operation = OpName(change.op);
      return cause;
    }
    session_.RecordKnown(*relation, tx);
  }
  return std::nullopt;
}

// What the flow knows of a relation, as this transaction has moved it so far (the session's
// cache of trellara.relation_schemas).
KnownLookup Applier::FlowKnows() {
  return [this](uint32_t oid) { return session_.Known(oid); };
}

std::optional<QuarantineCause> Applier::CreateAhead(const Change& change, std::optional<QuarantineCause> failure,
                                                   const Change* create,
                                                   const std::vector<RelationInfo>& create_relations,
                                                   const TxIdentity& tx,
                                                   const std::function<std::optional<QuarantineCause>()>& retry) {
  const bool row_change = change.op == Op::Insert || change.op == Op::Update || change.op == Op::Delete;
  if (!failure || failure->reason != QuarantineReason::MissingTable || !row_change || create == nullptr ||
      attempt_created_ahead_.contains(change.relation_oid))
    return failure;
  if (auto cause = ExecuteChange(*create, create_relations, tx)) return cause;
  attempt_created_ahead_.insert(change.relation_oid);
  return retry();
}

// One captured DDL change inside the open transaction (core PlanDdl decides; docs/schema-changes.md).
std::optional<QuarantineCause> Applier::ExecuteDdl(const Change& change, const std::vector<RelationInfo>& relations,
                                                   const TxIdentity& tx) {
  // Negative control (tests only, TRELLARA_FAULTS=defect.ddl_record_dropped:N:defect): the DDL
  // change is ignored as if it were not in the log, which the migration test must catch.
  if (fault::Hit("defect.ddl_record_dropped") == fault::Action::Defect) return std::nullopt;
  if (attempt_created_ahead_.contains(change.relation_oid) && CreatesRelation(change, change.relation_oid)) {
    attempt_ddl_notes_.push_back(DescribeDdl(change.ddl) + ": run before the rows it wrote (they precede it in the log)");
    return std::nullopt;  // CreateAhead ran it before the table's first row
  }
  const Ddl& ddl = change.ddl;
  const std::string description = DescribeDdl(ddl);
  const RelationInfo* captured = nullptr;
  if (change.relation_oid != 0) {
    captured = RelationOf(relations, change.relation_oid);
    if (captured == nullptr) {
      QuarantineCause cause;
      cause.reason = QuarantineReason::PlanError;
      cause.operation = "DDL";
      cause.relation = ddl.relation_schema + "." + ddl.relation_name;
      cause.detail = description + ": the DDL change names relation oid " + std::to_string(change.relation_oid) +
                     " which the record does not describe";
      return cause;
    }
  }
  // Core decides the policy on replay, whether the shape moved and what that does to the relation's
  // snapshot (ddl_apply.h); this adapter reads the facts and carries the answer out.
  const DdlPolicy policy = PolicyOnReplay(config_.ddl, replay_ready_);
  const TargetRelation target = session_.ReadTargetRelation(ddl.relation_schema, ddl.relation_name, /*with_rows=*/true);
  const DdlPlan plan = PlanDdl(ddl, captured, target, policy, config_.ddl_drop_table, replay_ready_);
  if (plan.action == DdlAction::Quarantine) return plan.cause;

  const bool shape_changed = DdlChangesShape(plan, captured, session_.Known(ddl.relation_oid));
  SnapshotTable* copied = shape_changed ? registry_.Find(ddl.relation_schema, ddl.relation_name) : nullptr;
  const DdlSnapshotStep step = DecideDdlBesideSnapshot(
      {shape_changed, copied != nullptr, copied != nullptr && copied->RetiredAt(tx.commit_lsn)});
  if (step == DdlSnapshotStep::WithholdOrCheck) {
    const std::string display = ddl.relation_schema + "." + ddl.relation_name;
    // A copy not finished is copied again under the new definition (apply_session.h
    // WithholdSnapshotHandoff); the handoff rule keeps applying to it meanwhile.
    const bool withheld = session_.WithholdSnapshotHandoff(ddl.relation_schema, ddl.relation_name, tx, description);
    if (withheld) {
      attempt_registry_changed_ = true;
      attempt_ddl_notes_.push_back("the snapshot of " + display + " was not finished: it is failed_recoverable "
                                   "until trellara snapshot --table " + display + " --force copies it again");
    }
    if (CheckFinishedChunksAfterWithhold(withheld, replay_ready_)) {
      // Each chunk read FOR SHARE inside this transaction (a chunk copied since the registry was
      // loaded is not cached).
      std::vector<std::pair<int32_t, ChunkView>> chunks;
      for (const ChunkRange& range : copied->ranges)
        chunks.emplace_back(range.chunk_no, session_.ReadChunkForShare(*copied, range.chunk_no, registry_.version()));
      if (auto cause = FinishedCopySawDdl(chunks, tx.xid, tx.commit_lsn, display, description, config_.path))
        return cause;
    }
  }
  for (const std::string& statement : plan.statements) {
    PgResult result = conn_->Exec(statement);
    counters_.statements++;
    if (result.ok()) continue;
    ThrowIfTransient(result, *conn_, "applying " + description + " of " + DescribeTransaction(tx));
    QuarantineCause cause = CauseFromStatementError(result.sqlstate(), result.message(), result.detail());
    cause.operation = "DDL";
    cause.relation = ddl.relation_schema + "." + ddl.relation_name;
    cause.detail = description + ": the target refused " + statement + ": " + result.message() +
                   (result.detail().empty() ? std::string() : " (" + result.detail() + ")");
    return cause;
  }
  // Fault point (tests): the DDL's statements ran in the open target transaction, COMMIT not sent.
  if (!plan.statements.empty()) fault::Hit("apply.after_ddl_statement");
  if (plan.forget_relation)
    session_.ForgetKnown(ddl.relation_oid, tx);
  else if (captured != nullptr)
    session_.RecordKnown(*captured, tx);
  if (!plan.statements.empty()) session_.ForgetAcceptedRelations();  // the target's definition moved
  if (plan.action == DdlAction::Execute)
    attempt_ddl_applied_++;
  else
    attempt_ddl_no_target_change_++;
  for (const std::string& note : plan.notes) attempt_ddl_notes_.push_back(description + ": " + note);
  return std::nullopt;
}

// Runs one planned statement inside the open transaction.
std::optional<QuarantineCause> Applier::ExecutePlan(const ChangePlan& plan, const TxIdentity& tx) {
  // The row count is checked by the target itself (RowCheckedSql): a wrong match is an error.
  const auto [name, must_prepare] = session_.StatementFor(plan);
  PgResult result;
  if (must_prepare) {
    result = conn_->Prepare(name, RowCheckedSql(plan), static_cast<int>(plan.params.size()));
    if (!result.ok()) session_.ForgetStatement(plan.statement_key);
  }
  if (!must_prepare || result.ok()) result = conn_->ExecPrepared(name, plan.params);
  counters_.statements++;
  if (!result.ok()) {
    // Transient (deadlock, lost connection, ...): retried by the apply loop, never quarantined.
    ThrowIfTransient(result, *conn_, "applying a change of " + DescribeTransaction(tx));
    return CauseOf(result, plan);
  }
  return std::nullopt;
}

Result<std::vector<uint8_t>> Applier::ReadChunkFrame(uint64_t offset) {
  if (!chunk_reader_) {
    auto reader = log::LogReader::Open(*device_, config_.log_directory);
    if (!reader) return reader.error();
    chunk_reader_ = std::move(reader.value());
  }
  TRELLARA_TRY(chunk_reader_->Seek(offset));
  auto record = chunk_reader_->Next();
  if (!record) return record.error();
  if (!*record || (*record)->offset != offset)
    return MakeError("log offset " + std::to_string(offset) + " of " + config_.log_directory +
                     " is no longer readable");
  return std::move((*record)->payload);
}

// BEGIN .. COMMIT of one verified transaction. Committed once COMMIT returned; Failed with the
// cause after ROLLBACK (or before BEGIN: drift found by core DriftInTransaction); RegistryChanged when control_check refused the transaction (TR010: the
// snapshot registry moved), rolled back before anything of it ran — the caller reloads the
// registry and tries again (never a quarantine, never a failure).
Attempt Applier::ApplyInTransaction(const ReadyTransaction& ready, bool resolves_quarantine) {
  const TxIdentity& tx = ready.tx;
  ResetAttempt(resolves_quarantine);
  // A whole transaction's changes in the order they run. Negative control (tests only,
  // TRELLARA_FAULTS=defect.ddl_dml_before_ddl:N:defect): the transaction's DDL changes run after its
  // other changes, which the migration test must catch.
  std::vector<const Change*> order;
  if (ready.envelope) {
    const std::vector<Change>& changes = ready.envelope->changes;
    for (const auto& change : changes) order.push_back(&change);
    if (std::any_of(changes.begin(), changes.end(), [](const Change& c) { return c.op == Op::Ddl; }) &&
        fault::Hit("defect.ddl_dml_before_ddl") == fault::Action::Defect)
      std::stable_partition(order.begin(), order.end(), [](const Change* c) { return c->op != Op::Ddl; });
    if (auto drift = DriftInTransaction(order, ready.envelope->relations, FlowKnows(), replay_ready_)) return Attempt{Attempt::Kind::Failed, *drift};
  }
  if (auto refused = BeginAttempt(tx)) return *refused;
  std::optional<QuarantineCause> failure;
  Step(conn_->ExecPrepared("trellara_commit_record", session_.CommitRecordParams(ready)),
       "INSERT of the dedup row with the origin progress", tx, failure);
  if (!failure && ready.envelope) {
    const std::vector<RelationInfo>& relations = ready.envelope->relations;
    for (size_t i = 0; i < order.size() && !failure; i++) {
      const Change& change = *order[i];
      failure = ExecuteChange(change, relations, tx);
      if (!failure || failure->reason != QuarantineReason::MissingTable) continue;
      const Change* create = nullptr;
      for (size_t j = i + 1; j < order.size() && create == nullptr; j++)
        if (CreatesRelation(*order[j], change.relation_oid)) create = order[j];
      failure = CreateAhead(change, failure, create, relations, tx,
                            [&] { return ExecuteChange(change, relations, tx); });
    }
    // A partitioned transaction merged from its staged chunks (MaterializePartitioned): they go
    // in the target transaction that publishes it.
    if (!failure && ready.partitioned())
      Step(conn_->ExecParams("DELETE FROM trellara.partition_stage WHERE flow = $1 AND commit_lsn = $2::pg_lsn",
                             {config_.flow_name, FormatLsn(tx.commit_lsn)}),
           "DELETE of the staged chunks", tx, failure);
  } else if (!failure && ready.partitioned()) {
    failure = ApplyPartitionedChanges(ready);
  } else if (!failure) {
    // A chunked transaction: its changes are batched (apply_chunked.cpp) — runs of INSERTs as
    // COPY, other row changes pipelined, the careful path for the rest — and everything staged is
    // flushed and answered before COMMIT. Chunks are read one at a time.
    ResetChunked();
    Status walked = ForEachVerifiedChunk(
        ready, [&](uint64_t offset) { return ReadChunkFrame(offset); },
        [&](const Chunk& chunk) -> Status {
          for (size_t i = 0; i < chunk.changes.size(); i++) {
            const Change& change = chunk.changes[i];
            failure = StageChunkedChange(change, chunk.relations, tx);
            if (failure && failure->reason == QuarantineReason::MissingTable) {
              // The CREATE comes later: in this chunk, or in one after it (read again to find it).
              std::optional<Change> create;
              std::vector<RelationInfo> create_relations;
              if (auto at = CreatedLaterAt(chunk.changes, i, change.relation_oid)) {
                create = chunk.changes[*at];
                create_relations = chunk.relations;
              } else {
                bool past = false;
                (void)ForEachVerifiedChunk(
                    ready, [&](uint64_t offset) { return ReadChunkFrame(offset); },
                    [&](const Chunk& later) -> Status {
                      if (create) return Status::Ok();
                      if (!past) {
                        past = later.seq == chunk.seq;
                        return Status::Ok();
                      }
                      for (const Change& c : later.changes)
                        if (!create && CreatesRelation(c, change.relation_oid)) {
                          create = c;
                          create_relations = later.relations;
                        }
                      return Status::Ok();
                    },
                    &chunk_cache_);
              }
              failure = CreateAhead(change, failure, create ? &*create : nullptr, create_relations, tx,
                                    [&] { return StageChunkedChange(change, chunk.relations, tx); });
            }
            if (failure) return MakeError("stopped at a failed change");
          }
          return Status::Ok();
        },
        &chunk_cache_);
    if (!failure && walked.ok()) failure = FlushChunked(tx);
    if (!walked.ok() && !failure) {
      QuarantineCause cause;
      cause.reason = QuarantineReason::BarrierFailure;
      cause.detail = walked.error().message;
      failure = cause;
    }
    ResetChunked();  // after a failure: no COPY or pipeline left open for the ROLLBACK
  }
  return EndAttempt(ready, failure, resolves_quarantine);
}

void Applier::ResetAttempt(bool resolves_quarantine) {
  replay_ready_ = resolves_quarantine;
  attempt_created_ahead_.clear();
  attempt_ddl_applied_ = 0;
  attempt_batched_updates_ = 0;
  attempt_ddl_no_target_change_ = 0;
  attempt_ddl_notes_.clear();
  attempt_registry_changed_ = false;
  session_.DiscardKnown();
}

std::optional<Attempt> Applier::BeginAttempt(const TxIdentity& tx) {
  Must(conn_->Exec("BEGIN"), "BEGIN for " + DescribeTransaction(tx));
  pending_locked_.clear();  // FOR SHARE locks of an earlier transaction are gone
  // First statement of every applier transaction (docs/snapshot.md "Locks"): holds the control
  // lock shared until COMMIT, so no registration commits in between, and refuses a stale registry.
  {
    PgResult check = conn_->ExecPrepared("trellara_control_check", session_.ControlCheckParams(registry_.version()));
    if (!check.ok()) {
      ThrowIfTransient(check, *conn_, "trellara.control_check for " + DescribeTransaction(tx));
      session_.EndFailedTransaction(DescribeTransaction(tx));
      if (check.sqlstate() == kRegistryChangedSqlstate) return Attempt{Attempt::Kind::RegistryChanged, {}};
      Fail("trellara.control_check(" + config_.flow_name + ", " + std::to_string(registry_.version()) +
           ") failed on the target " + conn_->Describe() + " before " + DescribeTransaction(tx) + ": " +
           check.Describe() + "; nothing of it was applied. Check the trellara schema on the target "
           "(sql/trellara_target.sql) and rerun trellara apply");
    }
  }
  return std::nullopt;
}

void Applier::Step(PgResult r, const char* what, const TxIdentity& tx, std::optional<QuarantineCause>& failure) {
  if (r.ok() || failure) return;
  // Transient (a serialization failure at COMMIT, a lost connection...): retried by the apply
  // loop, never quarantined; the dedup row decides whether a COMMIT that lost its reply committed.
  ThrowIfTransient(r, *conn_, std::string(what) + " of " + DescribeTransaction(tx));
  QuarantineCause cause;
  cause.reason = QuarantineReason::SqlError;
  cause.operation = what;
  cause.sqlstate = r.sqlstate();
  cause.detail = r.message() + (r.detail().empty() ? std::string() : ": " + r.detail());
  failure = cause;
}

Attempt Applier::EndAttempt(const ReadyTransaction& ready, std::optional<QuarantineCause> failure,
                            bool resolves_quarantine) {
  const TxIdentity& tx = ready.tx;
  // Fault point (tests, DESIGN §8 apply.after_staging_before_commit): every change of a chunked
  // transaction is staged in the open target transaction, COMMIT not sent yet. `stall` holds it
  // open there (a test can then kill the applier inside it); `crash` dies there.
  if (!failure && ready.chunked()) fault::Hit("apply.after_staging_before_commit");
  if (!failure && resolves_quarantine)
    Step(conn_->ExecParams("UPDATE trellara.quarantine SET state = 'resolved', resolved_at = now() "
                           "WHERE flow = $1 AND commit_lsn = $2::pg_lsn",
                           {tx.flow, FormatLsn(tx.commit_lsn)}),
         "marking the quarantine row resolved", tx, failure);
  if (!failure) {
    // A COMMIT can fail too (a deferred constraint trigger, a serialization failure at commit):
    // the server has then rolled the transaction back, and it is a failure like any other.
    Step(conn_->Exec("COMMIT"), "COMMIT", tx, failure);
    pending_locked_.clear();  // the chunk rows read FOR SHARE are unlocked: their state may move
    if (!failure) {
      session_.CommitKnown();
      counters_.ddl_applied += attempt_ddl_applied_;
      counters_.batched_updates += attempt_batched_updates_;
      counters_.ddl_no_target_change += attempt_ddl_no_target_change_;
      for (const std::string& note : attempt_ddl_notes_)
        std::cerr << "apply flow=" << config_.flow_name << " event=ddl_note xid=" << tx.xid
                  << " commit_lsn=" << FormatLsn(tx.commit_lsn) << " note=" << Quoted(note) << std::endl;
      // A DDL withheld a snapshot handoff (the control version moved in this transaction).
      if (attempt_registry_changed_) LoadRegistry();
      return Attempt{Attempt::Kind::Committed, {}};
    }
  }
  // Every failure, including the COMMIT's, leaves through here. A DDL of it may have made the
  // session accept fingerprints the target no longer has after the rollback: checked again.
  session_.DiscardKnown();
  session_.ForgetAcceptedRelations();
  session_.EndFailedTransaction(DescribeTransaction(tx));
  pending_locked_.clear();
  return Attempt{Attempt::Kind::Failed, *failure};
}

void Applier::Quarantine(const ReadyTransaction& ready, const QuarantineCause& cause, uint32_t previous_attempts) {
  const QuarantineRecord q = BuildQuarantine(ready.tx, ready.checksum, cause, previous_attempts);
  session_.RecordQuarantine(q, ready.tx);
  quarantined_++;
  // With --until-caught-up the command ends with this message (main prints it once).
  if (!until_caught_up_) std::cerr << "trellara: " << q.message << "\n";
}

// Blocked at a quarantined transaction: with --until-caught-up the command ends; otherwise it
// waits for the operator's replay-ready (or a stop signal).
bool Applier::WaitWhileBlocked(const std::string& message) {
  WriteOffset(true);
  WriteStatus("blocked", message);
  ReadQuarantineOpen();
  PublishMetrics(metrics::ApplyState::kBlocked, true);
  if (until_caught_up_) Fail(message, kExitFlowBlocked);
  const auto until = Clock::now() + kReplayReadyPollInterval;
  while (Clock::now() < until) {
    if (StopRequested()) return false;
    std::this_thread::sleep_for(cadence::kApplierStopCheck);
  }
  return true;
}

Outcome Applier::Process(const ReadyTransaction& ready) {
  for (;;) {
    Evidence evidence = session_.ReadEvidence(ready.tx);
    const ApplyDecision decision = Decide(ready, evidence.target);
    switch (decision.action) {
      case ApplyAction::SkipDuplicate:
        counters_.skipped_duplicates++;
        Retired(ready.tx.commit_lsn, ready.commit_time_us);
        return Outcome::SkippedDuplicate;
      case ApplyAction::WaitReplayReady: {
        const std::string message =
            evidence.quarantine_message.empty()
                ? DescribeTransaction(ready.tx) + " is quarantined; " + ReplayReadyCall(ready.tx.xid, ready.tx.commit_lsn)
                : evidence.quarantine_message;
        if (!WaitWhileBlocked("halted at a transaction quarantined earlier: " + message))
          return Outcome::Stopped;
        continue;
      }
      case ApplyAction::QuarantineConflict:
        Quarantine(ready, decision.cause, evidence.previous_attempts);
        if (!WaitWhileBlocked(BuildQuarantine(ready.tx, ready.checksum, decision.cause, evidence.previous_attempts).message))
          return Outcome::Stopped;
        continue;
      case ApplyAction::Apply: {
        if (ready.partitioned()) {
          QuarantineCause refused;
          const PartitionGate gate = WaitForPartitions(ready, refused);
          if (gate == PartitionGate::Stopped) return Outcome::Stopped;
          if (gate == PartitionGate::Refused) {
            Quarantine(ready, refused, evidence.previous_attempts);
            if (!WaitWhileBlocked(BuildQuarantine(ready.tx, ready.checksum, refused, evidence.previous_attempts).message))
              return Outcome::Stopped;
            continue;
          }
        }
        const bool resolves = evidence.target.quarantine == QuarantineState::ReplayReady;
        const Attempt attempt = ApplyInTransaction(ready, resolves);
        if (attempt.kind == Attempt::Kind::RegistryChanged) {
          // The registry moved (a table registered, chunks replaced, a hold requested or removed):
          // read it again and retry with it — after stopping at a hold it now names, since
          // everything before this transaction is committed.
          LoadRegistry();
          if (!StopAtHolds(ready.tx.commit_lsn)) return Outcome::Stopped;
          continue;
        }
        if (attempt.kind == Attempt::Kind::Committed) {
          counters_.applied++;
          Retired(ready.tx.commit_lsn, ready.commit_time_us);
          return Outcome::Applied;
        }
        const std::optional<QuarantineCause> failure = attempt.cause;
        Quarantine(ready, *failure, evidence.previous_attempts);
        // Negative control (tests only, TRELLARA_FAULTS=defect.apply_skip_quarantined:1:defect):
        // move past the quarantined transaction instead of halting there, which the fail-closed
        // tests must catch.
        if (fault::Hit("defect.apply_skip_quarantined") == fault::Action::Defect) return Outcome::SkippedDuplicate;
        if (!WaitWhileBlocked(BuildQuarantine(ready.tx, ready.checksum, *failure, evidence.previous_attempts).message))
          return Outcome::Stopped;
        continue;
      }
    }
  }
}
}  // namespace trellara::cli::apply
