// snapshot_command.cpp — `trellara snapshot --config F [--table schema.table ...] [--jobs N]
// [--run-id R] [--force] [--chunk-rows N] [--format text|json]`: the initial copy of the flow's
// tables from source to target (docs/snapshot.md).
//
// It registers each table of the flow's publication (as the plugin sees it) in the target's
// snapshot tables under the flow's control lock, splits it into key-range chunks, and copies the
// pending chunks in parallel workers, each chunk in one target transaction together with its
// `copied` state and the source snapshot it was read in (snapshot_copy.cpp). A rerun with the same
// run id copies only the chunks still pending. Every state change goes through core's
// CheckSnapshotTransition; the decisions (snapshots, chunks, states) are core's (snapshot.h).
//
// It never holds a chunk's rows in memory (COPY is streamed row by row between the two
// connections), never moves a state backwards without --force, and never writes a table's
// handoff_ready before every one of its chunks is committed as copied.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "commands/commands.h"
#include "engine/snapshot_copy.h"
#include "pg/source_tables.h"
#include "pg/target_schema.h"
#include "trellara/base/fault.h"
#include "trellara/apply/snapshot.h"

namespace trellara::cli {
namespace {

// How long after registering tables the first chunk's copy starts (see Run).
constexpr auto kCommitLogMargin = std::chrono::seconds(1);

using snapshot::ChunkWork;
using snapshot::Registration;
using snapshot::SnapshotTable;
using snapshot::TableProgress;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string config_path;
  std::vector<std::string> tables;
  int jobs = 0;  // 0: min(4, pending chunks)
  std::string run_id;
  bool force = false;
  uint64_t chunk_rows = 100000;
  OutputFormat format = OutputFormat::Text;
};

// ---- the flow's tables, as the plugin sees them --------------------------------------------

std::vector<SnapshotTable> PublishedTables(PgConnection& source, const FlowConfig& config,
                                           const std::vector<std::string>& selected) {
  // One reader of the publication for snapshot, verify and reseed (source_tables.h): the columns
  // the stream carries, the row filter, and the leading key column when it can be split.
  std::vector<SnapshotTable> out;
  for (SourceTable& s : ReadSourceTables(source, config, selected)) {
    SnapshotTable t;
    t.name = std::move(s.name);
    t.schema = std::move(s.schema);
    t.table = std::move(s.table);
    t.qualified = std::move(s.qualified);
    t.columns = std::move(s.columns);
    t.row_filter = std::move(s.row_filter);
    t.source_partitioned = s.partitioned;
    if (s.split_key) {
      t.key_column = s.split_key_plain;
      t.key_quoted = *s.split_key;
    }
    out.push_back(std::move(t));
  }
  return out;
}

// The table's chunks on its splittable leading key column (PublishedTables); otherwise one
// unbounded chunk.
void PlanTable(PgConnection& source, SnapshotTable& t, uint64_t chunk_rows) {
  if (!t.key_column) {
    t.ranges = PlanChunkRanges(std::nullopt, std::nullopt, 0, chunk_rows);
    return;
  }
  auto bounds = MustSucceed(
      source,
      source.Exec("SELECT min(" + t.key_quoted + ")::text, max(" + t.key_quoted + ")::text, "
                  "(SELECT c.reltuples::bigint FROM pg_catalog.pg_class c WHERE c.oid = '" + t.qualified +
                  "'::regclass) FROM " + t.qualified),
      "reading the key range of " + t.name + " on the source");
  std::optional<int64_t> lo, hi;
  if (auto v = bounds.Value(0, 0)) lo = std::stoll(*v);
  if (auto v = bounds.Value(0, 1)) hi = std::stoll(*v);
  int64_t estimate = std::stoll(bounds.Value(0, 2).value_or("-1"));
  if (estimate < 0 && lo) {  // never vacuumed or analysed: count (the key's index answers)
    auto count = MustSucceed(source, source.Exec("SELECT count(*) FROM " + t.qualified),
                             "counting the rows of " + t.name + " on the source");
    estimate = std::stoll(count.Value(0, 0).value_or("0"));
  }
  t.ranges = PlanChunkRanges(lo, hi, static_cast<uint64_t>(std::max<int64_t>(estimate, 0)), chunk_rows);
}

// ---- run id --------------------------------------------------------------------------------

std::string NewRunId() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "snap-%Y%m%d-%H%M%S", &tm);
  return buf;
}

bool ValidRunId(const std::string& id) {
  if (id.empty() || id.size() > 63) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

std::string ResolveRunId(PgConnection& target, const FlowConfig& config, const Options& o) {
  if (!o.run_id.empty()) {
    if (!ValidRunId(o.run_id))
      throw CommandFailed("--run-id " + o.run_id + " is not a valid run id (1-63 characters of a-z, A-Z, 0-9, -, _, .)",
                          2);
    return o.run_id;
  }
  auto r = MustSucceed(target,
                       // A run whose tables were all taken over by a forced run has nothing left to resume.
                       target.ExecParams("SELECT r.run_id, r.state FROM trellara.snapshot_runs r WHERE r.flow = $1 "
                                         "AND r.kind = 'snapshot' AND r.state <> 'handoff_ready' AND EXISTS (SELECT 1 "
                                         "FROM trellara.snapshot_tables t WHERE t.flow = r.flow AND t.run_id = r.run_id) "
                                         "ORDER BY r.started_at",
                                         {config.flow_name}),
                       "reading the unfinished snapshot runs of flow " + config.flow_name);
  if (r.rows() == 1) return r.Value(0, 0).value_or("");
  if (r.rows() > 1) {
    std::string runs;
    for (int i = 0; i < r.rows(); i++)
      runs += (i ? ", " : "") + r.Value(i, 0).value_or("") + " (" + r.Value(i, 1).value_or("") + ")";
    throw CommandFailed("flow " + config.flow_name + " has " + std::to_string(r.rows()) +
                        " unfinished snapshot runs: " + runs + "; resume one with --run-id R");
  }
  std::string id = NewRunId();
  for (int n = 2;; n++) {
    auto exists = MustSucceed(target,
                              target.ExecParams("SELECT 1 FROM trellara.snapshot_runs WHERE flow = $1 AND run_id = $2",
                                                {config.flow_name, id}),
                              "reading snapshot run " + id);
    if (exists.rows() == 0) return id;
    id = NewRunId() + "-" + std::to_string(n);
  }
}

// ---- registration --------------------------------------------------------------------------

SnapshotState StateOrFail(const std::optional<std::string>& text, const std::string& what) {
  auto s = ParseSnapshotState(text.value_or(""));
  if (!s) throw CommandFailed("the target's snapshot state of " + what + " is unreadable: " + s.error().message);
  return *s;
}

// Core's DecideRegistration for one table; a refusal ends the command.
Registration Decide(const SnapshotTable& t, const std::optional<std::pair<std::string, SnapshotState>>& row,
                    const std::string& run_id, const Options& o, const FlowConfig& config) {
  std::optional<RegisteredTable> registered;
  if (row) registered = RegisteredTable{row->first, row->second};
  auto decision = DecideRegistration(t.name, registered,
                                     RegistrationRequest{run_id, !o.run_id.empty(), o.force, config.flow_name, config.path});
  if (!decision.ok()) throw CommandFailed(decision.error().message);
  return *decision;
}

std::optional<std::pair<std::string, SnapshotState>> ReadTableRow(PgConnection& target, const FlowConfig& config,
                                                                  const SnapshotTable& t, bool for_update) {
  auto r = MustSucceed(target,
                       target.ExecParams(std::string("SELECT run_id, state FROM trellara.snapshot_tables "
                                                     "WHERE flow = $1 AND schema_name = $2 AND table_name = $3") +
                                             (for_update ? " FOR UPDATE" : ""),
                                         {config.flow_name, t.schema, t.table}),
                       "reading the snapshot state of " + t.name);
  if (r.rows() == 0) return std::nullopt;
  return std::make_pair(r.Value(0, 0).value_or(""), StateOrFail(r.Value(0, 1), "table " + t.name));
}

std::string IntArray(const std::vector<std::optional<int64_t>>& values) {
  std::string s = "{";
  for (size_t i = 0; i < values.size(); i++)
    s += (i ? "," : "") + (values[i] ? std::to_string(*values[i]) : std::string("NULL"));
  return s + "}";
}

// Registers (or resumes) one table in one target transaction under the flow's control lock, and
// moves it to copying when chunks are pending. Fills t.pending / t.chunks / t.registration.
void RegisterTable(PgConnection& target, const FlowConfig& config, const std::string& run_id, SnapshotTable& t,
                   const Options& o) {
  const std::string what = "registering " + t.name + " for snapshot run " + run_id;
  MustSucceed(target, target.Exec("BEGIN"), what);
  try {
    MustSucceed(target,
                target.ExecParams("SELECT pg_advisory_xact_lock(hashtextextended('trellara control ' || $1::text, 0))",
                                  {config.flow_name}),
                "taking the control lock of flow " + config.flow_name);
    auto row = ReadTableRow(target, config, t, true);
    const Registration decision = Decide(t, row, run_id, o, config);
    t.registration = decision;
    if (decision != Registration::Skip)  // a run exists once it owns a table
      MustSucceed(target,
                  target.ExecParams("INSERT INTO trellara.snapshot_runs (flow, run_id, kind, state) "
                                    "VALUES ($1, $2, 'snapshot', 'pending') ON CONFLICT (flow, run_id) DO NOTHING",
                                    {config.flow_name, run_id}),
                  what);
    if (decision == Registration::New || decision == Registration::Reregister) {
      const std::vector<std::string> keys{config.flow_name, t.schema, t.table};
      // Skips recorded against the old layout's pending chunks still bind the new copy: each
      // of them is carried onto every new chunk (the copy's snapshot must see them all).
      auto skips = MustSucceed(target,
                               target.ExecParams("DELETE FROM trellara.snapshot_skips WHERE flow = $1 AND "
                                                 "schema_name = $2 AND table_name = $3 RETURNING xid::text, "
                                                 "commit_lsn::text",
                                                 {keys[0], keys[1], keys[2]}),
                               what);
      MustSucceed(target,
                  target.ExecParams("DELETE FROM trellara.snapshot_chunks WHERE flow = $1 AND schema_name = $2 "
                                    "AND table_name = $3",
                                    {keys[0], keys[1], keys[2]}),
                  what);
      MustSucceed(target,
                  target.ExecParams(
                      "INSERT INTO trellara.snapshot_tables (flow, schema_name, table_name, run_id, state, "
                      "key_column, chunks) VALUES ($1, $2, $3, $4, 'pending', $5, $6) "
                      "ON CONFLICT (flow, schema_name, table_name) DO UPDATE SET run_id = EXCLUDED.run_id, "
                      "state = 'pending', key_column = EXCLUDED.key_column, row_filter = NULL, "
                      "chunks = EXCLUDED.chunks, rows_copied = 0, bytes_copied = 0, seconds = 0, last_error = NULL, "
                      "updated_at = now()",
                      {keys[0], keys[1], keys[2], run_id, t.key_column, std::to_string(t.ranges.size())}),
                  what);
      std::vector<std::optional<int64_t>> nos, los, his;
      for (const auto& c : t.ranges) {
        nos.push_back(c.chunk_no);
        los.push_back(c.lo);
        his.push_back(c.hi);
      }
      MustSucceed(target,
                  target.ExecParams("INSERT INTO trellara.snapshot_chunks (flow, schema_name, table_name, chunk_no, "
                                    "lo, hi, state) SELECT $1, $2, $3, u.n, u.lo, u.hi, 'pending' "
                                    "FROM unnest($4::int[], $5::bigint[], $6::bigint[]) AS u(n, lo, hi)",
                                    {keys[0], keys[1], keys[2], IntArray(nos), IntArray(los), IntArray(his)}),
                  what);
      if (skips.rows() > 0) {
        std::vector<std::optional<int64_t>> xids;
        std::string lsns = "{";
        for (int i = 0; i < skips.rows(); i++) {
          xids.push_back(std::stoll(skips.Value(i, 0).value_or("0")));
          lsns += (i ? "," : "") + skips.Value(i, 1).value_or("0/0");
        }
        MustSucceed(target,
                    target.ExecParams("INSERT INTO trellara.snapshot_skips (flow, schema_name, table_name, chunk_no, "
                                      "xid, commit_lsn) SELECT $1, $2, $3, c.chunk_no, s.xid, max(s.lsn) "
                                      "FROM unnest($4::bigint[], $5::pg_lsn[]) AS s(xid, lsn) "
                                      "CROSS JOIN trellara.snapshot_chunks c WHERE c.flow = $1 AND c.schema_name = $2 "
                                      "AND c.table_name = $3 GROUP BY c.chunk_no, s.xid",
                                      {keys[0], keys[1], keys[2], IntArray(xids), lsns + "}"}),
                    what);
      }
      MustSucceed(target,
                  target.ExecParams("INSERT INTO trellara.apply_control (flow, version) VALUES ($1, 1) "
                                    "ON CONFLICT (flow) DO UPDATE SET version = trellara.apply_control.version + 1, "
                                    "updated_at = now()",
                                    {config.flow_name}),
                  "bumping the snapshot registry version of flow " + config.flow_name);
    }
    if (decision == Registration::Skip) {
      auto count = MustSucceed(target,
                               target.ExecParams("SELECT chunks FROM trellara.snapshot_tables WHERE flow = $1 AND "
                                                 "schema_name = $2 AND table_name = $3",
                                                 {config.flow_name, t.schema, t.table}),
                               "reading the chunk count of " + t.name);
      t.chunks = std::stoi(count.Value(0, 0).value_or("0"));
    } else {
      auto chunks = MustSucceed(target,
                                target.ExecParams("SELECT chunk_no, lo, hi, state, rows_copied FROM "
                                                  "trellara.snapshot_chunks WHERE flow = $1 AND schema_name = $2 AND "
                                                  "table_name = $3 ORDER BY chunk_no",
                                                  {config.flow_name, t.schema, t.table}),
                                "reading the chunks of " + t.name);
      t.pending.clear();
      t.chunks = chunks.rows();
      for (int i = 0; i < chunks.rows(); i++) {
        if (chunks.Value(i, 3) == std::optional<std::string>("copied")) continue;
        ChunkRange c;
        c.chunk_no = std::stoi(chunks.Value(i, 0).value_or("0"));
        if (auto v = chunks.Value(i, 1)) c.lo = std::stoll(*v);
        if (auto v = chunks.Value(i, 2)) c.hi = std::stoll(*v);
        t.pending.push_back(c);
      }
      // The key the chunks split on is the registered one (a resumed table keeps its layout).
      auto key = MustSucceed(target,
                             target.ExecParams("SELECT key_column, quote_ident(key_column) FROM trellara.snapshot_tables "
                                               "WHERE flow = $1 AND schema_name = $2 AND table_name = $3",
                                               {config.flow_name, t.schema, t.table}),
                             "reading the key column of " + t.name);
      t.key_column = key.Value(0, 0);
      t.key_quoted = key.Value(0, 1).value_or("");
      const SnapshotState from = decision == Registration::Resume ? row->second : SnapshotState::Pending;
      // A failed table is copying again on every rerun (also when its failure came after its
      // last chunk), so that it can move on to copied.
      if (!t.pending.empty() || from == SnapshotState::FailedRecoverable) {
        Status allowed = CheckSnapshotTransition(from, SnapshotState::Copying, o.force, "table " + t.name);
        if (!allowed.ok()) throw CommandFailed(allowed.error().message);
        MustSucceed(target,
                    target.ExecParams("UPDATE trellara.snapshot_tables SET state = 'copying', last_error = NULL, "
                                      "updated_at = now() WHERE flow = $1 AND schema_name = $2 AND table_name = $3",
                                      {config.flow_name, t.schema, t.table}),
                    what);
      }
    }
    MustSucceed(target, target.Exec("COMMIT"), what);
  } catch (...) {
    target.Exec("ROLLBACK");
    throw;
  }
}

std::optional<SnapshotState> ReadRunState(PgConnection& target, const FlowConfig& config, const std::string& run_id) {
  auto r = MustSucceed(target,
                       target.ExecParams("SELECT state FROM trellara.snapshot_runs WHERE flow = $1 AND run_id = $2",
                                         {config.flow_name, run_id}),
                       "reading snapshot run " + run_id + " of flow " + config.flow_name);
  if (r.rows() == 0) return std::nullopt;
  return StateOrFail(r.Value(0, 0), "snapshot run " + run_id);
}

// Moves the run's state to `to` when the transition is allowed (it is read under FOR UPDATE).
void MoveRun(PgConnection& target, const FlowConfig& config, const std::string& run_id, SnapshotState to, bool force,
             const std::optional<std::string>& error = std::nullopt) {
  const std::string what = "snapshot run " + run_id + " of flow " + config.flow_name;
  MustSucceed(target, target.Exec("BEGIN"), "updating " + what);
  try {
    auto r = MustSucceed(target,
                         target.ExecParams("SELECT state FROM trellara.snapshot_runs WHERE flow = $1 AND run_id = $2 "
                                           "FOR UPDATE",
                                           {config.flow_name, run_id}),
                         "reading " + what);
    if (r.rows() == 1) {
      const SnapshotState from = StateOrFail(r.Value(0, 0), what);
      if (from != to) {
        Status allowed = CheckSnapshotTransition(from, to, force, what);
        if (!allowed.ok()) throw CommandFailed(allowed.error().message);
        MustSucceed(target,
                    target.ExecParams("UPDATE trellara.snapshot_runs SET state = $3, last_error = $4, "
                                      "updated_at = now() WHERE flow = $1 AND run_id = $2",
                                      {config.flow_name, run_id, SnapshotStateName(to), error}),
                    "updating " + what);
      }
    }
    MustSucceed(target, target.Exec("COMMIT"), "updating " + what);
  } catch (...) {
    target.Exec("ROLLBACK");
    throw;
  }
}

// ---- progress ------------------------------------------------------------------------------

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    u++;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

class SnapshotProgress {
 public:
  SnapshotProgress(std::string flow, std::string run_id, FILE* out)
      : flow_(std::move(flow)), run_id_(std::move(run_id)), out_(out), tty_(::isatty(fileno(out)) == 1) {}

  // Called about once a second while workers run.
  void Tick(const std::vector<SnapshotTable>& tables, std::deque<TableProgress>& progress, bool final) {
    const auto now = Clock::now();
    if (tty_) {
      if (drawn_lines_ > 0) std::fprintf(out_, "\033[%dA", drawn_lines_);
      drawn_lines_ = 0;
      for (size_t i = 0; i < tables.size(); i++) {
        if (tables[i].registration == Registration::Skip) continue;
        const TableProgress& p = progress[i];
        const int total = std::max(1, tables[i].chunks);
        const int done = p.chunks_copied + p.chunks_skipped;
        const int width = 24;
        const int filled = std::min(width, done * width / total);
        const double secs = p.Seconds(now);
        const double rate = secs > 0 ? static_cast<double>(p.rows) / secs : 0;
        const int copied_now = p.chunks_copied;
        const int remaining = total - done;
        std::string eta = "-";
        if (p.failed) {
          eta = "failed";
        } else if (remaining == 0) {
          eta = "done";
        } else if (copied_now > 0) {
          eta = std::to_string(static_cast<long long>(secs / copied_now * remaining)) + "s";
        }
        std::fprintf(out_, "\r\033[K%-32s [%s%s] %3d/%-3d chunks %12llu rows %10s %9.0f rows/s (%s/s) ETA %s\n",
                     tables[i].name.c_str(), std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                     done, total, static_cast<unsigned long long>(p.rows.load()), HumanBytes(p.bytes).c_str(), rate,
                     HumanBytes(secs > 0 ? p.bytes / secs : 0).c_str(), eta.c_str());
        drawn_lines_++;
      }
      std::fflush(out_);
      return;
    }
    if (!final && now - last_line_ < std::chrono::seconds(5)) return;
    last_line_ = now;
    for (size_t i = 0; i < tables.size(); i++) {
      if (tables[i].registration == Registration::Skip) continue;
      TableProgress& p = progress[i];
      const int done = p.chunks_copied + p.chunks_skipped;
      if (!final && (p.reported_done || (p.chunks_copied == 0 && !p.started))) continue;
      const double secs = p.Seconds(now);
      const int remaining = tables[i].chunks - done;
      const char* state = p.failed ? "failed_recoverable" : remaining == 0 ? "copied" : "copying";
      if (p.failed || remaining == 0) p.reported_done = true;  // a finished table's line is printed once
      std::fprintf(out_,
                   "snapshot flow=%s run=%s table=%s state=%s chunks=%d chunks_copied=%d chunks_skipped=%d rows=%llu "
                   "bytes=%llu seconds=%.1f rows_per_s=%.0f eta_s=%.0f\n",
                   flow_.c_str(), run_id_.c_str(), tables[i].name.c_str(), state, tables[i].chunks,
                   p.chunks_copied.load(), p.chunks_skipped.load(), static_cast<unsigned long long>(p.rows.load()),
                   static_cast<unsigned long long>(p.bytes.load()), secs, secs > 0 ? p.rows / secs : 0.0,
                   p.chunks_copied > 0 ? secs / p.chunks_copied * remaining : -1.0);
    }
    std::fflush(out_);
  }

 private:
  std::string flow_, run_id_;
  FILE* out_;
  bool tty_;
  int drawn_lines_ = 0;
  Clock::time_point last_line_ = Clock::now();
};

// ---- finishing a table ---------------------------------------------------------------------

// copying -> copied -> handoff_ready, once every chunk of the table's registration is copied.
// Returns the error text when the table is not (yet) complete.
std::optional<std::string> FinishTable(PgConnection& target, const FlowConfig& config, const std::string& run_id,
                                       const SnapshotTable& t, double seconds) {
  const std::vector<std::optional<std::string>> keys{config.flow_name, t.schema, t.table};
  auto step = [&](SnapshotState to) -> std::optional<std::string> {
    const std::string what = "table " + t.name + " of flow " + config.flow_name;
    MustSucceed(target, target.Exec("BEGIN"), "recording the state of " + what);
    try {
      auto row = MustSucceed(target,
                             target.ExecParams("SELECT run_id, state FROM trellara.snapshot_tables WHERE flow = $1 AND "
                                               "schema_name = $2 AND table_name = $3 FOR UPDATE",
                                               keys),
                             "reading the state of " + what);
      if (row.rows() != 1 || row.Value(0, 0) != std::optional<std::string>(run_id)) {
        target.Exec("ROLLBACK");
        return what + " is no longer registered under run " + run_id + " (another snapshot --force took it over)";
      }
      const SnapshotState from = StateOrFail(row.Value(0, 1), what);
      if (from == to) {
        target.Exec("ROLLBACK");
        return std::nullopt;
      }
      auto chunks = MustSucceed(target,
                                target.ExecParams("SELECT count(*) FILTER (WHERE state <> 'copied'), "
                                                  "coalesce(sum(rows_copied), 0), coalesce(sum(bytes_copied), 0) "
                                                  "FROM trellara.snapshot_chunks WHERE flow = $1 AND schema_name = $2 "
                                                  "AND table_name = $3",
                                                  keys),
                                "reading the chunks of " + what);
      if (chunks.Value(0, 0) != std::optional<std::string>("0")) {
        target.Exec("ROLLBACK");
        return what + " still has " + chunks.Value(0, 0).value_or("?") + " chunk(s) not copied";
      }
      Status allowed = CheckSnapshotTransition(from, to, false, what);
      if (!allowed.ok()) {
        target.Exec("ROLLBACK");
        return allowed.error().message;
      }
      MustSucceed(target,
                  target.ExecParams("UPDATE trellara.snapshot_tables SET state = $4, rows_copied = $5, "
                                    "bytes_copied = $6, seconds = seconds + $7, last_error = NULL, updated_at = now() "
                                    "WHERE flow = $1 AND schema_name = $2 AND table_name = $3",
                                    {keys[0], keys[1], keys[2], SnapshotStateName(to), chunks.Value(0, 1),
                                     chunks.Value(0, 2),
                                     std::to_string(to == SnapshotState::Copied ? seconds : 0.0)}),
                  "recording " + what + " as " + SnapshotStateName(to));
      if (to == SnapshotState::HandoffReady) {
        // An applier that ran before the table was registered halts at the first streamed change
        // to a row the target did not hold yet (zero_rows_matched, duplicate_key...). The copy now
        // holds that row as the source had it, so the transaction is retried (replay-ready), this
        // time under the handoff rule; it quarantines again if it still cannot apply. Only row
        // conflicts naming this table; never resolved here, only retried.
        auto retried = MustSucceed(
            target,
            target.ExecParams("UPDATE trellara.quarantine SET state = 'replay_ready', replay_ready_at = now() "
                              "WHERE flow = $1 AND state = 'quarantined' "
                              "AND reason IN ('zero_rows_matched', 'many_rows_matched', 'duplicate_key') "
                              "AND (strpos(detail, $2) > 0 OR strpos(message, $2) > 0 OR strpos(detail, $3) > 0 "
                              "OR strpos(message, $3) > 0)",
                              {config.flow_name, t.name, t.qualified}),
            "marking the quarantined transactions of " + what + " replay-ready");
        if (retried.affected() > 0)
          std::cerr << "trellara: " << retried.affected() << " quarantined transaction(s) of " << what
                    << " marked replay-ready: the copy now holds their rows; the applier retries them\n";
      }
      MustSucceed(target, target.Exec("COMMIT"), "recording " + what + " as " + SnapshotStateName(to));
      return std::nullopt;
    } catch (...) {
      target.Exec("ROLLBACK");
      throw;
    }
  };
  if (auto e = step(SnapshotState::Copied)) return e;
  fault::Hit("snapshot.before_handoff_record");
  return step(SnapshotState::HandoffReady);
}

// ---- the command ---------------------------------------------------------------------------

void Run(const Options& o) {
  const FlowConfig config = LoadConfigOrFail(o.config_path);
  if (config.source_conninfo.empty())
    throw CommandFailed("snapshot needs the source: set [source] conninfo in " + config.path, 2);
  FILE* progress_out = o.format == OutputFormat::Json ? stderr : stdout;
  const std::string app = "trellara-snapshot/" + config.flow_name;
  auto target = ConnectPinned(config, config.target_conninfo, "target", app);
  MustSucceed(*target, target->Exec(TargetSchemaScript()),
              "creating the trellara state schema (sql/trellara_target.sql) on the target");
  auto source = ConnectPinned(config, config.source_conninfo, "source", app);

  std::vector<SnapshotTable> tables = PublishedTables(*source, config, o.tables);
  const std::string run_id = ResolveRunId(*target, config, o);
  // Refusals first, before anything is registered: a table of another unfinished run, a
  // backward move without --force.
  bool copies_anything = false;
  for (auto& t : tables)
    copies_anything |= Decide(t, ReadTableRow(*target, config, t, false), run_id, o, config) != Registration::Skip;
  if (copies_anything) {
    if (auto run = ReadRunState(*target, config, run_id); run && *run == SnapshotState::HandoffReady) {
      Status allowed = CheckSnapshotTransition(*run, SnapshotState::Copying, o.force,
                                               "snapshot run " + run_id + " of flow " + config.flow_name);
      if (!allowed.ok())
        throw CommandFailed(allowed.error().message + "; or start a new run (omit --run-id, or name a new one)");
    }
  }
  for (auto& t : tables) PlanTable(*source, t, o.chunk_rows);
  source.reset();
  for (auto& t : tables) RegisterTable(*target, config, run_id, t, o);
  // The copy's step 2 finds the source commits that are flushed (so the stream may have applied
  // them) but not visible yet by their wait for a synchronous standby. Between its flush and its
  // visibility a commit waits on nothing else — at worst one commit-log page read — so one the
  // stream applied before these registrations is visible, or waiting on SyncRep, a second after
  // them. docs/snapshot.md "The copy of one chunk".
  const auto registered_at = std::chrono::steady_clock::now();

  std::deque<TableProgress> progress(tables.size());
  std::vector<ChunkWork> queue;
  for (size_t i = 0; i < tables.size(); i++) {
    const auto& t = tables[i];
    if (t.registration == Registration::Skip) {
      progress[i].chunks_skipped = t.chunks;
      continue;
    }
    progress[i].chunks_skipped = t.chunks - static_cast<int>(t.pending.size());
    for (const auto& c : t.pending) queue.push_back({i, c});
  }
  // Interleave tables so several are copied at once, chunk order kept within each.
  std::stable_sort(queue.begin(), queue.end(), [](const ChunkWork& a, const ChunkWork& b) {
    return a.range.chunk_no < b.range.chunk_no;
  });
  if (!queue.empty()) MoveRun(*target, config, run_id, SnapshotState::Copying, o.force);

  const int jobs = o.jobs > 0 ? o.jobs : std::max(1, std::min<int>(4, static_cast<int>(queue.size())));
  snapshot::CopyContext context{config, run_id, tables, progress};
  SnapshotProgress reporter(config.flow_name, run_id, progress_out);
  if (!queue.empty()) {
    std::this_thread::sleep_until(registered_at + kCommitLogMargin);
    snapshot::WorkQueue work(std::move(queue));
    std::vector<std::thread> workers;
    for (int j = 0; j < std::min<int>(jobs, static_cast<int>(work.size())); j++)
      workers.emplace_back([&context, &work, j] { snapshot::RunWorker(context, work, j); });
    while (!work.WaitDone(std::chrono::seconds(1))) reporter.Tick(tables, progress, false);
    for (auto& w : workers) w.join();
  }

  // Finish: tables whose chunks are all copied become handoff_ready.
  target.reset();
  target = ConnectPinned(config, config.target_conninfo, "target", app);
  for (size_t i = 0; i < tables.size(); i++) {
    if (tables[i].registration == Registration::Skip || progress[i].failed) continue;
    if (auto error = FinishTable(*target, config, run_id, tables[i], progress[i].Seconds(Clock::now()))) {
      progress[i].failed = true;
      std::lock_guard<std::mutex> lock(progress[i].mutex);
      progress[i].error = *error;
    }
  }
  reporter.Tick(tables, progress, true);

  // The run: handoff_ready when every table registered under it is; failed_recoverable when one
  // failed; otherwise it stays copying (tables of the run not selected this time).
  auto run_tables = MustSucceed(*target,
                                target->ExecParams("SELECT count(*) FILTER (WHERE state <> 'handoff_ready'), "
                                                   "count(*) FILTER (WHERE state = 'failed_recoverable') FROM "
                                                   "trellara.snapshot_tables WHERE flow = $1 AND run_id = $2",
                                                   {config.flow_name, run_id}),
                                "reading the tables of snapshot run " + run_id);
  bool any_failed = false;
  for (const auto& p : progress) any_failed = any_failed || p.failed;
  if (run_tables.Value(0, 0) == std::optional<std::string>("0")) {
    // Forward only, from wherever the run stands (a rerun may find it copied or handoff_ready).
    const auto run = ReadRunState(*target, config, run_id);
    if (run && *run != SnapshotState::HandoffReady) {
      if (*run != SnapshotState::Copying && *run != SnapshotState::Copied)
        MoveRun(*target, config, run_id, SnapshotState::Copying, o.force);
      MoveRun(*target, config, run_id, SnapshotState::Copied, o.force);
      MoveRun(*target, config, run_id, SnapshotState::HandoffReady, o.force);
    }
  } else if (any_failed || run_tables.Value(0, 1) != std::optional<std::string>("0")) {
    MoveRun(*target, config, run_id, SnapshotState::FailedRecoverable, o.force,
            std::string("one or more tables failed; see trellara.snapshot_tables.last_error"));
  }

  // The summary, from the target's registry (what is durable), plus this invocation's counts.
  auto final_rows = MustSucceed(
      *target,
      target->ExecParams("SELECT t.schema_name || '.' || t.table_name, t.state, t.last_error, t.chunks, "
                         "(SELECT coalesce(sum(c.rows_copied), 0) FROM trellara.snapshot_chunks c WHERE c.flow = t.flow "
                         "AND c.schema_name = t.schema_name AND c.table_name = t.table_name) "
                         "FROM trellara.snapshot_tables t WHERE t.flow = $1",
                         {config.flow_name}),
      "reading the snapshot state of flow " + config.flow_name);
  std::map<std::string, std::tuple<std::string, std::string, uint64_t>> durable;
  for (int i = 0; i < final_rows.rows(); i++)
    durable[final_rows.Value(i, 0).value_or("")] = {final_rows.Value(i, 1).value_or(""),
                                                    final_rows.Value(i, 2).value_or(""),
                                                    std::stoull(final_rows.Value(i, 4).value_or("0"))};
  // No run row: every selected table was already handoff_ready (nothing was registered).
  const auto run_row = ReadRunState(*target, config, run_id);
  const std::string run_state = run_row ? SnapshotStateName(*run_row) : "handoff_ready";
  nlohmann::json summary{{"run_id", run_id}, {"state", run_state}, {"tables", nlohmann::json::array()}};
  std::vector<std::string> failures;
  for (size_t i = 0; i < tables.size(); i++) {
    const auto& t = tables[i];
    const auto& [state, last_error, rows] = durable[t.name];
    std::string error;
    {
      std::lock_guard<std::mutex> lock(progress[i].mutex);
      error = progress[i].error;
    }
    if (error.empty()) error = last_error;
    summary["tables"].push_back({{"table", t.name},
                                 {"state", state},
                                 {"rows", rows},
                                 {"chunks", t.chunks},
                                 {"chunks_copied", progress[i].chunks_copied.load()},
                                 {"chunks_skipped", progress[i].chunks_skipped.load()},
                                 {"seconds", progress[i].Seconds(Clock::now())}});
    if (state != "handoff_ready")
      failures.push_back("table " + t.name + " is " + state + (error.empty() ? "" : ": " + error));
  }
  if (o.format == OutputFormat::Json) {
    std::cout << summary.dump() << std::endl;
  } else {
    std::cout << "snapshot run " << run_id << " of flow " << config.flow_name << ": " << run_state << "\n";
    for (const auto& t : summary["tables"])
      std::printf("  %-32s %-18s rows=%llu chunks=%d copied=%d skipped=%d seconds=%.1f\n",
                  t["table"].get<std::string>().c_str(), t["state"].get<std::string>().c_str(),
                  static_cast<unsigned long long>(t["rows"].get<uint64_t>()), t["chunks"].get<int>(),
                  t["chunks_copied"].get<int>(), t["chunks_skipped"].get<int>(), t["seconds"].get<double>());
    std::fflush(stdout);
  }
  if (!failures.empty()) {
    std::string message = "snapshot run " + run_id + " of flow " + config.flow_name + " did not finish:";
    for (const auto& f : failures) message += "\n  " + f;
    message += "\nfix the cause, then rerun: trellara snapshot --config " + config.path + " --run-id " + run_id +
               " (copies only the chunks still missing)";
    throw CommandFailed(message, 1);
  }
}

}  // namespace

void RegisterSnapshot(CLI::App& app) {
  auto* cmd = app.add_subcommand("snapshot", "copy the flow's tables to the target, resumably, by key-range chunks "
                                             "(--config F)");
  auto o = std::make_shared<Options>();
  AddConfigOption(cmd, o->config_path);
  cmd->add_option("--table", o->tables, "copy only this table (schema.table; repeatable)");
  cmd->add_option("--jobs", o->jobs, "parallel copy workers (default: min(4, chunks to copy))")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--run-id", o->run_id,
                  "the run to create or resume (default: the flow's unfinished run, else a new snap-YYYYMMDD-HHMMSS)");
  cmd->add_flag("--force", o->force, "copy again tables already handoff_ready or owned by another unfinished run");
  cmd->add_option("--chunk-rows", o->chunk_rows, "rows per key-range chunk (default 100000)")
      ->check(CLI::Range(static_cast<uint64_t>(1), static_cast<uint64_t>(1) << 40));
  AddFormatOption(cmd, o->format);
  cmd->callback([o] { Run(*o); });
}

}  // namespace trellara::cli
