// apply_transaction.cpp — the applier's one-at-a-time path: one verified source transaction,
// decided by core (DecideApply), applied in its own BEGIN .. COMMIT with its dedup row and origin
// progress, or rolled back and quarantined (BuildQuarantine) in its own transaction, halting there.
//
// Chunked transactions, transactions being replayed after a quarantine, and transactions a batch
// failed on always take this path. It never commits anything of a transaction that failed.
#include <chrono>
#include <iostream>
#include <thread>

#include "applier.h"
#include "trellara/fault.h"

namespace trellara::cli::apply {
namespace {
constexpr auto kReplayReadyPollInterval = std::chrono::seconds(1);
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
  if (UnderSnapshot(change, relations)) {
    SnapshotRewrite rewrite = RewriteForSnapshot(change, relations, tx, /*in_transaction=*/true);
    if (rewrite.cause) return rewrite.cause;
    for (const auto& [table, chunk_no] : rewrite.skips) {
      session_.RecordSkip(*table, chunk_no, tx);
      counters_.snapshot_skips++;
    }
    counters_.snapshot_in_copy += rewrite.left_out;
    if (rewrite.plans.empty()) return std::nullopt;
    if (auto cause = session_.CheckRelationsOf(change, relations)) return cause;
    for (const ChangePlan& plan : rewrite.plans)
      if (auto cause = ExecutePlan(plan, tx)) return cause;
    return std::nullopt;
  }
  auto plan = PlanChange(change, relations);
  if (!plan) {
    QuarantineCause cause;
    cause.reason = QuarantineReason::PlanError;
    cause.operation = OpName(change.op);
    cause.detail = plan.error().message;
    return cause;
  }
  if (plan->kind == PlanKind::NotApplied) {
    counters_.not_applied_changes++;
    return std::nullopt;
  }
  if (auto cause = session_.CheckRelationsOf(change, relations)) return cause;
  return ExecutePlan(*plan, tx);
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
// cause after ROLLBACK; RegistryChanged when control_check refused the transaction (TR010: the
// snapshot registry moved), rolled back before anything of it ran — the caller reloads the
// registry and tries again (never a quarantine, never a failure).
Attempt Applier::ApplyInTransaction(const ReadyTransaction& ready, bool resolves_quarantine) {
  const TxIdentity& tx = ready.tx;
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
  std::optional<QuarantineCause> failure;
  auto step = [&](PgResult r, const char* what) {
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
  };
  step(conn_->ExecPrepared("trellara_commit_record", session_.CommitRecordParams(ready)),
       "INSERT of the dedup row with the origin progress");
  if (!failure && ready.envelope) {
    for (const auto& change : ready.envelope->changes) {
      failure = ExecuteChange(change, ready.envelope->relations, tx);
      if (failure) break;
    }
  } else if (!failure) {
    Status walked = ForEachVerifiedChunk(
        ready, [&](uint64_t offset) { return ReadChunkFrame(offset); },
        [&](const Chunk& chunk) -> Status {
          for (const auto& change : chunk.changes) {
            failure = ExecuteChange(change, chunk.relations, tx);
            if (failure) return MakeError("stopped at a failed change");
          }
          return Status::Ok();
        });
    if (!walked.ok() && !failure) {
      QuarantineCause cause;
      cause.reason = QuarantineReason::BarrierFailure;
      cause.detail = walked.error().message;
      failure = cause;
    }
  }
  // Fault point (tests, DESIGN §8 apply.after_staging_before_commit): every change of a chunked
  // transaction is staged in the open target transaction, COMMIT not sent yet. `stall` holds it
  // open there (a test can then kill the applier inside it); `crash` dies there.
  if (!failure && ready.chunked()) fault::Hit("apply.after_staging_before_commit");
  if (!failure && resolves_quarantine)
    step(conn_->ExecParams("UPDATE trellara.quarantine SET state = 'resolved', resolved_at = now() "
                           "WHERE flow = $1 AND commit_lsn = $2::pg_lsn",
                           {tx.flow, FormatLsn(tx.commit_lsn)}),
         "marking the quarantine row resolved");
  if (!failure) {
    // A COMMIT can fail too (a deferred constraint trigger, a serialization failure at commit):
    // the server has then rolled the transaction back, and it is a failure like any other.
    step(conn_->Exec("COMMIT"), "COMMIT");
    pending_locked_.clear();  // the chunk rows read FOR SHARE are unlocked: their state may move
    if (!failure) return Attempt{Attempt::Kind::Committed, {}};
  }
  // Every failure, including the COMMIT's, leaves through here.
  session_.EndFailedTransaction(DescribeTransaction(tx));
  pending_locked_.clear();
  return Attempt{Attempt::Kind::Failed, *failure};
}

void Applier::Quarantine(const ReadyTransaction& ready, const QuarantineCause& cause, uint32_t previous_attempts) {
  const QuarantineRecord q = BuildQuarantine(ready.tx, ready.checksum, cause, previous_attempts);
  session_.RecordQuarantine(q, ready.tx);
  // With --until-caught-up the command ends with this message (main prints it once).
  if (!until_caught_up_) std::cerr << "trellara: " << q.message << "\n";
}

// Blocked at a quarantined transaction: with --until-caught-up the command ends; otherwise it
// waits for the operator's replay-ready (or a stop signal).
bool Applier::WaitWhileBlocked(const std::string& message) {
  WriteOffset(true);
  WriteStatus("blocked", message);
  if (until_caught_up_) Fail(message, kExitFlowBlocked);
  const auto until = Clock::now() + kReplayReadyPollInterval;
  while (Clock::now() < until) {
    if (StopRequested()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
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
        Retired(ready.tx.commit_lsn);
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
          Retired(ready.tx.commit_lsn);
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
