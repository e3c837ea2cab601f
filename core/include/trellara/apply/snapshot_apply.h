// snapshot_apply.h — the applier's side of the snapshot handoff and of holds (docs/snapshot.md
// "The applier's rule", "Verify and filtered reseed: holds"), as pure functions: which key value
// places a row change in a chunk, the change that executes one half of a key-moving UPDATE, the
// statement that deletes a chunk's key range (TRUNCATE of a table under snapshot), and when the
// applier stops at a hold. The decisions themselves (VisibleIn, ChunkOf, DecideSnapshotChange) are
// in snapshot.h; the applier (applier/engine/apply_snapshot.cpp) reads the registry and executes.
//
// Nothing here talks to a database: every function is a specification a unit test can reach. It
// never guesses a key: a value that is not a 64-bit integer in the key column is an error naming
// the relation, the column and the value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/apply/apply_plan.h"
#include "trellara/record/envelope.h"
#include "trellara/base/result.h"
#include "trellara/apply/snapshot.h"

namespace trellara {

// Which row of a change: the old row (DELETE, the old side of an UPDATE) or the new row (INSERT,
// the new side of an UPDATE).
enum class RowSide : uint8_t { Old, New };

// The index of `key_column` in `relation.columns`; an error names the relation and the column when
// the relation (as the source described it in the record) has no such column.
Result<size_t> KeyColumnIndex(const RelationInfo& relation, const std::string& key_column);

// The value of the chunk key column (`column_index`, from KeyColumnIndex) in the `side` row of
// `change`, parsed as a 64-bit integer (the chunked key types are int2/int4/int8). The old row is
// read from the old key image (the column must then be a replica identity column), the full old
// image, or — an UPDATE without an old image, whose key did not change — the new tuple. An error
// names the change, the relation, the column and the value when there is no integer there.
Result<int64_t> ChunkKeyOf(const Change& change, const RelationInfo& relation, size_t column_index, RowSide side);

// The DELETE of the old row of UPDATE `update` (RowAction::DeleteOldOnly): its old image (key or
// full), or — without one — the key columns of its new tuple as the old key image.
Result<Change> OldRowDelete(const Change& update, const RelationInfo& relation);

// The INSERT of the new row of UPDATE `update` (RowAction::InsertNewOnly). An INSERT needs every
// value: when the new tuple carries an unchanged-TOAST marker (the value was not sent) the error
// names the column — the applier quarantines that as snapshot_partial_update.
Result<Change> NewRowInsert(const Change& update, const RelationInfo& relation);

// DELETE FROM "schema"."table" WHERE key >= $1 AND key < $2 (bounds left out when unbounded; no
// WHERE at all for an unbounded range): what a TRUNCATE of a table under snapshot does in a chunk
// where it applies. RowExpectation::Any; the statement key depends on the shape only.
// The target's rows of a chunk range: a plain table with ONLY, a partitioned one without
// (apply_plan.h PartitionedOnTarget).
Result<ChangePlan> PlanRangeDelete(const RelationInfo& relation, const std::string& key_column, const ChunkRange& range,
                                   bool partitioned = false);

// A TRUNCATE of a partitioned table some of whose partitions are under snapshot (the snapshot
// copies partitions; the record names the partitioned table, which the target truncates whole).
// `halves` holds the rule's answer (DecideHalf) for every chunk of every such partition:
//   TruncateWhole        every chunk's copy misses the TRUNCATE: truncate the table as captured;
//   DeleteOutsideCopied  every chunk's copy holds it (or will: pending chunks): only the other
//                        partitions are emptied (PlanDeleteOutsidePartitions), the copies stay;
//   Mixed                some copies hold it and some do not: the applier cannot express that
//                        with one statement and fails closed (the transaction is quarantined).
enum class RootTruncate : uint8_t { TruncateWhole, DeleteOutsideCopied, Mixed };
RootTruncate DecideRootTruncate(const std::vector<HalfDecision>& halves);

// DELETE FROM "schema"."root" WHERE tableoid <> ALL ($1::pg_catalog.regclass[]), $1 the quoted
// names of `partitions` ("schema.name" each, the partitions whose copies already hold the
// TRUNCATE): what such a TRUNCATE does to the target's other partitions. RowExpectation::Any.
Result<ChangePlan> PlanDeleteOutsidePartitions(const RelationInfo& root, const std::vector<std::string>& partitions);

// ---- holds ----------------------------------------------------------------------------

// What the applier does about a requested hold at `hold_lsn` (apply_holds.lsn: stop right before
// the first transaction with commit LSN > hold_lsn).
enum class HoldStep : uint8_t {
  NotYet,  // transactions at or below hold_lsn may still come: go on
  Reach,   // stop here: mark it reached and wait on the hold lock
  Passed,  // the target already holds a transaction after hold_lsn: mark it passed
};
struct HoldFacts {
  uint64_t hold_lsn = 0;
  // The highest commit LSN the target holds (origin progress): above hold_lsn means passed.
  uint64_t applied_lsn = 0;
  // Whether every transaction read so far is committed (or skipped) and retired.
  bool drained = false;
  // The commit LSN of the next transaction to apply (or skip), when one is waiting.
  std::optional<uint64_t> next_commit_lsn;
  // How far the log read so far covers the source (the LSN of the last transaction end or progress
  // marker read); meaningful with `drained` and nothing waiting.
  uint64_t covered_lsn = 0;
};
HoldStep DecideHold(const HoldFacts& facts);

}  // namespace trellara
