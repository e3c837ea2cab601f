// apply_pipeline.cpp — the applier's throughput path (docs/performance.md): consecutive whole
// transactions are applied as a batch — one round trip reads the evidence of the whole batch (or a
// grouped batch assumes it and the target checks it inside the batch's transaction, core
// EvidenceFor), then the batch is queued in one libpq pipeline segment and the results are read
// back in order. A
// grouped batch (apply.group_transactions, the default) is one target transaction holding every
// transaction's dedup row and changes; a failure rolls it all back and core forms the same
// transactions again one target transaction each, as an ungrouped batch is: each its own
// BEGIN .. COMMIT. An error in transaction k makes the server skip
// everything queued after it up to the Sync (later transactions included), so nothing after a
// failed transaction is ever committed; the applier then retries transaction k alone, on the
// one-at-a-time path (apply_transaction.cpp), which quarantines it with the exact cause if it
// fails again.
#include <cstdlib>
#include <iostream>

#include "engine/applier.h"
#include "trellara/apply/apply_pipeline.h"
#include "trellara/base/fault.h"
#include "trellara/log/consumer_offsets.h"

namespace trellara::cli::apply {
namespace {

// A Postgres text[] literal: every element double-quoted, backslash and double quote escaped.
std::string TextArrayLiteral(const std::vector<std::string>& elements) {
  std::string out = "{";
  for (const std::string& element : elements) {
    if (out.size() > 1) out += ',';
    out += '"';
    for (char c : element) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

// SQLSTATE of trellara.require_no_replica_triggers (sql/trellara_target.sql).
constexpr const char* kReplicaTriggersSqlstate = "TR011";
// SQLSTATE of trellara.require_unapplied (sql/trellara_target.sql): a member of a batch formed on
// assumed evidence has been seen by the target.
constexpr const char* kSeenSqlstate = "TR012";

}  // namespace

// ---- batches of whole transactions ----------------------------------------------------

// The batch pipeline: pipeline_ (core ApplyPipeline) holds whole transactions in log order and
// decides which of them join a batch, how they retire and how far the consumer offset may move;
// this file reads the evidence, plans, queues one libpq pipeline segment per batch (each
// transaction its own BEGIN .. COMMIT, ended by one Sync) and reads the answers back, so the
// target executes a batch while the applier reads and decodes the next one from the log. At most
// one batch is in flight: the next batch's evidence is read only after the previous batch's
// results, or (core EvidenceFor == Assumed) not read at all but checked by the target inside the
// batch's own transaction — never read by a query queued before the previous batch committed,
// which could not see the rows that batch wrote.

// The adapter's verdict on one candidate of a batch: core's DecideApply, then what the flow knows of
// each relation (core ShapesKnown: DDL, first sight and drift go alone), the planner and the target's
// schema (CheckRelationsOf). Fills tx.plans for an Apply.
Admission Applier::Classify(PipelineTx& tx, const Evidence& evidence) {
  const ApplyDecision decision = Decide(tx.ready, evidence.target);
  if (decision.action == ApplyAction::SkipDuplicate) return Admission::Duplicate;
  // Anything but a plain first apply (a conflict, a quarantined or replay-ready boundary) takes the
  // one-at-a-time path, which re-reads the evidence and acts on it.
  if (decision.action != ApplyAction::Apply || evidence.target.quarantine) return Admission::Alone;
  // A partitioned transaction MaterializePartitioned did not merge (no evidence yet, a staged chunk
  // that does not verify): the one-at-a-time path waits for it or quarantines it.
  if (!tx.ready.envelope) return Admission::Alone;
  tx.plans.clear();
  tx.snapshot_in_copy = 0;
  tx.superseded = 0;
  for (const auto& change : tx.ready.envelope->changes) {
    // DDL, a relation seen for the first time or with another fingerprint (drift): the
    // one-at-a-time path decides it in transaction order (apply_transaction.cpp) and moves what the
    // flow knows of the relation only once that transaction committed.
    if (!ShapesKnown(change, tx.ready.envelope->relations, FlowKnows())) return Admission::Alone;
    if (UnderSnapshot(change, tx.ready.envelope->relations, tx.ready.tx.commit_lsn)) {
      // The handoff rule with what the registry has cached: a chunk not known to be copied (its
      // state must be read FOR SHARE) or a skip to record sends the transaction alone.
      // The target's catalog first: the rewrite's plans name each table as the target stores it.
      if (session_.CheckRelationsOf(change, tx.ready.envelope->relations)) return Admission::Alone;
      SnapshotRewrite rewrite = RewriteForSnapshot(change, tx.ready.envelope->relations, tx.ready.tx, false);
      if (rewrite.needs_alone || rewrite.cause) return Admission::Alone;
      tx.snapshot_in_copy += rewrite.left_out;
      for (auto& plan : rewrite.plans) {
        plan.row_key.clear();  // never left out as superseded: the handoff rule decided it
        tx.plans.push_back(std::move(plan));
      }
      continue;
    }
    // The target's catalog before the plan, which names each table as the target stores it
    // (apply_plan.h PartitionedOnTarget). The one-at-a-time path quarantines it with the cause.
    if (session_.CheckRelationsOf(change, tx.ready.envelope->relations)) return Admission::Alone;
    auto plan = PlanChange(change, tx.ready.envelope->relations, plan_cache_, session_.Partitioned(),
                           session_.AlwaysIdentity());
    if (!plan) return Admission::Alone;  // the one-at-a-time path quarantines it as plan_error
    if (plan->kind == PlanKind::NotApplied) continue;
    tx.plans.push_back(std::move(plan.value()));
  }
  return Admission::Apply;
}

// Forms the next batch (core decides who joins) and queues it to the target.
void Applier::SendBatch() {
  const size_t candidates = pipeline_.Candidates();
  // The evidence: read in its own round trip, or (core EvidenceFor) assumed "never seen" — no dedup
  // row, no quarantine row, origin progress below each candidate — and checked by the target as the
  // batch's first statement after the registry check (trellara_require_unapplied below).
  std::vector<Evidence> evidence(candidates);
  if (pipeline_.EvidenceFor() == EvidenceSource::Assumed) {
    pipeline_.AssumeEvidence();
  } else {
    std::vector<const TxIdentity*> ids;
    for (size_t i = 0; i < candidates; i++) ids.push_back(&pipeline_.at(i).ready.tx);
    evidence = session_.ReadEvidence(ids);
    pipeline_.EvidenceRead(evidence.front().target.checkpoint_lsn);
    MaterializePartitioned(candidates, evidence);
  }
  // A requested hold at C: nothing after C joins (Pump stops at the hold before the front passes it).
  const std::optional<uint64_t> hold_lsn = registry_.first_hold_lsn();
  for (size_t i = 0; i < candidates; i++) {
    PipelineTx& tx = pipeline_.at(i);
    if (hold_lsn && tx.ready.tx.commit_lsn > *hold_lsn) {
      if (i == 0)
        Fail("internal: the front of the batch of flow " + config_.flow_name + " (" + DescribeTransaction(tx.ready.tx) +
             ") is past requested hold " + registry_.holds().front().hold_id + " at " + FormatLsn(*hold_lsn) +
             " that was not reached");
      break;
    }
    const Admission admission = Classify(tx, evidence[i]);
    if (!pipeline_.Admit(i, admission, admission == Admission::Apply ? tx.plans.size() : 0)) break;
  }
  const size_t count = pipeline_.Seal();
  expects_.clear();
  if (!pipeline_.BatchSendsStatements()) return;  // only duplicates, or the front goes alone

  auto queued = [&](Status st) {
    if (!st.ok() && conn_->connection_lost())
      FailTransient(st.error().message + " (flow " + config_.flow_name + ", target " + conn_->Describe() + ")", "", true);
    if (!st.ok())
      Fail(st.error().message + " (flow " + config_.flow_name + ", target " + conn_->Describe() +
           "); rerun trellara apply: the dedup rows make it resume exactly once");
  };
  // A grouped batch is one target transaction: one BEGIN, one registry check, one statement inserting
  // every transaction's dedup row (and setting the origin progress to the last one's commit LSN,
  // pg_replication_origin_xact_setup), every transaction's changes, and one COMMIT.
  const bool grouped = pipeline_.grouped();
  const GroupRewrites rewrites =
      PermitGroupRewrites(grouped, config_.leave_out_superseded_updates, config_.merge_statements,
                          config_.session_replication_role == SessionReplicationRole::Replica);
  std::vector<const std::vector<ChangePlan>*> group;
  for (size_t k = 0; k < count; k++) group.push_back(&pipeline_.at(k).plans);  // a duplicate's plans are empty
  // A grouped batch leaves out the UPDATEs a later UPDATE of the group overwrites (core
  // FindSupersededUpdates) and merges a table's consecutive INSERTs and UPDATEs of one shape into one
  // statement each (core MergeGroupStatements); a guard before its COMMIT makes the target refuse
  // that when a trigger or rule fires for replicated changes of any relation written where the order
  // changed (or two of them share a table).
  SupersededUpdates superseded;
  if (rewrites.leave_out_superseded) superseded = FindSupersededUpdates(group, replica_triggers_);
  GroupStatements merged;
  const bool merging = rewrites.merge_statements;
  if (merging) {
    // The target's answer per UPDATE shape, asked outside the group's transaction before it is queued.
    const std::set<std::string> shapes = GroupUpdateShapes(group, superseded.superseded);
    merged = MergeGroupStatements(group, superseded.superseded, replica_triggers_, shapes);
  }
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_merge_unguarded:1:defect): the
  // relations a merged statement moved writes across are not guarded, so a target trigger can read
  // rows in an order in-order apply never shows; test_apply_superseded.py must catch it.
  const bool guard_merged =
      merged.relations.empty() || fault::Hit("defect.apply_merge_unguarded") != fault::Action::Defect;
  guarded_relations_ = GuardedRelations(superseded.relations, merged.relations, guard_merged);

  queued(conn_->EnterPipeline());
  const auto open_transaction = [&](size_t k) {
    queued(conn_->SendPrepared("trellara_begin", {}));
    expects_.push_back({k, What::Begin, {}});
    // First in every applier transaction: a registry that moved fails it with TR010 (CollectBatch).
    queued(conn_->SendPrepared("trellara_control_check", session_.ControlCheckParams(registry_.version())));
    expects_.push_back({k, What::ControlCheck, {}});
  };
  // One planned change as its own prepared statement.
  const auto send_plan = [&](size_t k, const ChangePlan& plan) {
    const auto [name, must_prepare] = session_.StatementFor(plan);
    if (must_prepare) {
      queued(conn_->SendPrepare(name, RowCheckedSql(plan), static_cast<int>(plan.params.size())));
      expects_.push_back({k, What::Prepare, plan.statement_key});
    }
    queued(conn_->SendPrepared(name, plan.params));
    expects_.push_back({k, What::Statement, {}});
    counters_.statements++;
  };
  // A partitioned transaction's staged chunks go in the target transaction that publishes it.
  const auto delete_staged = [&](size_t k, const std::vector<const ReadyTransaction*>& published) {
    std::string lsns = "{";
    for (const ReadyTransaction* ready : published)
      if (ready->partitioned()) lsns += (lsns.size() > 1 ? "," : "") + FormatLsn(ready->tx.commit_lsn);
    if (lsns.size() == 1) return;
    queued(conn_->SendParams("DELETE FROM trellara.partition_stage WHERE flow = $1 AND commit_lsn = ANY($2::pg_lsn[])",
                             {config_.flow_name, lsns + "}"}));
    expects_.push_back({k, What::Statement, {}});
  };
  std::optional<size_t> last_member;
  if (grouped) {
    // The group's dedup rows, one per member, in one statement right after the registry check (a
    // failure there, e.g. a row already present, sends the group again one transaction each).
    std::vector<const ReadyTransaction*> members;
    for (size_t k = 0; k < count; k++)
      if (!pipeline_.at(k).duplicate) members.push_back(&pipeline_.at(k).ready);
    if (!members.empty()) {
      size_t first = 0;
      while (pipeline_.at(first).duplicate) first++;
      open_transaction(first);
      if (pipeline_.evidence_assumed()) {
        // The evidence the batch was formed on, checked where it cannot go stale: inside the batch's
        // transaction, before anything of it is written. TR012 rolls the whole group back.
        queued(conn_->SendPrepared("trellara_require_unapplied", session_.RequireUnappliedParams(members)));
        expects_.push_back({first, What::EvidenceCheck, {}});
        counters_.assumed_evidence_batches++;
      }
      queued(conn_->SendPrepared("trellara_commit_records", session_.CommitRecordsParams(members)));
      expects_.push_back({first, What::Record, {}});
      delete_staged(first, members);
    }
  }
  for (size_t k = 0; k < count; k++) {
    PipelineTx& tx = pipeline_.at(k);
    tx.superseded = 0;
    tx.merged = 0;
    if (tx.duplicate) continue;
    last_member = k;
    if (merging) {
      for (size_t p = 0; p < tx.plans.size(); p++)
        if (superseded.count > 0 && superseded.superseded[k][p]) tx.superseded++;
      continue;  // sent below, statement by statement
    }
    if (!grouped) {
      open_transaction(k);
      queued(conn_->SendPrepared("trellara_commit_record", session_.CommitRecordParams(tx.ready)));
      expects_.push_back({k, What::Record, {}});
      delete_staged(k, {&tx.ready});
    }
    for (size_t p = 0; p < tx.plans.size(); p++) {
      if (superseded.count > 0 && superseded.superseded[k][p]) {
        tx.superseded++;
        continue;
      }
      send_plan(k, tx.plans[p]);
    }
    if (!grouped) {
      queued(conn_->SendPrepared("trellara_commit", {}));
      expects_.push_back({k, What::Commit, {}});
    }
    // Let the target start on this transaction while the rest of the batch is queued.
    queued(conn_->Flush());
  }
  if (merging) {
    size_t since_flush = 0;
    for (const GroupStatement& statement : merged.statements) {
      const PlanRef last = statement.plans.back();
      const ChangePlan& plan = pipeline_.at(last.tx).plans[last.plan];
      if (statement.kind == GroupStatementKind::Single) {
        send_plan(last.tx, plan);
      } else {
        std::vector<const ChangePlan*> rows;
        rows.reserve(statement.plans.size());
        for (const PlanRef& ref : statement.plans) {
          rows.push_back(&pipeline_.at(ref.tx).plans[ref.plan]);
          pipeline_.at(ref.tx).merged++;
        }
        if (statement.kind == GroupStatementKind::InsertRows) {
          auto insert = MergedInsertSql(rows);
          if (!insert) Fail(insert.error().message);
          queued(conn_->SendParams(insert->sql, insert->params));
          expects_.push_back({last.tx, What::Statement, {}});
          counters_.statements++;
        } else {
          send_plan(last.tx, UpdateBatchPlan(rows, *group_update_types_.at(plan.statement_key)));
        }
      }
      // Let the target start while the rest of the batch is queued.
      if (++since_flush >= 64) {
        queued(conn_->Flush());
        since_flush = 0;
      }
    }
  }
  if (grouped && last_member) {
    // Negative control (tests only, TRELLARA_FAULTS=defect.apply_superseded_unguarded:1:defect): the
    // guard is not sent, so UPDATEs are left out although a target trigger fires for each one;
    // test_apply_superseded.py must catch the trigger seeing fewer UPDATEs than the source made.
    if (!guarded_relations_.empty() && fault::Hit("defect.apply_superseded_unguarded") != fault::Action::Defect) {
      queued(conn_->SendPrepared("trellara_update_guard", {TextArrayLiteral(guarded_relations_)}));
      expects_.push_back({*last_member, What::UpdateGuard, {}});
    }
    queued(conn_->SendPrepared("trellara_commit", {}));
    expects_.push_back({*last_member, What::Commit, {}});
  }
  queued(conn_->Sync());
  batches_++;
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_ack_before_commit:1:defect): the
  // consumer offset is recorded past every transaction read so far — the batch just sent and
  // those still waiting for the next one — before the target has committed any of them:
  // acknowledging on read instead of after COMMIT. A kill then loses them for good, which the
  // kill -9 scenario must catch. (Only past the sent batch would hardly ever lose anything: the
  // target still commits what was sent before the applier died.)
  if (fault::Hit("defect.apply_ack_before_commit") == fault::Action::Defect) DefectAckEverythingRead();
}

// The UPDATE statement shapes of the group that may merge (MergeGroupStatements' update_shapes):
// those with enough key-preserving UPDATEs in the group for a merged statement, which the target
// accepts for one statement (trellara.batch_column_types, asked once per shape and kept until a
// group fails or a transaction goes alone).
std::set<std::string> Applier::GroupUpdateShapes(const std::vector<const std::vector<ChangePlan>*>& group,
                                                 const std::vector<std::vector<bool>>& superseded) {
  std::set<std::string> shapes;
  for (const auto& [key, plan] : MergeUpdateCandidates(group, superseded, replica_triggers_)) {
    auto known = group_update_types_.find(key);
    if (known == group_update_types_.end())
      known = group_update_types_
                  .emplace(key, AskUpdateBatchTypes(*plan,
                                                    "asking the target " + conn_->Describe() + " whether the UPDATEs of " +
                                                        plan->relation_display + " may be merged (trellara.batch_column_types)",
                                                    "nothing of the batch was sent"))
                  .first;
    if (known->second) shapes.insert(key);
  }
  return shapes;
}

// Negative control only (defect.apply_ack_before_commit): records the consumer offset past every
// transaction read so far, committed or not.
void Applier::DefectAckEverythingRead() {
  pipeline_.DefectTreatEverythingReadAsDone();
  const uint64_t early = pipeline_.DurableOffset(UINT64_MAX);
  if (early != written_offset_ && log::WriteConsumerOffset(*device_, config_.log_directory, kConsumerName, early).ok())
    written_offset_ = early;
}

// Reads the in-flight batch's answers; core retires, in order, every transaction that committed
// (or was a duplicate). After a failure the failed transaction goes alone and everything after it
// stays queued (the target skipped it).
void Applier::CollectBatch() {
  if (pipeline_.Next() != PipelineStep::Collect) return;
  std::vector<bool> committed(pipeline_.in_flight(), false);
  if (!expects_.empty()) {
    const TxIdentity& first = pipeline_.front().ready.tx;
    std::optional<std::string> failed;
    bool registry_changed = false;  // the first failure is control_check's TR010
    bool seen = false;              // the first failure is require_unapplied's TR012
    for (const Expect& expect : expects_) {
      auto next = conn_->NextResult();
      if (!next.result.ok() && !next.aborted && conn_->connection_lost())
        FailTransient("lost the connection to the target " + conn_->Describe() + " while applying a batch starting at " +
             DescribeTransaction(first) + " (" + next.result.Describe() +
             "); transactions of it may or may not have committed: rerun trellara apply, the dedup rows "
             "make it resume exactly once",
             next.result.sqlstate(), true);
      if (next.sync || next.missing)
        FailTransient("the target's answers to the batch starting at " + DescribeTransaction(first) +
             " ended before every queued statement was answered (flow " + config_.flow_name + ", " +
             next.result.Describe() + "); rerun trellara apply, the dedup rows make it resume exactly once",
             next.result.sqlstate(), conn_->connection_lost());
      const bool ok = next.result.ok() && !next.aborted;
      if (expect.what == What::Prepare && !ok) session_.ForgetStatement(expect.statement_key);  // not prepared
      if (!ok && !next.aborted && !failed) {
        failed = DescribeTransaction(pipeline_.at(expect.index).ready.tx) + ": " + next.result.Describe();
        registry_changed = expect.what == What::ControlCheck && next.result.sqlstate() == kRegistryChangedSqlstate;
        seen = expect.what == What::EvidenceCheck && next.result.sqlstate() == kSeenSqlstate;
        if (expect.what == What::UpdateGuard && next.result.sqlstate() == kReplicaTriggersSqlstate)
          RefuseSupersededUpdates(next.result);
      }
      if (expect.what == What::Commit && ok) pipeline_.MarkCommitted(expect.index, committed);
    }
    auto sync = conn_->NextResult();
    if (!sync.sync)  // like a lost answer above: retried from the consumer offset, never a quarantine
      FailTransient("the target did not answer the pipeline Sync of the batch starting at " +
                        DescribeTransaction(first) + " (flow " + config_.flow_name + ", " + sync.result.Describe() +
                        "); rerun trellara apply, the dedup rows make it resume exactly once",
                    sync.result.sqlstate(), conn_->connection_lost());
    Status left = conn_->ExitPipeline();
    if (!left.ok()) Fail(left.error().message + "; rerun trellara apply");
    if (failed) group_update_types_.clear();  // asked again before the next group that merges
    if (failed || conn_->InTransaction())
      session_.EndFailedTransaction("the batch of flow " + config_.flow_name + " starting at " +
                                    DescribeTransaction(first));
    // TR012: the target holds something of a batch formed on assumed evidence; core sends the same
    // transactions again one target transaction each, on read evidence (EvidenceFor).
    if (seen) counters_.assumed_evidence_refused++;
    // TR010: the snapshot registry moved under the batch. Read it again; the refused transaction
    // then goes alone with it (never a quarantine, never a failure of the transaction).
    if (registry_changed)
      LoadRegistry();
    else if (failed && !until_caught_up_)
      std::cerr << (pipeline_.grouped() ? "trellara: applying a group's transactions one target transaction each "
                                          "after a failure in it: "
                                        : "trellara: retrying alone after a failure in a batch: ")
                << *failed << "\n";
    expects_.clear();
  }
  auto outcome = pipeline_.Collect(committed);
  if (!outcome) Fail("flow " + config_.flow_name + ", target " + conn_->Describe() + ": " + outcome.error().message);
  for (const PipelineTx& tx : outcome->retired) Counted(tx);
}

// The guard refused leaving out UPDATEs (TR011): DETAIL holds the 1-based positions, in
// guarded_relations_, of the relations whose target fires a trigger or rule for replicated changes.
// No UPDATE of those, and none across a write of those, is left out from now on (the group itself
// goes again one transaction each).
void Applier::RefuseSupersededUpdates(const PgResult& refusal) {
  LearnRefusedRelations(refusal.detail(), guarded_relations_, replica_triggers_);
  std::cerr << "trellara: flow " << config_.flow_name
            << ": sending every replicated UPDATE of these tables, and every UPDATE a write of them comes between, "
               "and every change of them in its own statement in order, from now on: "
            << refusal.Describe() << "\n";
}

// A retired transaction of a batch, counted.
void Applier::Counted(const PipelineTx& tx) {
  unwritten_transactions_++;
  Retired(tx.ready.tx.commit_lsn, tx.ready.commit_time_us);
  if (tx.duplicate) {
    counters_.skipped_duplicates++;
  } else {
    counters_.applied++;
    // A TRUNCATE of a table under snapshot may plan one range DELETE per chunk: never negative.
    const size_t changes = tx.ready.envelope->changes.size();
    const size_t executed = tx.plans.size() + tx.snapshot_in_copy;
    counters_.not_applied_changes += changes > executed ? changes - executed : 0;
    counters_.snapshot_in_copy += tx.snapshot_in_copy;
    counters_.superseded_updates += tx.superseded;
    counters_.merged_changes += tx.merged;
  }
}

// Moves the batch pipeline forward. With `drain`, returns only once nothing is queued (every
// transaction applied, skipped, or the applier stopped); otherwise it sends the next batch and
// returns while the target executes it.
Outcome Applier::Pump(bool drain) {
  for (;;) {
    CollectBatch();
    const PipelineStep step = pipeline_.Next();
    if (step == PipelineStep::Idle) return Outcome::Applied;
    if (StopRequested()) return Outcome::Stopped;
    // Nothing is in flight and everything before the front is retired: a requested hold the front
    // would pass is reached here.
    if (!registry_.holds().empty() && !StopAtHolds(pipeline_.front().ready.tx.commit_lsn)) return Outcome::Stopped;
    if (step == PipelineStep::Alone) {
      // A failure in the batch, a duplicate conflict, a quarantine, a plan error: it decides,
      // retries or halts there (Process counts it). A DDL among them may change what merges.
      group_update_types_.clear();
      if (Process(pipeline_.front().ready) == Outcome::Stopped) return Outcome::Stopped;
      pipeline_.RetireAlone();
      unwritten_transactions_++;
      continue;
    }
    SendBatch();
    if (!drain && !pipeline_.alone()) return Outcome::Applied;
  }
}

}  // namespace trellara::cli::apply
