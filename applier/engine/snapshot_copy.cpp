// snapshot_copy.cpp — the copy of one chunk and the workers that run it (snapshot_copy.h). The
// steps and their order are docs/snapshot.md "The copy of one chunk"; the reasons are there.
#include "trellara/base/cadence.h"
#include "engine/snapshot_copy.h"

#include <sstream>
#include <thread>

#include "kit/errors.h"
#include "pg/session.h"
#include "trellara/apply/apply_plan.h"
#include "trellara/apply/apply_retry.h"
#include "trellara/base/fault.h"

namespace trellara::cli::snapshot {
namespace {

constexpr uint32_t kMaxTransientAttempts = 10;    // per chunk, then the table is failed_recoverable
constexpr int kMaxSnapshotAttempts = 300;     // step 3: a snapshot that sees every skip
constexpr auto kSnapshotRetryWait = cadence::kSnapshotRetryWait;

// A failed step of a chunk's copy.
struct ChunkFailure {
  std::string message;
  bool transient = false;
};

ChunkFailure Failure(PgConnection& conn, const PgResult& r, const std::string& what) {
  return {what + " failed on " + conn.Describe() + ": " + r.Describe(),
          IsTransientFailure(r.sqlstate(), conn.connection_lost())};
}

PgResult Must(PgConnection& conn, PgResult r, const std::string& what) {
  if (!r.ok()) throw Failure(conn, r, what);
  return r;
}

// "key >= lo AND key < hi" (a missing bound is unbounded); "" for an unbounded chunk.
std::string RangePredicate(const SnapshotTable& t, const ChunkRange& c) {
  if (!t.key_column) return "";
  std::string p;
  if (c.lo) p = t.key_quoted + " >= " + std::to_string(*c.lo);
  if (c.hi) p += (p.empty() ? "" : " AND ") + t.key_quoted + " < " + std::to_string(*c.hi);
  return p;
}

struct Sessions {
  std::unique_ptr<PgConnection> source, target;
};

void Connect(const CopyContext& ctx, Sessions& s, int worker_no) {
  const std::string app = "trellara-snapshot/" + ctx.config.flow_name + "/" + std::to_string(worker_no);
  try {
    if (!s.target) {
      s.target = ConnectPinned(ctx.config, ctx.config.target_conninfo, "target", app);
      // The copy writes as the applier does: triggers and FKs behave as for the applier's writes.
      PgResult role = s.target->Exec("SET session_replication_role = " + std::string(SettingValue(ctx.config.session_replication_role)));
      if (!role.ok()) {
        ChunkFailure f = Failure(*s.target, role,
                                 "SET session_replication_role = " + std::string(SettingValue(ctx.config.session_replication_role)) +
                                     " (apply.session_replication_role in " + ctx.config.path +
                                     "; 'replica' needs a superuser or a role granted SET on it)");
        s.target.reset();
        throw f;
      }
    }
    if (!s.source) s.source = ConnectPinned(ctx.config, ctx.config.source_conninfo, "source", app);
  } catch (const CommandFailed& e) {
    throw ChunkFailure{e.what(), true};
  }
}

// Step 2: the source transactions committed but not visible to new snapshots yet — commits waiting
// for a synchronous standby (docs/snapshot.md "The copy of one chunk"). Their commit records are
// flushed, so the stream may have applied them, yet the source still reports them in progress
// (pg_xact_status too: it asks the process array first); pg_stat_activity shows them waiting on
// SyncRep. Only a superuser or a member of pg_read_all_stats sees other roles' wait events: any
// other role copies only from a source without synchronous standbys, and is told so otherwise.
std::vector<uint64_t> UnfinishedCommits(PgConnection& source, const std::string& chunk_name) {
  auto r = Must(source,
                source.Exec("SELECT pg_current_snapshot()::text, current_setting('synchronous_standby_names'), "
                            "coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), false) "
                            "OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER'), "
                            "coalesce((SELECT string_agg(backend_xid::text, ',') FROM pg_catalog.pg_stat_activity "
                            "WHERE wait_event = 'SyncRep' AND backend_xid IS NOT NULL), '')"),
                "reading which source commits wait for a synchronous standby, before the snapshot of " + chunk_name);
  auto now = ParseSourceSnapshot(r.Value(0, 0).value_or(""));
  if (!now) throw ChunkFailure{"the source snapshot before " + chunk_name + " is unreadable: " + now.error().message, false};
  const std::string standbys = r.Value(0, 1).value_or("");
  if (r.Value(0, 2) != std::optional<std::string>("t") && !standbys.empty())
    throw ChunkFailure{"the source has synchronous standbys (synchronous_standby_names = '" + standbys +
                           "') and the snapshot's source role cannot see which commits wait for them (a commit "
                           "waiting is applied by the stream but invisible to the copy, which would then lose it): "
                           "GRANT pg_read_all_stats TO the role of [source] conninfo, then rerun",
                       false};
  std::vector<uint64_t> out;
  std::istringstream ids(r.Value(0, 3).value_or(""));
  for (std::string x; std::getline(ids, x, ',');)
    if (!x.empty()) out.push_back(WidenXid(*now, static_cast<uint32_t>(std::stoul(x))));
  return out;
}

enum class ChunkOutcome { Copied, AlreadyCopied };

// `rows`/`bytes` count what this attempt sent (the caller takes them back from the table's
// progress when the attempt fails: its transaction rolled back).
ChunkOutcome CopyChunk(const CopyContext& ctx, Sessions& s, const SnapshotTable& t, const ChunkRange& c,
                       TableProgress& progress, uint64_t& rows, uint64_t& bytes) {
  PgConnection& target = *s.target;
  PgConnection& source = *s.source;
  const std::string chunk_name = "chunk " + std::to_string(c.chunk_no) + " of " + t.name;
  const SqlParams keys{ctx.config.flow_name, t.schema, t.table, std::to_string(c.chunk_no)};

  // 1. The chunk row, locked until this transaction commits (the applier reads it FOR SHARE).
  Must(target, target.Exec("BEGIN"), "BEGIN for " + chunk_name);
  auto row = Must(target,
                  target.ExecParams("SELECT state FROM trellara.snapshot_chunks WHERE flow = $1 AND schema_name = $2 "
                                    "AND table_name = $3 AND chunk_no = $4 FOR UPDATE",
                                    keys),
                  "locking " + chunk_name);
  if (row.rows() != 1)
    throw ChunkFailure{chunk_name + " is no longer registered (a snapshot --force replaced the table's chunks "
                                    "while this run copied it)",
                       false};
  if (row.Value(0, 0) == std::optional<std::string>("copied")) {
    Must(target, target.Exec("ROLLBACK"), "ROLLBACK of " + chunk_name);
    return ChunkOutcome::AlreadyCopied;
  }
  auto skips = Must(target,
                    target.ExecParams("SELECT xid FROM trellara.snapshot_skips WHERE flow = $1 AND schema_name = $2 "
                                      "AND table_name = $3 AND chunk_no = $4",
                                      keys),
                    "reading the skipped transactions of " + chunk_name);

  // 2-3. A source snapshot that sees every commit that was waiting for a synchronous standby just
  // before it (flushed, so the stream may have applied it, and step 4 deletes what it wrote) and
  // every transaction the applier left out for this chunk. Its WAL insert position, read after it,
  // bounds the commits it can hold (core DecideHalf).
  const std::vector<uint64_t> unfinished = UnfinishedCommits(source, chunk_name);
  std::string snapshot_text, snapshot_lsn;
  bool told = false;
  for (int attempt = 1;; attempt++) {
    Must(source, source.Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"), "BEGIN on the source for " + chunk_name);
    auto snap = Must(source, source.Exec("SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text"),
                     "taking the source snapshot of " + chunk_name);
    snapshot_text = snap.Value(0, 0).value_or("");
    snapshot_lsn = snap.Value(0, 1).value_or("");
    auto parsed = ParseSourceSnapshot(snapshot_text);
    if (!parsed) throw ChunkFailure{"the source snapshot of " + chunk_name + " is unreadable: " + parsed.error().message, false};
    std::optional<std::string> unseen;
    std::string why;
    for (uint64_t xid : unfinished)
      if (!unseen && !VisibleIn64(*parsed, xid)) {
        unseen = std::to_string(xid);
        why = "is committed on the source but waits for a synchronous standby (see synchronous_standby_names and "
              "pg_stat_replication), invisible to new snapshots; the stream may have applied it, so the copy must "
              "see it";
      }
    for (int i = 0; i < skips.rows() && !unseen; i++) {
      const std::string xid = skips.Value(i, 0).value_or("0");
      if (!VisibleIn(*parsed, static_cast<uint32_t>(std::stoull(xid)))) {
        unseen = xid;
        why = "was left out of this chunk by the applier (trellara.snapshot_skips) and is not visible on the source "
              "yet (e.g. waiting for a synchronous standby)";
      }
    }
    if (!unseen) break;
    Must(source, source.Exec("ROLLBACK"), "ROLLBACK on the source for " + chunk_name);
    if (!told) {
      told = true;
      std::fprintf(stderr, "trellara: snapshot: %s waits: source transaction %s %s\n", chunk_name.c_str(),
                   unseen->c_str(), why.c_str());
    }
    if (attempt >= kMaxSnapshotAttempts)
      throw ChunkFailure{"no source snapshot of " + chunk_name + " sees transaction " + *unseen + ", which " + why +
                             " (last snapshot " + snapshot_text + "); rerun once it is visible",
                         true};
    std::this_thread::sleep_for(kSnapshotRetryWait);
  }

  // 4. Remove what the target holds in the range, then stream the source's rows into it. Each side
  // names a plain table with ONLY — the rows of its inheritance children are other tables' (the
  // snapshot copies each published child as a table of its own) — and a partitioned one without
  // (core apply_plan.h RowsTarget).
  const std::string predicate = RangePredicate(t, c);
  auto partitioned = Must(target, target.ExecParams("SELECT coalesce((SELECT relkind = 'p' FROM pg_catalog.pg_class "
                                                    "WHERE oid = to_regclass($1)), false)", {t.qualified}),
                          "reading how the target stores " + t.name);
  const bool target_partitioned = partitioned.Value(0, 0) == std::optional<std::string>("t");
  const std::string target_rows = RowsTarget(t.qualified, target_partitioned);
  const std::string in_range = predicate.empty() ? "" : " WHERE " + predicate;
  // Only when the range holds rows (a first copy into an empty table has nothing to delete). A
  // DELETE is refused on a table the target itself publishes for deletes without a replica identity
  // (a schema restored with pg_dump carries its publications): such a table has no key, so its one
  // chunk is the whole table, emptied with TRUNCATE ONLY instead (which no publication refuses).
  auto holds = Must(target,
                    target.ExecParams(
                        "SELECT EXISTS (SELECT 1 FROM " + target_rows + in_range + "), "
                        "  c.relreplident <> 'f' AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i "
                        "    WHERE i.indrelid = c.oid AND (i.indisreplident OR (c.relreplident = 'd' AND i.indisprimary))) "
                        "  AND EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables pt JOIN pg_catalog.pg_publication p "
                        "    ON p.pubname = pt.pubname WHERE p.pubdelete AND pt.schemaname = n.nspname AND pt.tablename = c.relname) "
                        "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE c.oid = to_regclass($1)",
                        {t.qualified}),
                    "reading whether the target holds rows of " + chunk_name);
  const bool has_rows = holds.Value(0, 0) == std::optional<std::string>("t");
  const bool delete_refused = holds.Value(0, 1) == std::optional<std::string>("t");
  if (has_rows && delete_refused && predicate.empty())
    Must(target, target.Exec("TRUNCATE " + target_rows), "emptying the target's " + t.name + " for " + chunk_name);
  else if (has_rows)
    Must(target, target.Exec("DELETE FROM " + target_rows + in_range), "deleting the target rows of " + chunk_name);
  std::string where = predicate;
  if (t.row_filter) where = (where.empty() ? "" : "(" + where + ") AND ") + "(" + *t.row_filter + ")";
  Must(source,
       source.StartCopy("COPY (SELECT " + t.columns + " FROM " + RowsTarget(t.qualified, t.source_partitioned) +
                        (where.empty() ? "" : " WHERE " + where) + ") TO STDOUT"),
       "COPY of " + chunk_name + " from the source");
  // A table without columns (CREATE TABLE t ()) holds rows too: COPY takes no column list then.
  Must(target, target.StartCopy("COPY " + t.qualified + (t.columns.empty() ? "" : " (" + t.columns + ")") + " FROM STDIN"),
       "COPY of " + chunk_name + " into the target");
  bool fault_hit = false;
  for (;;) {
    const char* data = nullptr;
    size_t length = 0;
    auto got = source.GetCopyData(&data, &length);
    if (!got) throw ChunkFailure{got.error().message + " (" + chunk_name + ")", true};
    if (*got == 0) break;
    Status put = target.PutCopyData(data, length);
    if (!put.ok()) throw ChunkFailure{put.error().message + " (" + chunk_name + ")", target.connection_lost()};
    rows++;
    bytes += length;
    progress.rows++;
    progress.bytes += length;
    if (!fault_hit) {
      fault_hit = true;
      fault::Hit("snapshot.during_table_copy");
    }
  }
  Must(source, source.FinishCopy(), "COPY of " + chunk_name + " from the source");
  if (!fault_hit) fault::Hit("snapshot.during_table_copy");
  Status end = target.PutCopyEnd();
  if (!end.ok()) throw ChunkFailure{end.error().message + " (" + chunk_name + ")", target.connection_lost()};
  Must(target, target.FinishCopy(), "COPY of " + chunk_name + " into " + t.name + " on the target");

  // 5. The chunk's state commits with its rows; then the source transaction ends.
  SqlParams done = keys;
  done.push_back(snapshot_text);
  done.push_back(std::to_string(rows));
  done.push_back(std::to_string(bytes));
  done.push_back(snapshot_lsn);
  Must(target,
       target.ExecParams("UPDATE trellara.snapshot_chunks SET state = 'copied', snapshot = $5, rows_copied = $6, "
                         "bytes_copied = $7, snapshot_lsn = $8::pg_lsn, copied_at = now() WHERE flow = $1 AND schema_name = $2 AND "
                         "table_name = $3 AND chunk_no = $4",
                         done),
       "recording " + chunk_name + " as copied");
  Must(target,
       target.ExecParams("DELETE FROM trellara.snapshot_skips WHERE flow = $1 AND schema_name = $2 AND table_name = $3 "
                         "AND chunk_no = $4",
                         keys),
       "removing the skips of " + chunk_name);
  Must(target, target.Exec("COMMIT"), "COMMIT of " + chunk_name + " on the target");
  source.Exec("COMMIT");  // read-only: its outcome changes nothing
  return ChunkOutcome::Copied;
}

// A table's failure, in its own target transaction (the chunk's transaction is gone).
void MarkTableFailed(const CopyContext& ctx, Sessions& s, const SnapshotTable& t, const std::string& error,
                     int worker_no) {
  // Negative control (tests only, --enable-test-defects with
  // TRELLARA_FAULTS=defect.snapshot_failure_not_recorded:1:defect; seed row
  // snapshot_copy_failure_marked_recoverable, caught by test_snapshot.py
  // negative_control_snapshot_failure_not_recorded_is_caught): the failure stays in this process's
  // memory only; the registry keeps the table copying with no last_error, as if a copy were in flight.
  if (fault::Hit("defect.snapshot_failure_not_recorded") == fault::Action::Defect) return;
  for (int attempt = 0; attempt < 3; attempt++) {
    try {
      s.source.reset();
      Connect(ctx, s, worker_no);
      PgConnection& target = *s.target;
      const SqlParams keys{ctx.config.flow_name, t.schema, t.table, ctx.run_id};
      Must(target, target.Exec("BEGIN"), "BEGIN");
      auto row = Must(target,
                      target.ExecParams("SELECT state FROM trellara.snapshot_tables WHERE flow = $1 AND schema_name = $2 "
                                        "AND table_name = $3 AND run_id = $4 FOR UPDATE",
                                        keys),
                      "reading the state of " + t.name);
      if (row.rows() == 1) {
        auto from = ParseSnapshotState(row.Value(0, 0).value_or(""));
        if (from && CheckSnapshotTransition(*from, SnapshotState::FailedRecoverable, false, "table " + t.name).ok()) {
          SqlParams p = keys;
          p.push_back(error);
          Must(target,
               target.ExecParams("UPDATE trellara.snapshot_tables SET state = 'failed_recoverable', last_error = $5, "
                                 "updated_at = now() WHERE flow = $1 AND schema_name = $2 AND table_name = $3 "
                                 "AND run_id = $4",
                                 p),
               "recording " + t.name + " as failed_recoverable");
        }
      }
      Must(target, target.Exec("COMMIT"), "COMMIT");
      return;
    } catch (const ChunkFailure& f) {
      s.target.reset();
      std::fprintf(stderr, "trellara: snapshot: could not record table %s as failed_recoverable: %s\n",
                   t.name.c_str(), f.message.c_str());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

}  // namespace

void TableProgress::MarkStart() {
  std::lock_guard<std::mutex> lock(mutex);
  if (!first_start) first_start = Clock::now();
  started = true;
  in_flight++;
}

void TableProgress::MarkEnd() {
  std::lock_guard<std::mutex> lock(mutex);
  last_end = Clock::now();
  in_flight--;
}

double TableProgress::Seconds(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mutex);
  if (!first_start) return 0;
  // While a chunk is in flight the clock runs; afterwards the table's time ends at its last chunk.
  const auto end = (in_flight == 0 && last_end && *last_end > *first_start) ? *last_end : now;
  return std::chrono::duration<double>(end - *first_start).count();
}

WorkQueue::WorkQueue(std::vector<ChunkWork> chunks) : chunks_(chunks.begin(), chunks.end()), total_(chunks.size()) {}

std::optional<ChunkWork> WorkQueue::Pop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (chunks_.empty()) return std::nullopt;
  ChunkWork w = chunks_.front();
  chunks_.pop_front();
  return w;
}

void WorkQueue::Finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  finished_++;
  cv_.notify_all();
}

bool WorkQueue::WaitDone(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, timeout, [this] { return finished_ == total_; });
}

void RunWorker(CopyContext& ctx, WorkQueue& queue, int worker_no) {
  Sessions sessions;
  RetryBackoff backoff(BackoffPolicy{200, 10000}, 0x5eed0000u + static_cast<uint64_t>(worker_no));
  while (auto work = queue.Pop()) {
    const SnapshotTable& t = ctx.tables[work->table];
    TableProgress& progress = ctx.progress[work->table];
    if (progress.failed) {  // the table already failed: its remaining chunks stay pending
      queue.Finished();
      continue;
    }
    progress.MarkStart();
    backoff.Reset();
    for (;;) {
      try {
        Connect(ctx, sessions, worker_no);
        uint64_t rows = 0, bytes = 0;
        try {
          if (CopyChunk(ctx, sessions, t, work->range, progress, rows, bytes) == ChunkOutcome::Copied)
            progress.chunks_copied++;
          else
            progress.chunks_skipped++;
        } catch (const ChunkFailure&) {
          progress.rows -= rows;  // the attempt's rows were rolled back
          progress.bytes -= bytes;
          throw;
        } catch (const std::exception& e) {  // nothing may escape a worker thread
          progress.rows -= rows;
          progress.bytes -= bytes;
          throw ChunkFailure{"copying chunk " + std::to_string(work->range.chunk_no) + " of " + t.name +
                                 " failed unexpectedly: " + e.what(),
                             false};
        }
        break;
      } catch (const ChunkFailure& failure) {
        // Whatever state the sessions are in (mid-COPY, aborted transaction), start afresh.
        sessions.source.reset();
        sessions.target.reset();
        if (failure.transient && backoff.attempt() < kMaxTransientAttempts) {
          const uint64_t wait_ms = backoff.NextDelayMs();
          std::fprintf(stderr,
                       "trellara: snapshot: chunk %d of %s: transient failure (attempt %u of %d), retrying in %llu "
                       "ms: %s\n",
                       work->range.chunk_no, t.name.c_str(), backoff.attempt(), static_cast<int>(kMaxTransientAttempts),
                       static_cast<unsigned long long>(wait_ms), failure.message.c_str());
          std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
          continue;
        }
        const std::string error = failure.message + (failure.transient ? " (still failing after " +
                                                                              std::to_string(kMaxTransientAttempts) +
                                                                              " attempts)"
                                                                        : "");
        {
          std::lock_guard<std::mutex> lock(progress.mutex);
          if (progress.error.empty()) progress.error = error;
        }
        progress.failed = true;
        MarkTableFailed(ctx, sessions, t, error, worker_no);
        break;
      }
    }
    progress.MarkEnd();
    queue.Finished();
  }
}

}  // namespace trellara::cli::snapshot
