// apply_pipeline.cpp — the applier's throughput path (docs/performance.md): consecutive whole
// transactions are applied as a batch — one round trip reads the evidence of the whole batch, then
// every transaction of it, each still its own BEGIN .. COMMIT, is queued in one libpq pipeline
// segment and the results are read back in order. An error in transaction k makes the server skip
// everything queued after it up to the Sync (later transactions included), so nothing after a
// failed transaction is ever committed; the applier then retries transaction k alone, on the
// one-at-a-time path (apply_transaction.cpp), which quarantines it with the exact cause if it
// fails again.
#include <algorithm>
#include <iostream>

#include "applier.h"
#include "trellara/fault.h"
#include "trellara/log/consumer_offsets.h"

namespace trellara::cli::apply {

// ---- batches of whole transactions ----------------------------------------------------

// The batch pipeline. pending_ holds whole transactions in log order; its first inflight_
// entries have been queued to the target (one pipeline segment, each its own BEGIN .. COMMIT,
// ended by a Sync) and their results are read later by CollectBatch, so the target executes a
// batch while the applier reads and decodes the next one from the log. At most one batch is in
// flight: the next batch's evidence is read only after the previous batch's results.

// Queues the leading transactions of pending_ that can go through the pipeline: duplicates are
// marked to skip, plain Apply decisions are queued. Sets one_at_a_time_ when the transaction
// after them needs the one-at-a-time path rather than the next batch.
void Applier::SendBatch() {
  std::vector<const TxIdentity*> ids;
  for (size_t i = 0; i < pending_.size() && i < kBatchMaxTransactions; i++) ids.push_back(&pending_[i].ready.tx);
  const std::vector<Evidence> evidence = session_.ReadEvidence(ids);

  size_t statements = 0;
  size_t count = 0;
  for (size_t i = 0; i < ids.size(); i++) {
    PendingTx& p = pending_[i];
    const Evidence& e = evidence[i];
    const ApplyDecision decision = Decide(p.ready, e.target);
    if (decision.action == ApplyAction::SkipDuplicate) {
      p.skip = true;
      count++;
      continue;
    }
    // Anything but a plain first apply (a conflict, a quarantined or replay-ready boundary)
    // takes the one-at-a-time path, which re-reads the evidence and acts on it.
    if (decision.action != ApplyAction::Apply || e.target.quarantine) {
      one_at_a_time_ = true;
      break;
    }
    p.skip = false;
    p.plans.clear();
    bool planned = true;
    for (const auto& change : p.ready.envelope->changes) {
      auto plan = PlanChange(change, p.ready.envelope->relations);
      if (!plan) {
        planned = false;  // the one-at-a-time path quarantines it as plan_error
        break;
      }
      if (plan->kind == PlanKind::NotApplied) continue;
      if (session_.CheckRelationsOf(change, p.ready.envelope->relations)) {
        planned = false;  // the one-at-a-time path quarantines it with the cause
        break;
      }
      p.plans.push_back(std::move(plan.value()));
    }
    if (!planned) {
      one_at_a_time_ = true;
      break;
    }
    // A transaction larger than a whole batch (trellara.chunk_changes raised above the bound,
    // up to 1M changes per envelope) goes alone through the one-at-a-time path, which reads
    // each answer as it comes instead of buffering them all.
    if (p.plans.size() + 3 > kBatchMaxStatements) {
      if (count == 0) one_at_a_time_ = true;
      break;
    }
    if (statements + p.plans.size() + 3 > kBatchMaxStatements) break;
    statements += p.plans.size() + 3;
    count++;
  }
  inflight_ = count;
  expects_.clear();
  if (std::none_of(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(count),
                   [](const PendingTx& p) { return !p.skip; }))
    return;  // only duplicates: nothing to send

  auto queued = [&](Status st) {
    if (!st.ok() && conn_->connection_lost())
      FailTransient(st.error().message + " (flow " + config_.flow_name + ", target " + conn_->Describe() + ")", "", true);
    if (!st.ok())
      Fail(st.error().message + " (flow " + config_.flow_name + ", target " + conn_->Describe() +
           "); rerun trellara apply: the dedup rows make it resume exactly once");
  };
  queued(conn_->EnterPipeline());
  for (size_t k = 0; k < count; k++) {
    const PendingTx& p = pending_[k];
    if (p.skip) continue;
    queued(conn_->SendPrepared("trellara_begin", {}));
    expects_.push_back({k, What::Begin, {}});
    queued(conn_->SendPrepared("trellara_commit_record", session_.CommitRecordParams(p.ready)));
    expects_.push_back({k, What::Record, {}});
    for (const ChangePlan& plan : p.plans) {
      const auto [name, must_prepare] = session_.StatementFor(plan);
      if (must_prepare) {
        queued(conn_->SendPrepare(name, RowCheckedSql(plan), static_cast<int>(plan.params.size())));
        expects_.push_back({k, What::Prepare, plan.statement_key});
      }
      queued(conn_->SendPrepared(name, plan.params));
      expects_.push_back({k, What::Statement, {}});
      counters_.statements++;
    }
    queued(conn_->SendPrepared("trellara_commit", {}));
    expects_.push_back({k, What::Commit, {}});
    // Let the target start on this transaction while the rest of the batch is queued.
    queued(conn_->Flush());
  }
  queued(conn_->Sync());
  batches_++;
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_ack_before_commit:1:defect): the
  // consumer offset is recorded past every transaction read so far — the batch just sent and
  // those still waiting for the next one — before the target has committed any of them:
  // acknowledging on read instead of after COMMIT. A kill then loses them for good, which the
  // kill -9 scenario must catch. (Only past the sent batch would hardly ever lose anything: the
  // target still commits what was sent before the applier died.)
  if (fault::Hit("defect.apply_ack_before_commit") == fault::Action::Defect) {
    for (const PendingTx& p : pending_) offsets_.Done(p.offset_after, 0);
    const uint64_t early = offsets_.Durable(UINT64_MAX);
    if (early != written_offset_ &&
        log::WriteConsumerOffset(*device_, config_.log_directory, kConsumerName, early).ok())
      written_offset_ = early;
  }
}

// Reads the in-flight batch's results and retires, in order, every transaction that committed
// (or was a duplicate). After a failure the failed transaction and everything after it stay in
// pending_ (the target skipped them) and one_at_a_time_ is set for the failed one.
void Applier::CollectBatch() {
  if (inflight_ == 0) return;
  std::vector<bool> committed(inflight_, false);
  if (!expects_.empty()) {
    std::optional<std::string> failed;
    for (const Expect& expect : expects_) {
      auto next = conn_->NextResult();
      if (!next.result.ok() && !next.aborted && conn_->connection_lost())
        FailTransient("lost the connection to the target " + conn_->Describe() + " while applying a batch starting at " +
             DescribeTransaction(pending_.front().ready.tx) + " (" + next.result.Describe() +
             "); transactions of it may or may not have committed: rerun trellara apply, the dedup rows "
             "make it resume exactly once",
             next.result.sqlstate(), true);
      if (next.sync || next.missing)
        FailTransient("the target's answers to the batch starting at " + DescribeTransaction(pending_.front().ready.tx) +
             " ended before every queued statement was answered (flow " + config_.flow_name + ", " +
             next.result.Describe() + "); rerun trellara apply, the dedup rows make it resume exactly once",
             next.result.sqlstate(), conn_->connection_lost());
      const bool ok = next.result.ok() && !next.aborted;
      if (expect.what == What::Prepare && !ok) session_.ForgetStatement(expect.statement_key);  // not prepared
      if (!ok && !next.aborted && !failed)
        failed = DescribeTransaction(pending_[expect.index].ready.tx) + ": " + next.result.Describe();
      if (expect.what == What::Commit && ok) committed[expect.index] = true;
    }
    auto sync = conn_->NextResult();
    if (!sync.sync)
      Fail("the target did not answer the pipeline Sync of the batch (flow " + config_.flow_name + ", " +
           sync.result.Describe() + "); rerun trellara apply, the dedup rows make it resume exactly once");
    Status left = conn_->ExitPipeline();
    if (!left.ok()) Fail(left.error().message + "; rerun trellara apply");
    if (conn_->InTransaction()) Must(conn_->Exec("ROLLBACK"), "ROLLBACK after a failed transaction of the batch");
    if (failed) {
      session_.ForgetOriginProgress();
      if (!until_caught_up_) std::cerr << "trellara: retrying alone after a failure in a batch: " << *failed << "\n";
    }
    expects_.clear();
  }
  const size_t count = inflight_;
  inflight_ = 0;
  for (size_t k = 0; k < count; k++) {
    PendingTx& p = pending_.front();
    if (!p.skip && !committed[k]) {
      one_at_a_time_ = true;  // the failed transaction: retried alone
      return;
    }
    if (p.skip) {
      counters_.skipped_duplicates++;
    } else {
      counters_.applied++;
      counters_.not_applied_changes += p.ready.envelope->changes.size() - p.plans.size();
    }
    Retire();
  }
}

// pending_.front() is done (committed, skipped or handled alone): the consumer offset may pass
// it once the target has flushed it.
void Applier::Retire() {
  const PendingTx& p = pending_.front();
  offsets_.Done(p.offset_after, p.ready.tx.commit_lsn);
  unwritten_transactions_++;
  pending_.pop_front();
  if (pending_.empty() && offset_after_pending_) {
    offsets_.Done(*offset_after_pending_, 0);
    offset_after_pending_.reset();
  }
}

// Moves the batch pipeline forward. With `drain`, returns only once pending_ is empty (every
// transaction applied, skipped, or the applier stopped); otherwise it sends the next batch and
// returns while the target executes it.
Outcome Applier::Pump(bool drain) {
  for (;;) {
    CollectBatch();
    if (pending_.empty()) return Outcome::Applied;
    if (StopRequested()) return Outcome::Stopped;
    if (one_at_a_time_) {
      one_at_a_time_ = false;
      // A failure in the batch, a duplicate conflict, a quarantine, a plan error: it decides,
      // retries or halts there (Process counts it).
      if (Process(pending_.front().ready) == Outcome::Stopped) return Outcome::Stopped;
      Retire();
      continue;
    }
    SendBatch();
    if (!drain && !one_at_a_time_) return Outcome::Applied;
  }
}
}  // namespace trellara::cli::apply
