// apply_pipeline.cpp — the applier's batch pipeline rules (apply_pipeline.h). A broken
// precondition is a bug in the adapter that drives this state machine: it is an always-on
// assertion (base/assert.h), never a risk of retiring, reordering or acknowledging a transaction
// wrongly.
#include "trellara/apply/apply_pipeline.h"

#include "trellara/base/assert.h"

#include <algorithm>
#include <string>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

namespace trellara {
namespace {

void Require(bool condition, const char* rule) {
  TRELLARA_ASSERT(condition, std::string("apply pipeline rule broken: ") + rule);
}

}  // namespace

ApplyPipeline::ApplyPipeline(uint64_t start_offset, PipelineLimits limits)
    : limits_(limits), offsets_(start_offset) {
  Require(limits_.batch_transactions_max > 0, "a batch holds at least one transaction");
  Require(limits_.batch_statements_max > kBatchStatementsPerTransaction, "a batch holds at least one statement");
}

void ApplyPipeline::ReadWhole(ReadyTransaction ready, uint64_t offset_after) {
  // No order check on commit LSNs: after a relay crash the log may hold a transaction twice; the
  // second copy is a duplicate (its dedup row decides), not an error here.
  queue_.push_back(PipelineTx{std::move(ready), offset_after, {}, false});
  retain_after_queue_.reset();  // the new transaction's offset covers those records
}

void ApplyPipeline::ReadNothing(uint64_t retain_offset) {
  if (queue_.empty()) {
    offsets_.Done(retain_offset, 0);
    return;
  }
  retain_after_queue_ = retain_offset;
}

Status ApplyPipeline::AppliedAlone(uint64_t offset_after, uint64_t commit_lsn) {
  if (!queue_.empty())
    return MakeError("a chunked transaction (commit " + FormatLsn(commit_lsn) + ") was applied while " +
                     std::to_string(queue_.size()) + " earlier whole transactions were still queued; drain them first");
  known_applied_lsn_ = std::max(known_applied_lsn_, commit_lsn);
  offsets_.Done(offset_after, commit_lsn);
  return Status::Ok();
}

PipelineStep ApplyPipeline::Next() const {
  if (in_flight_ > 0) return PipelineStep::Collect;
  if (queue_.empty()) return PipelineStep::Idle;
  if (alone_) return PipelineStep::Alone;
  return PipelineStep::Form;
}

size_t ApplyPipeline::Candidates() const {
  Require(Next() == PipelineStep::Form, "candidates are asked for only while forming a batch");
  return CandidateCount();
}

EvidenceSource ApplyPipeline::EvidenceFor() const {
  Require(Next() == PipelineStep::Form && admitted_ == 0 && !closed_,
          "the evidence of a batch is chosen before its first admission");
  // Only a grouped batch: one target transaction, so the check in it covers every member and a
  // refusal rolls all of them back.
  if (!limits_.group_transactions || ungrouped_remaining_ > 0) return EvidenceSource::Read;
  if (!evidence_read_) return EvidenceSource::Read;
  uint64_t previous = known_applied_lsn_;
  const size_t candidates = CandidateCount();
  for (size_t k = 0; k < candidates; k++) {
    const ReadyTransaction& ready = queue_[k].ready;
    if (ready.partitioned() || !ready.envelope) return EvidenceSource::Read;
    // At or below what the target holds (a rewind, the log repeating itself): likely a duplicate.
    if (ready.tx.commit_lsn <= previous) return EvidenceSource::Read;
    previous = ready.tx.commit_lsn;
  }
  return EvidenceSource::Assumed;
}

void ApplyPipeline::EvidenceRead(uint64_t checkpoint_lsn) {
  evidence_read_ = true;
  known_applied_lsn_ = std::max(known_applied_lsn_, checkpoint_lsn);
}

void ApplyPipeline::AssumeEvidence() {
  Require(EvidenceFor() == EvidenceSource::Assumed, "evidence is assumed only where EvidenceFor allows it");
  assumed_ = true;
}

size_t ApplyPipeline::CandidateCount() const { return std::min(queue_.size(), limits_.batch_transactions_max); }

bool ApplyPipeline::Admit(size_t index, Admission admission, size_t planned_statements) {
  // Forming: nothing in flight and the batch not closed (an Alone verdict closes it).
  Require(in_flight_ == 0 && !closed_, "admission only while a batch is open");
  Require(index == admitted_ && index < CandidateCount(), "candidates are admitted in log order");
  PipelineTx& tx = queue_[index];
  // The first candidate decides the batch's form: grouped unless the transactions of a failed
  // group are still being applied one target transaction each.
  if (index == 0) grouped_ = limits_.group_transactions && ungrouped_remaining_ == 0;
  Require(!assumed_ || grouped_, "a batch formed on assumed evidence is one target transaction");
  switch (admission) {
    case Admission::Duplicate:
      tx.duplicate = true;
      admitted_++;
      break;
    case Admission::Alone:
      // It goes alone once everything admitted before it has retired.
      closed_ = true;
      alone_ = true;
      return false;
    case Admission::Apply: {
      // A transaction alone costs its changes and kBatchStatementsPerTransaction. In a grouped batch
      // BEGIN, the registry check, the statement inserting every member's dedup row and COMMIT are
      // sent once for the group, so each further transaction costs its changes only.
      const size_t alone_cost = planned_statements + kBatchStatementsPerTransaction;
      const size_t cost = grouped_ && admitted_statements_ > 0 ? planned_statements : alone_cost;
      if (alone_cost > limits_.batch_statements_max) {
        // Larger than a whole batch: alone, reading each answer as it comes.
        closed_ = true;
        if (admitted_ == 0) alone_ = true;
        return false;
      }
      if (admitted_statements_ + cost > limits_.batch_statements_max) {
        closed_ = true;  // the next batch starts with it
        return false;
      }
      // The log may hold a transaction twice (a relay crash before its acknowledgement re-decodes
      // it). Both copies would be applied in one batch, read the same evidence and conflict on the
      // dedup row; the second copy starts the next batch instead, where its dedup row says it is a
      // duplicate. A batch never holds a transaction twice (asserted at Seal).
      // Commit LSNs of a batch increase except where the log repeats itself: only then is the
      // batch searched (a batch of in-order transactions costs one comparison each).
      if (admitted_ > 0 && tx.ready.tx.commit_lsn <= batch_max_commit_lsn_) {
        for (size_t k = 0; k < admitted_; k++) {
          if (!queue_[k].duplicate && queue_[k].ready.tx == tx.ready.tx) {
            closed_ = true;
            return false;
          }
        }
      }
      batch_max_commit_lsn_ = std::max(batch_max_commit_lsn_, tx.ready.tx.commit_lsn);
      tx.duplicate = false;
      admitted_statements_ += cost;
      admitted_++;
      break;
    }
  }
  if (admitted_ >= CandidateCount()) closed_ = true;
  return !closed_;
}

size_t ApplyPipeline::Seal() {
  Require(in_flight_ == 0 && !queue_.empty(), "a batch is sealed only while it is being formed");
  Require(admitted_ > 0 || alone_, "a sealed batch holds a transaction, or the front goes alone");
  in_flight_ = admitted_;
  if (in_flight_ == 0) {
    grouped_ = false;  // the front goes alone
    assumed_ = false;  // it reads its own evidence (the one-at-a-time path)
  }
  Require(!assumed_ || grouped_, "a batch formed on assumed evidence is one target transaction");
  // A batch never holds a transaction twice: strictly increasing commit LSNs prove it in one pass;
  // otherwise every pair is compared.
  bool increasing = true;
  uint64_t last_lsn = 0;
  for (size_t k = 0; k < in_flight_ && increasing; k++) {
    if (queue_[k].duplicate) continue;
    increasing = last_lsn == 0 || queue_[k].ready.tx.commit_lsn > last_lsn;
    last_lsn = queue_[k].ready.tx.commit_lsn;
  }
  for (size_t k = 1; k < in_flight_ && !increasing; k++) {
    for (size_t j = 0; j < k && !queue_[k].duplicate; j++) {
      TRELLARA_ASSERT(queue_[j].duplicate || !(queue_[j].ready.tx == queue_[k].ready.tx),
                      "a sealed batch holds " + DescribeTransaction(queue_[k].ready.tx) + " twice");
    }
  }
  batch_max_commit_lsn_ = 0;
  admitted_ = 0;
  admitted_statements_ = 0;
  closed_ = false;
  return in_flight_;
}

void ApplyPipeline::MarkCommitted(size_t index, std::vector<bool>& committed) const {
  Require(index < in_flight_ && committed.size() == in_flight_, "a COMMIT answer belongs to a transaction in flight");
  if (!grouped_) {
    committed[index] = true;
    return;
  }
  for (size_t k = 0; k < in_flight_; k++) committed[k] = !queue_[k].duplicate;
}

bool ApplyPipeline::BatchSendsStatements() const {
  for (size_t k = 0; k < in_flight_; k++)
    if (!queue_[k].duplicate) return true;
  return false;
}

Result<CollectOutcome> ApplyPipeline::Collect(const std::vector<bool>& committed) {
  Require(Next() == PipelineStep::Collect, "answers are collected only for a batch in flight");
  Require(committed.size() == in_flight_, "one answer per transaction in flight");
  if (grouped_) return CollectGrouped(committed);
  std::optional<size_t> failed;
  for (size_t k = 0; k < in_flight_; k++) {
    if (queue_[k].duplicate) continue;
    if (!committed[k] && !failed) failed = k;
    if (committed[k] && failed)
      return MakeError(DescribeTransaction(queue_[k].ready.tx) + " is reported committed although " +
                       DescribeTransaction(queue_[*failed].ready.tx) +
                       " before it failed in the same pipeline segment (the server skips everything after a "
                       "failure up to the Sync); nothing of the batch is acknowledged: stop and inspect the target");
  }
  CollectOutcome outcome;
  const size_t retire = failed.value_or(in_flight_);
  for (size_t k = 0; k < retire; k++) outcome.retired.push_back(PopFront(queue_.front().ready.tx.commit_lsn));
  in_flight_ = 0;
  assumed_ = false;
  if (failed) {
    outcome.failed = *failed;
    alone_ = true;  // the failed transaction: retried alone; those after it stay queued
  }
  return outcome;
}

Result<CollectOutcome> ApplyPipeline::CollectGrouped(const std::vector<bool>& committed) {
  std::optional<size_t> first_committed, first_failed;
  for (size_t k = 0; k < in_flight_; k++) {
    if (queue_[k].duplicate) continue;
    if (committed[k] && !first_committed) first_committed = k;
    if (!committed[k] && !first_failed) first_failed = k;
  }
  if (first_committed && first_failed)
    return MakeError(DescribeTransaction(queue_[*first_committed].ready.tx) + " is reported committed and " +
                     DescribeTransaction(queue_[*first_failed].ready.tx) +
                     " failed although both were in one target transaction; nothing of the batch is "
                     "acknowledged: stop and inspect the target");
  CollectOutcome outcome;
  const size_t count = in_flight_;
  in_flight_ = 0;
  grouped_ = false;
  const bool assumed = assumed_;
  assumed_ = false;
  if (first_failed) {
    // A group formed on assumed evidence that failed (the target's check refused it, or anything
    // else): nothing is assumed again before the evidence has been read.
    if (assumed) evidence_read_ = false;
    // Nothing of the group committed: the same transactions go again, one target transaction each.
    // A transaction that closed the group as Alone is decided again when its turn comes.
    outcome.failed = *first_failed;
    alone_ = false;
    ungrouped_remaining_ = count;
    return outcome;
  }
  for (size_t k = 0; k < count; k++) outcome.retired.push_back(PopFront(queue_.front().ready.tx.commit_lsn));
  return outcome;
}

PipelineTx ApplyPipeline::RetireAlone() {
  Require(Next() == PipelineStep::Alone, "only the front transaction, handled alone, retires alone");
  alone_ = false;
  return PopFront(queue_.front().ready.tx.commit_lsn);
}

PipelineTx ApplyPipeline::PopFront(uint64_t required_lsn) {
  PipelineTx tx = std::move(queue_.front());
  queue_.pop_front();
  if (ungrouped_remaining_ > 0) ungrouped_remaining_--;
  known_applied_lsn_ = std::max(known_applied_lsn_, tx.ready.tx.commit_lsn);
  offsets_.Done(tx.offset_after, required_lsn);
  if (queue_.empty() && retain_after_queue_) {
    offsets_.Done(*retain_after_queue_, 0);
    retain_after_queue_.reset();
  }
  return tx;
}

void ApplyPipeline::DefectTreatEverythingReadAsDone() {
  for (const PipelineTx& tx : queue_) offsets_.Done(tx.offset_after, 0);
}

}  // namespace trellara
