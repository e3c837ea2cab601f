// apply_pipeline.h — the applier's batch pipeline rules, as a pure state machine (DESIGN §2
// "log -> target", §6 throughput). The libpq adapter (applier/engine/apply_pipeline.cpp) reads the log,
// asks the target, sends statements and reads answers; this class decides:
//
//   which transactions join a batch  the leading whole transactions read from the log, in order:
//                    duplicates join (nothing is sent for them); a plain first apply joins while
//                    the batch stays within its transaction and statement bounds; the first
//                    transaction that needs anything else (a conflict, a quarantined or
//                    replay-ready boundary, a plan the planner or the target's schema refuses, a
//                    transaction larger than a whole batch) closes the batch and is handled alone.
//   grouped batches  with PipelineLimits::group_transactions the batch is one target transaction:
//                    every transaction of it commits, or none does. After a failure nothing retires
//                    and the same transactions form per-transaction batches (below) until they
//                    have retired, so the failing one is found and handled exactly as without
//                    grouping; an answer mixing committed and failed transactions is refused.
//   in-order retirement after a failure  a failure in transaction k of a batch: every entry before
//                    k is retired (committed or duplicate); k is handed to the one-at-a-time path;
//                    everything after k was skipped by the server (the whole batch is one pipeline
//                    segment ended by one Sync) and stays queued for the next batch. An answer that
//                    claims a commit after a failure in the same batch is refused loudly.
//   which evidence a batch is formed on  the target's evidence (dedup rows, quarantine rows, origin
//                    progress) is read in its own round trip before the batch, or — only for a
//                    grouped batch of transactions all past what the target is known to hold —
//                    assumed to be "never seen" and checked by the target inside the batch's own
//                    target transaction (EvidenceFor, below). Evidence a batch trusts always
//                    reflects every target transaction committed before it: a read happens after
//                    the previous batch's answers were collected (at most one batch in flight),
//                    and the in-transaction check runs after the batch's BEGIN.
//   how far the consumer offset may move  an entry's offset is reported to the offset tracker
//                    only when it retires, in log order, with its commit LSN as the durability
//                    requirement; records read after the last queued transaction (chunks of an
//                    open chunked transaction, progress markers) are reported only once every
//                    transaction before them has retired, and only up to what the caller says is
//                    retained (TransactionBarrier::RetainFromOffset: never past the first frame of
//                    an open chunked transaction). ApplyOffsetTracker then lets the offset pass
//                    only what the target reports flushed.
//
// At most one batch is in flight. Nothing here talks to a server or reads a clock; it never
// retires a transaction that did not commit and was not a duplicate, never reorders, and never
// lets the offset pass a transaction that has not retired.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trellara/apply/apply_decision.h"
#include "trellara/apply/apply_plan.h"
#include "trellara/apply/group_rewrite.h"
#include "trellara/log/barrier.h"
#include "trellara/base/result.h"

namespace trellara {

// Statements a transaction costs in a batch beyond its planned changes: BEGIN, the snapshot
// registry check (trellara.control_check, docs/snapshot.md), the dedup row with the origin
// progress, COMMIT.
inline constexpr size_t kBatchStatementsPerTransaction = 4;

struct PipelineLimits {
  size_t batch_transactions_max = 256;  // transactions in one batch
  // Statements queued in one batch: kBatchStatementsPerTransaction per target transaction included
  // (a grouped batch's BEGIN, registry check, dedup rows and COMMIT count once), plus at most one statement
  // that guards superseded updates (FindSupersededUpdates).
  size_t batch_statements_max = 1024;
  // Grouped batches: the batch's transactions share one target transaction — each
  // keeps its own dedup row, the origin progress is the last one's — so a batch commits all or
  // nothing. A grouped batch that fails retires nothing and its transactions are formed again one
  // target transaction each (the per-transaction rules below), which finds the failing one
  // exactly; grouping resumes once they have retired.
  bool group_transactions = false;
};

// A whole (unchunked) transaction read from the log and waiting for its batch.
struct PipelineTx {
  ReadyTransaction ready;
  uint64_t offset_after = 0;      // the consumer offset that is safe once it is applied
  std::vector<ChangePlan> plans;  // the adapter's plans, filled while a batch is formed
  bool duplicate = false;         // admitted as already applied: nothing is sent for it
  size_t snapshot_in_copy = 0;    // row changes the adapter left out because a snapshot copy holds them
  size_t superseded = 0;          // plans left out of its grouped batch (FindSupersededUpdates)
  size_t merged = 0;              // plans sent inside merged statements of its group (MergeGroupStatements)
};

// What the adapter found out about a candidate of the batch being formed.
enum class Admission : uint8_t {
  Duplicate,  // DecideApply said SkipDuplicate
  Apply,      // a plain first apply, planned and accepted by the target's schema
  Alone,      // anything else: the one-at-a-time path decides, retries or quarantines
};

// Where the evidence of the batch being formed comes from.
enum class EvidenceSource : uint8_t {
  // One round trip before the batch, in autocommit, after the previous batch's answers were read.
  Read,
  // No round trip: every candidate is taken as never seen (no dedup row, no quarantine row, origin
  // progress below it) and the batch — grouped, one target transaction — carries the target's check
  // of exactly that as its first statement after the registry check (trellara.require_unapplied,
  // SQLSTATE TR012). The check runs inside the batch's transaction, after everything committed
  // before it; if it refuses, nothing of the batch commits and the same transactions go again
  // one target transaction each on read evidence.
  Assumed,
};

// What the pipeline wants next.
enum class PipelineStep : uint8_t {
  Idle,     // nothing queued
  Collect,  // a batch is in flight: read its answers, then Collect()
  Alone,    // the front transaction goes through the one-at-a-time path, then RetireAlone()
  Form,     // form the next batch: Candidates(), Admit() in order, Seal()
};

struct CollectOutcome {
  std::vector<PipelineTx> retired;  // in log order: committed or duplicate
  std::optional<size_t> failed;     // index (in the batch) of the transaction that failed; it is
                                    // now the front and goes alone
};

class ApplyPipeline {
 public:
  ApplyPipeline(uint64_t start_offset, PipelineLimits limits);

  // ---- what the log yields, in log order ----
  // A whole transaction; `offset_after` is the offset that is finished with once it is applied.
  void ReadWhole(ReadyTransaction ready, uint64_t offset_after);
  // Records that complete no transaction; everything below `retain_offset` is finished with once
  // the transactions before it are (the caller passes RetainFromOffset or the next offset).
  void ReadNothing(uint64_t retain_offset);
  // A chunked transaction the caller applied alone (or skipped as a duplicate) with nothing
  // queued: every record below `offset_after` is finished with once `commit_lsn` is durable.
  Status AppliedAlone(uint64_t offset_after, uint64_t commit_lsn);

  // ---- state ----
  PipelineStep Next() const;
  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  size_t in_flight() const { return in_flight_; }
  size_t unsent() const { return queue_.size() - in_flight_; }
  bool alone() const { return alone_; }
  // Enough transactions wait for a full batch.
  bool full() const { return unsent() >= limits_.batch_transactions_max; }
  PipelineTx& at(size_t index) { return queue_.at(index); }
  const PipelineTx& at(size_t index) const { return queue_.at(index); }
  PipelineTx& front() { return queue_.front(); }

  // ---- forming a batch (Next() == Form) ----
  // How many leading transactions the adapter classifies, in order.
  size_t Candidates() const;
  // The adapter's verdict on candidate `index` (0, 1, 2, ... in order); `planned_statements` is the
  // number of planned changes of an Apply. Returns whether the next candidate may still join.
  bool Admit(size_t index, Admission admission, size_t planned_statements);
  // Closes the batch: the admitted transactions are in flight (Next() == Collect). Returns how many.
  size_t Seal();
  // Whether the sealed batch holds anything to send (not only duplicates).
  bool BatchSendsStatements() const;
  // Whether the sealed batch (or the one being formed) is one target transaction for all of its
  // transactions.
  bool grouped() const { return grouped_; }
  // The in-flight transactions a successful COMMIT answer for in-flight transaction `index`
  // commits, marked in `committed`: in a grouped batch the group's one COMMIT commits every member
  // (duplicates send nothing and are not marked); otherwise only `index`.
  void MarkCommitted(size_t index, std::vector<bool>& committed) const;
  // Transactions still to be formed one target transaction each after a grouped batch failed.
  size_t ungrouped_remaining() const { return ungrouped_remaining_; }

  // ---- evidence of a batch (Next() == Form) ----
  // Assumed only when: the batch will be grouped (group_transactions, not replaying a failed
  // group one transaction each); the target's evidence was read at least once since the pipeline
  // started or since an assumption was last refused; and every candidate is whole (not a
  // partitioned transaction, whose staged chunks need the read) with a commit LSN above
  // known_applied_lsn() and above every earlier candidate's. Otherwise Read. A wrong assumption
  // costs a rolled-back batch, never a wrong apply: the target checks it before anything commits.
  EvidenceSource EvidenceFor() const;
  // The adapter read the target's evidence: `checkpoint_lsn` is the origin progress it holds.
  void EvidenceRead(uint64_t checkpoint_lsn);
  // The batch being formed is formed on assumed evidence (EvidenceFor() == Assumed): the adapter
  // sends the target's check with it. Call before the first Admit.
  void AssumeEvidence();
  // Whether the sealed batch (or the one being formed) was formed on assumed evidence.
  bool evidence_assumed() const { return assumed_; }
  // The highest commit LSN the target is known to hold for the flow: the origin progress last read,
  // or a transaction retired since (committed or a duplicate). Only decides whether assuming is
  // worth it; the target's own check decides whether the assumption holds.
  uint64_t known_applied_lsn() const { return known_applied_lsn_; }

  // ---- answers (Next() == Collect) ----
  // committed[k]: the COMMIT of in-flight transaction k succeeded (ignored for duplicates). An
  // answer that claims a commit after a failed transaction of the batch is refused with an error
  // naming both; nothing is retired past the failure.
  Result<CollectOutcome> Collect(const std::vector<bool>& committed);

  // ---- one at a time (Next() == Alone) ----
  // The front transaction was handled alone (applied, or a duplicate): it retires.
  PipelineTx RetireAlone();

  // ---- consumer offset ----
  // The largest offset the consumer may record when the target has flushed up to `flushed_lsn`.
  uint64_t DurableOffset(uint64_t flushed_lsn) { return offsets_.Durable(flushed_lsn); }
  uint64_t safe_offset() const { return offsets_.safe(); }
  size_t offsets_waiting() const { return offsets_.waiting(); }
  // Negative control only (defect.apply_ack_before_commit): treats everything read so far as
  // finished, as an applier that acknowledges on read would. Never called otherwise.
  void DefectTreatEverythingReadAsDone();

 private:
  PipelineTx PopFront(uint64_t required_lsn);
  Result<CollectOutcome> CollectGrouped(const std::vector<bool>& committed);
  size_t CandidateCount() const;

  PipelineLimits limits_;
  std::deque<PipelineTx> queue_;  // whole transactions read, not yet retired, in log order
  size_t in_flight_ = 0;          // leading entries of queue_ sent as one batch
  bool alone_ = false;            // queue_.front() needs the one-at-a-time path
  // Forming a batch.
  size_t admitted_ = 0;
  size_t admitted_statements_ = 0;
  uint64_t batch_max_commit_lsn_ = 0;  // of the transactions admitted to apply in the batch being formed
  bool closed_ = false;
  bool grouped_ = false;              // the batch being formed or in flight is one target transaction
  size_t ungrouped_remaining_ = 0;    // leading queue entries that go per transaction (after a group failed)
  std::optional<uint64_t> retain_after_queue_;  // ReadNothing after the last queued transaction
  bool evidence_read_ = false;        // the target's evidence was read since start or the last refusal
  bool assumed_ = false;              // the batch being formed or in flight is formed on assumed evidence
  uint64_t known_applied_lsn_ = 0;
  ApplyOffsetTracker offsets_;
};

}  // namespace trellara
