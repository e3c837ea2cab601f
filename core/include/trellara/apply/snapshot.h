// snapshot.h — the decisions of the initial copy and its handoff to the stream (DESIGN §2
// "snapshot -> stream", docs/snapshot.md): source snapshots and transaction visibility, the
// key-range chunks of a table, the states of runs and tables, and the applier's rule for a
// streamed change of a table being copied. Pure: no Postgres, no libpq, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/record/envelope.h"
#include "trellara/base/result.h"

namespace trellara {

// ---- source snapshots ------------------------------------------------------------------

// A source MVCC snapshot as pg_current_snapshot() prints it: "xmin:xmax:xip1,xip2,..." with
// 64-bit (epoch-qualified) transaction ids.
struct SourceSnapshot {
  uint64_t xmin = 0;
  uint64_t xmax = 0;
  std::vector<uint64_t> xip;  // sorted, each in [xmin, xmax)
  bool operator==(const SourceSnapshot&) const = default;
};

// Parses pg_snapshot text; an error names what is wrong with it.
Result<SourceSnapshot> ParseSourceSnapshot(const std::string& text);
std::string FormatSourceSnapshot(const SourceSnapshot& s);

// Whether the committed top-level transaction `xid` (the 32-bit xid an envelope carries) is visible
// in `s`, i.e. its changes are in whatever was read in `s`. The 32-bit xid is widened to the 64-bit
// id nearest to the snapshot's xmax (circular comparison, valid within 2^31 transactions).
bool VisibleIn(const SourceSnapshot& s, uint32_t xid);
// The same for a 64-bit (epoch-qualified) transaction id, as pg_xact_status and pg_snapshot_xip
// print them: exact, no widening.
bool VisibleIn64(const SourceSnapshot& s, uint64_t xid);

// The 64-bit id of a 32-bit xid as pg_stat_activity.backend_xid prints it: the one nearest to s's
// xmax (a transaction in progress when `s` was taken is within 2^31 of it).
uint64_t WidenXid(const SourceSnapshot& s, uint32_t xid);

// ---- chunks ----------------------------------------------------------------------------

// One key range [lo, hi) of a table's leading key column; nullopt = unbounded on that side. A table
// that cannot be split has exactly one chunk with both bounds unbounded.
struct ChunkRange {
  int32_t chunk_no = 0;
  std::optional<int64_t> lo;
  std::optional<int64_t> hi;
  bool operator==(const ChunkRange&) const = default;
};

// Splits [min_key, max_key] into ranges of about `rows_per_chunk` rows given `estimated_rows`
// (evenly by key value). The first range is unbounded below, the last unbounded above, ranges are
// contiguous and disjoint, so every int64 key falls in exactly one. At least one range; with no
// rows (estimated_rows == 0 or min/max unknown) a single unbounded range.
std::vector<ChunkRange> PlanChunkRanges(std::optional<int64_t> min_key, std::optional<int64_t> max_key,
                                        uint64_t estimated_rows, uint64_t rows_per_chunk);

// The chunk_no of the range holding `key` in `ranges` (as PlanChunkRanges made them, sorted by
// lo); nullopt if none does (the ranges are not a partition: a corrupted registry).
std::optional<int32_t> ChunkOf(const std::vector<ChunkRange>& ranges, int64_t key);

// Whether a key column type (pg_type.typname) can be split into ranges: int2, int4, int8.
bool SplittableKeyType(const std::string& type_name);

// ---- states ----------------------------------------------------------------------------

enum class SnapshotState : uint8_t { Pending, Copying, Copied, HandoffReady, FailedRecoverable };
const char* SnapshotStateName(SnapshotState s);  // "pending", "copying", "copied", "handoff_ready", "failed_recoverable"
Result<SnapshotState> ParseSnapshotState(const std::string& name);

// Whether a run or table may move from `from` to `to`: forward along pending -> copying -> copied
// -> handoff_ready, into failed_recoverable from pending/copying/copied, out of it to copying; the
// same state is allowed (idempotent). Anything else is refused unless `force`, with a message
// naming both states and `--force`.
Status CheckSnapshotTransition(SnapshotState from, SnapshotState to, bool force, const std::string& what);

// What `trellara snapshot` does with one table of the flow, given the target's row for it
// (nullopt: never registered): register it New, Resume its unfinished copy in the same run, Skip
// it (copied by this run already, or by an earlier finished run when no run was named), or
// Reregister it under this run (back to pending, copied again). A move backwards needs --force
// (CheckSnapshotTransition); a table of another unfinished run, or withheld by a DDL (run
// "ddl@<commit LSN>", docs/schema-changes.md), is refused with the command that resumes or
// re-copies it.
enum class SnapshotRegistration : uint8_t { New, Resume, Skip, Reregister };
struct RegisteredTable {  // the target's trellara.snapshot_tables row
  std::string run_id;
  SnapshotState state = SnapshotState::Pending;
};
struct RegistrationRequest {
  std::string run_id;         // the run registering now
  bool run_id_named = false;  // --run-id was given
  bool force = false;         // --force
  std::string flow;           // for messages
  std::string config_path;    // for the command in a refusal
};
Result<SnapshotRegistration> DecideRegistration(const std::string& table, const std::optional<RegisteredTable>& row,
                                                const RegistrationRequest& request);

// ---- the applier's rule ----------------------------------------------------------------

// What the applier knows of one chunk.
struct ChunkView {
  enum class Kind : uint8_t { Unknown, Pending, Copied } kind = Kind::Unknown;
  SourceSnapshot snapshot;  // Copied: the snapshot the chunk was read in
  // Copied: the source's WAL insert position read right after the snapshot was taken
  // (snapshot_chunks.snapshot_lsn; nullopt for a chunk copied by a release that did not record it).
  // A transaction visible in the snapshot had inserted its commit record before it was taken, so a
  // commit LSN (the end of the commit record) past this position is never in the copy — decided
  // without comparing 32-bit xids, which wrap.
  std::optional<uint64_t> snapshot_lsn;
};

// The decision for one half of a row change (the old row's side, or the new row's side).
enum class HalfDecision : uint8_t {
  Apply,     // the copy does not hold this transaction's effect on the row: apply it
  InCopy,    // the copy already holds it: leave it out
  Skip,      // the chunk is pending: leave it out and record the skip (xid) for the chunk
  NeedState, // the chunk's state is unknown: read it (FOR SHARE) and decide again
};
// `commit_lsn` is the end of the transaction's commit record (the envelope's commit_lsn).
HalfDecision DecideHalf(const ChunkView& chunk, uint32_t xid, uint64_t commit_lsn);

// The commit LSN from which a table's copy is over for the stream (docs/snapshot.md "Retirement"):
// every chunk copied with a recorded snapshot_lsn, the highest of them; nullopt while any chunk is
// pending, unknown, or copied without one. A transaction committed past it is applied as if the
// table had never been copied — its key column need not exist any more (a rename after the copy).
std::optional<uint64_t> RetiredFrom(const std::vector<ChunkView>& chunks);

// What to execute for a streamed INSERT/UPDATE/DELETE of a table under snapshot.
enum class RowAction : uint8_t {
  Apply,          // the change as planned
  Drop,           // nothing (every half left out)
  DeleteOldOnly,  // an UPDATE whose new row is in the copy but whose old row is not: DELETE old key
  InsertNewOnly,  // an UPDATE whose old row is gone in the copy but whose new row is not: INSERT new row
  NeedState,      // read the state of `need_old` / `need_new` chunk and decide again
};
struct RowDecision {
  RowAction action = RowAction::Apply;
  bool skip_old = false;  // record a skip for the old side's chunk
  bool skip_new = false;  // record a skip for the new side's chunk
  bool need_old = false;
  bool need_new = false;
};
// `old_chunk` is the chunk of the old key (DELETE, UPDATE), `new_chunk` of the new row (INSERT,
// UPDATE); for an UPDATE that keeps its key pass the same chunk for both.
RowDecision DecideSnapshotChange(Op op, uint32_t xid, uint64_t commit_lsn, const std::optional<ChunkView>& old_chunk,
                                 const std::optional<ChunkView>& new_chunk);

// ---- verify ----------------------------------------------------------------------------

// Splits a mismatching key range [lo, hi) holding `rows` rows (max of both sides) into halves until
// each holds at most `max_rows` (1 000): the next ranges to compare. Empty when `rows <= max_rows`
// (the range itself is reported).
std::vector<ChunkRange> SplitForNarrowing(const ChunkRange& range, uint64_t rows, uint64_t max_rows,
                                          std::optional<int64_t> min_key, std::optional<int64_t> max_key);

}  // namespace trellara
