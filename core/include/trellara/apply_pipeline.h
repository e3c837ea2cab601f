// apply_pipeline.h — the applier's batch pipeline rules, as a pure state machine (DESIGN §2
// "log -> target", §6 throughput). The libpq adapter (applier/apply_pipeline.cpp) reads the log,
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

#include "trellara/apply_decision.h"
#include "trellara/apply_plan.h"
#include "trellara/barrier.h"
#include "trellara/result.h"

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
  // Grouped batches (issue 14): the batch's transactions share one target transaction — each
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
  // Transactions still to be formed one target transaction each after a grouped batch failed.
  size_t ungrouped_remaining() const { return ungrouped_remaining_; }

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
  bool closed_ = false;
  bool grouped_ = false;              // the batch being formed or in flight is one target transaction
  size_t ungrouped_remaining_ = 0;    // leading queue entries that go per transaction (after a group failed)
  std::optional<uint64_t> retain_after_queue_;  // ReadNothing after the last queued transaction
  ApplyOffsetTracker offsets_;
};

// ---- superseded updates in a grouped batch (docs/apply.md "Superseded updates in a group") ----
//
// A grouped batch commits all of its source transactions in one target transaction, so no one ever
// sees the row an UPDATE leaves when a later UPDATE of the same group overwrites it: the adapter
// sends only the later one. UPDATE plan P of the group is superseded when a later UPDATE plan Q of
// the group (in log order, the same transaction or a later one)
//   - has P's row_key (same relation, same key values, key unchanged by both) and P's
//     statement_key (the same SET columns, so Q assigns every value P assigned), and
//   - no plan between P and Q writes P's relation otherwise (an INSERT, a DELETE, a key-changing or
//     key-less UPDATE of it, a TRUNCATE of anything, or a plan without a target relation): only
//     key-preserving UPDATEs of the relation come between, so its rows are the same set at P and at
//     Q, and Q's row-count check (exactly one row) stands for P's;
//   - neither P's relation nor the relation of any plan between P and Q is in `refused`: the target
//     fires triggers or rules for replicated changes of those, and such a trigger may read any
//     table — P's row included — so it must run against exactly the rows in-order apply would
//     show it (the adapter learns these relations from the target's refusal, below).
// A chain P1, P2, .., Pn of such UPDATEs leaves Pn only. Nothing else is ever superseded, and
// ungrouped batches (one target transaction per source transaction) never call this.
//
// `relations` lists every relation written from some superseded P to its Q, both included: the
// adapter's guard before COMMIT refuses the group (TR011) if the target fires a trigger or rule for
// replicated changes of any of them — an UPDATE trigger of P's relation would miss P, and a
// trigger of another relation written between P and Q could read P's row without P. A write
// outside every such span sees the rows in-order apply would show it, and a refused relation is
// never inside one (its write ends every chain), so the guard never refuses a group for a
// relation already refused.
struct SupersededUpdates {
  std::vector<std::vector<bool>> superseded;  // [transaction of the group][plan]: not sent
  size_t count = 0;                           // plans superseded
  std::vector<std::string> relations;         // written inside a P..Q span, sorted, unique (empty when count == 0)
};
SupersededUpdates FindSupersededUpdates(const std::vector<const std::vector<ChangePlan>*>& group,
                                        const std::set<std::string>& refused);

// ---- merged statements in a grouped batch (docs/apply.md "Merged statements in a group") ----
//
// A grouped batch is one target transaction, so only the order of writes of the same relation is
// seen once it commits; the order between writes of different relations is seen only by what fires
// inside the transaction — triggers and rules for replicated changes (the guard below refuses the
// group for them; foreign keys do not fire under session_replication_role = replica) and a
// relation that shares a table with another one on the target (a partition or inheritance child
// of it: the guard refuses that too). MergeGroupStatements therefore sends the plans the group
// sends (not NotApplied, not superseded) as statements in this order:
//   - a run is a relation's consecutive writes (no other write of that relation between them;
//     writes of other relations may be) that are all INSERTs of one statement_key with values, or
//     all key-preserving UPDATEs (UpdateBatchable) of one statement_key in `update_shapes` (the
//     shapes the target accepted for one statement: trellara.batch_column_types) matching no row
//     twice, of at most limits.rows_max rows and limits.bytes_max bytes of values (PlanParamBytes;
//     a plan larger than that alone is never merged) — an INSERT run: at most limits.params_max
//     values;
//   - a run of at least limits.insert_rows_min INSERTs or limits.update_rows_min UPDATEs is one
//     merged statement, sent where the run ends: just before the relation's next write that does
//     not join it, after its last member when it is full, at a barrier, or at the end of the
//     group, so the relation's writes keep their order;
//   - a barrier ends every run before it: a TRUNCATE, a plan without a target relation, or a plan
//     of a relation in `refused` (its trigger may read any table, so everything before it is sent
//     before it, in order); a refused relation's plans never merge;
//   - every other plan (and the members of a run too short to merge) is one statement at its own
//     position.
// `relations` lists every relation written from a merged run's first member to where it is sent
// (the run's own included), for the guard before COMMIT, as SupersededUpdates::relations does.
struct PlanRef {
  size_t tx = 0;    // the transaction's index in the group
  size_t plan = 0;  // the plan's index in that transaction's plans
  bool operator==(const PlanRef& other) const { return tx == other.tx && plan == other.plan; }
};
enum class GroupStatementKind : uint8_t { Single, InsertRows, UpdateRows };
struct GroupStatement {
  GroupStatementKind kind = GroupStatementKind::Single;
  std::vector<PlanRef> plans;  // Single: one; merged: the run's members in log order
};
struct MergeLimits {
  size_t rows_max = 1000;         // rows in one merged statement
  size_t params_max = 65535;      // values bound to one merged INSERT (the protocol's limit)
  size_t bytes_max = kUpdateBatchBytesMax;  // bytes of values in one merged statement (PlanParamBytes)
  size_t insert_rows_min = 2;     // shorter INSERT runs are sent plan by plan
  size_t update_rows_min = 8;     // shorter UPDATE runs are sent plan by plan
};
struct GroupStatements {
  std::vector<GroupStatement> statements;  // in the order they are sent
  size_t merged = 0;                       // plans sent inside merged statements
  std::vector<std::string> relations;      // written inside a merged run's span, sorted, unique
};
// `superseded` is FindSupersededUpdates' result for the same group (or empty: nothing left out).
GroupStatements MergeGroupStatements(const std::vector<const std::vector<ChangePlan>*>& group,
                                     const std::vector<std::vector<bool>>& superseded,
                                     const std::set<std::string>& refused,
                                     const std::set<std::string>& update_shapes, const MergeLimits& limits = {});
// The UPDATE shapes of a group worth asking the target about for MergeGroupStatements'
// update_shapes: each statement_key with at least limits.update_rows_min key-preserving UPDATEs
// (UpdateBatchable) that are sent (not superseded) and not of a `refused` relation, with its first
// such plan (the one to describe the shape by), in statement_key order.
std::vector<std::pair<std::string, const ChangePlan*>> MergeUpdateCandidates(
    const std::vector<const std::vector<ChangePlan>*>& group, const std::vector<std::vector<bool>>& superseded,
    const std::set<std::string>& refused, const MergeLimits& limits = {});
// Whether a plan can be a member of an INSERT run: an INSERT with values, each bound to a column.
bool InsertMergeable(const ChangePlan& plan);
// The merged INSERT of `rows` (InsertMergeable, one statement_key, rows.size() >= 1):
//   WITH trellara_rows AS (INSERT INTO "s"."t" ("a", ..) OVERRIDING SYSTEM VALUE
//        VALUES ($1, ..), ($m+1, ..) .. RETURNING 1)
//   SELECT CASE WHEN count(*) = N THEN NULL ELSE trellara.require_rows(count(*), N) END FROM trellara_rows
// with every row's values bound in order (`params`): each row is inserted exactly once or the target
// raises (TR002), as the one-row check does for one INSERT.
struct MergedInsert {
  std::string sql;
  std::vector<std::optional<std::string>> params;
};
Result<MergedInsert> MergedInsertSql(const std::vector<const ChangePlan*>& rows);

// The guard's refusal (SQLSTATE TR011) names, in DETAIL, the 1-based positions in `guarded` (the
// relations it was called with) of those whose target fires triggers or rules for replicated
// changes: "2" or "1,3". Adds them to `refused` and returns how many were new. A DETAIL naming none
// of them (a guard function from another version) refuses every guarded relation, so the same
// group is never refused again and again.
size_t LearnRefusedRelations(const std::string& detail, const std::vector<std::string>& guarded,
                             std::set<std::string>& refused);

}  // namespace trellara
