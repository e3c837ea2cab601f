// verify_command.cpp — `trellara verify --config F [--table T ...] [--jobs N] [--timeout S]
// [--format json]`: compares the source at an exact point with the target at the same applied
// point while both are live (docs/snapshot.md "Verify").
//
// The point: HoldPoint (a temporary slot's exported snapshot at C on the source; the applier held
// right after C). Every source worker imports that snapshot; every target worker imports one target
// REPEATABLE READ snapshot taken while the applier was held; then the hold is released and the
// applier goes on while we compare.
//
// The comparison: per table, key-range chunks of the leading int key (core PlanChunkRanges; other
// tables are one chunk); per chunk each side computes, with the applier's pinned session settings,
//   SELECT count(*), coalesce(sum(hashtextextended(ROW(<source columns>)::text, 0)::numeric), 0)
// — order-independent, nothing held per row. A mismatching chunk is narrowed (core
// SplitForNarrowing) to ranges of at most kNarrowRowsMax rows, each printed with the reseed
// command that repairs it. It never writes to either side but the hold row; it never reports a
// match it did not compute: a table missing or unreadable on either side is a mismatch naming the
// error. Exit 0 match, 1 mismatch, 2 could not verify.
#include <CLI/CLI.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "commands/commands.h"
#include "engine/hold_point.h"
#include "pg/source_tables.h"
#include "pg/target_schema.h"
#include "trellara/record/envelope.h"
#include "trellara/apply/snapshot.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace verify_command {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kNarrowRowsMax = 1000;        // a reported mismatching range holds at most this many rows
constexpr size_t kReportedRangesMax = 100;       // per table; beyond, ranges are reported un-narrowed
constexpr int kJobsDefault = 4;
constexpr uint64_t kChunkRowsDefault = 100000;

struct SideCount {
  uint64_t rows = 0;
  std::string hash;  // numeric sum as text
  std::string error;
  double seconds = 0;
};

struct MismatchRange {
  ChunkRange range;
  uint64_t source_rows = 0, target_rows = 0;
  bool narrowed = true;  // false: reported coarse (kReportedRangesMax reached)
};

struct TableState {
  SourceTable table;
  std::optional<int64_t> min_key, max_key;
  int chunks = 0;
  uint64_t source_rows = 0, target_rows = 0;  // of the planned chunks (not of the narrowing)
  std::string source_error, target_error;
  std::vector<MismatchRange> mismatches;
  std::string copy_state;  // set when the table's snapshot copy is not handoff_ready: not compared
  bool match() const { return source_error.empty() && target_error.empty() && mismatches.empty(); }
  bool compared() const { return copy_state.empty(); }
};

struct Task {
  size_t table = 0;
  ChunkRange range;
  bool narrowing = false;  // a sub-range of a mismatching chunk (its counts are not added to the totals)
};

std::string RangePredicate(const std::string& key, const ChunkRange& r) {
  std::string p;
  if (r.lo) p = key + " >= " + std::to_string(*r.lo);
  if (r.hi) p += (p.empty() ? "" : " AND ") + key + " < " + std::to_string(*r.hi);
  return p;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string ReseedCommand(const FlowConfig& config, const SourceTable& t, const ChunkRange& r) {
  std::string cmd = "trellara reseed --config " + ShellQuote(config.path) + " --table " + ShellQuote(t.name);
  if (t.split_key) {
    const std::string where = RangePredicate(*t.split_key, r);
    if (!where.empty()) cmd += " --where " + ShellQuote(where);
  }
  return cmd;
}

std::string DescribeRange(const SourceTable& t, const ChunkRange& r) {
  if (!t.split_key) return "whole table";
  return t.split_key_plain + " in [" + (r.lo ? std::to_string(*r.lo) : std::string("-inf")) + ", " +
         (r.hi ? std::to_string(*r.hi) : std::string("+inf")) + ")";
}

// Runs `sql` inside a savepoint so a failure (a table missing on one side) leaves the snapshot
// transaction usable; the failure comes back in the result.
PgResult ExecInSavepoint(PgConnection& conn, const std::string& sql, const std::string& what) {
  MustSucceed(conn, conn.Exec("SAVEPOINT trellara_verify"), "SAVEPOINT before " + what);
  auto res = conn.Exec(sql);
  if (!res.ok()) MustSucceed(conn, conn.Exec("ROLLBACK TO SAVEPOINT trellara_verify"), "rolling back " + what);
  MustSucceed(conn, conn.Exec("RELEASE SAVEPOINT trellara_verify"), "RELEASE after " + what);
  return res;
}

std::string SqlLiteral(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// One side's count and hash of a range.
SideCount CountSide(PgConnection& conn, const SourceTable& t, const ChunkRange& r, bool source) {
  const auto started = Clock::now();
  std::string where = t.split_key ? RangePredicate(*t.split_key, r) : std::string();
  if (source && t.row_filter) where = (where.empty() ? "" : where + " AND ") + "(" + *t.row_filter + ")";
  const std::string sql = "SELECT count(*), coalesce(sum(pg_catalog.hashtextextended(ROW(" + t.columns +
                          ")::text, 0)::numeric), 0) FROM " + t.qualified + (where.empty() ? "" : " WHERE " + where);
  SideCount out;
  auto res = ExecInSavepoint(conn, sql, "comparing " + t.name);
  if (!res.ok()) {
    out.error = res.Describe();
  } else {
    out.rows = std::stoull(res.Value(0, 0).value_or("0"));
    out.hash = res.Value(0, 1).value_or("0");
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return out;
}

struct Worker {
  std::unique_ptr<PgConnection> source, target;
};

class Comparison {
 public:
  explicit Comparison(std::vector<TableState>& tables) : tables_(tables) {}

  void Add(Task t) { queue_.push_back(std::move(t)); }

  // Runs every task on the workers (one thread each, both sides of a task concurrently).
  void Run(std::vector<Worker>& workers) {
    std::vector<std::thread> threads;
    for (auto& w : workers) threads.emplace_back([this, &w] { Loop(w); });
    for (auto& t : threads) t.join();
    if (failure_) std::rethrow_exception(failure_);
  }

  double source_seconds = 0, target_seconds = 0;
  uint64_t source_rows_read = 0, target_rows_read = 0;

 private:
  void Loop(Worker& w) {
    for (;;) {
      Task task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty() || in_flight_ == 0 || failure_; });
        if (failure_ || (queue_.empty() && in_flight_ == 0)) {
          cv_.notify_all();
          return;
        }
        task = queue_.front();
        queue_.pop_front();
        in_flight_++;
      }
      try {
        const SourceTable& t = tables_[task.table].table;
        auto source_side = std::async(std::launch::async, [&] { return CountSide(*w.source, t, task.range, true); });
        SideCount target = CountSide(*w.target, t, task.range, false);
        SideCount source = source_side.get();
        std::lock_guard lock(mu_);
        Record(task, source, target);
        in_flight_--;
        cv_.notify_all();
      } catch (...) {
        std::lock_guard lock(mu_);
        if (!failure_) failure_ = std::current_exception();
        in_flight_--;
        cv_.notify_all();
        return;
      }
    }
  }

  // Under mu_.
  void Record(const Task& task, const SideCount& source, const SideCount& target) {
    TableState& ts = tables_[task.table];
    source_seconds += source.seconds;
    target_seconds += target.seconds;
    source_rows_read += source.rows;
    target_rows_read += target.rows;
    if (!task.narrowing) {
      ts.source_rows += source.rows;
      ts.target_rows += target.rows;
    }
    if (!source.error.empty() || !target.error.empty()) {
      if (ts.source_error.empty()) ts.source_error = source.error;
      if (ts.target_error.empty()) ts.target_error = target.error;
      return;
    }
    if (source.rows == target.rows && source.hash == target.hash) return;
    const uint64_t rows = std::max(source.rows, target.rows);
    std::vector<ChunkRange> parts;
    const bool may_narrow = ts.table.split_key && ts.mismatches.size() + queue_.size() < kReportedRangesMax;
    if (may_narrow) parts = SplitForNarrowing(task.range, rows, kNarrowRowsMax, ts.min_key, ts.max_key);
    if (parts.size() < 2) {
      ts.mismatches.push_back({task.range, source.rows, target.rows, rows <= kNarrowRowsMax || !ts.table.split_key});
      return;
    }
    for (const ChunkRange& part : parts) queue_.push_back({task.table, part, true});
  }

  std::vector<TableState>& tables_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  int in_flight_ = 0;
  std::exception_ptr failure_;
};

std::optional<int64_t> ToKey(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  return std::stoll(*text);
}

// Key bounds of both sides and the planned chunks of one table, in the workers' snapshots.
void PlanTable(Worker& w, TableState& ts, uint64_t chunk_rows, Comparison& comparison, size_t index) {
  const SourceTable& t = ts.table;
  if (!t.split_key) {
    ts.chunks = 1;
    comparison.Add({index, ChunkRange{0, std::nullopt, std::nullopt}, false});
    return;
  }
  const std::string bounds = "SELECT min(" + *t.split_key + ")::text, max(" + *t.split_key +
                             ")::text, (SELECT c.reltuples::bigint FROM pg_catalog.pg_class c WHERE c.oid = " +
                             SqlLiteral(t.qualified) + "::regclass) FROM " + t.qualified;
  auto s = ExecInSavepoint(*w.source, bounds + (t.row_filter ? " WHERE (" + *t.row_filter + ")" : std::string()),
                           "planning " + t.name);
  if (!s.ok()) {
    ts.source_error = s.Describe();
    return;
  }
  auto g = ExecInSavepoint(*w.target, bounds, "planning " + t.name);
  if (!g.ok()) ts.target_error = g.Describe();
  auto smin = ToKey(s.Value(0, 0)), smax = ToKey(s.Value(0, 1));
  std::optional<int64_t> gmin, gmax;
  if (g.ok()) gmin = ToKey(g.Value(0, 0)), gmax = ToKey(g.Value(0, 1));
  auto lower = [](std::optional<int64_t> a, std::optional<int64_t> b) {
    return !a ? b : !b ? a : std::optional<int64_t>(std::min(*a, *b));
  };
  auto upper = [](std::optional<int64_t> a, std::optional<int64_t> b) {
    return !a ? b : !b ? a : std::optional<int64_t>(std::max(*a, *b));
  };
  ts.min_key = lower(smin, gmin);
  ts.max_key = upper(smax, gmax);
  const int64_t estimate = std::stoll(s.Value(0, 2).value_or("-1"));
  // Never analyzed (-1): the key span is an upper bound for a dense key.
  uint64_t rows = estimate >= 0 ? static_cast<uint64_t>(estimate)
                  : (ts.min_key && ts.max_key) ? static_cast<uint64_t>(*ts.max_key - *ts.min_key) + 1
                                               : 0;
  const auto ranges = PlanChunkRanges(ts.min_key, ts.max_key, rows, chunk_rows);
  ts.chunks = static_cast<int>(ranges.size());
  for (const auto& r : ranges) comparison.Add({index, r, false});
}

struct Options {
  std::string config_path;
  std::vector<std::string> tables;
  OutputFormat format = OutputFormat::Text;
  int timeout_seconds = 60;
  int jobs = kJobsDefault;
  uint64_t chunk_rows = kChunkRowsDefault;
};

// Compares and prints; returns the operator message when source and target differ.
std::optional<std::string> Run(const Options& options) {
  const FlowConfig config = LoadConfigOrFail(options.config_path);
  if (config.source_conninfo.empty())
    throw CommandFailed("verify needs the source: set source.conninfo in " + config.path, kExitCouldNotHold);
  const auto started = Clock::now();
  const std::string app = "trellara-verify/" + config.flow_name;
  auto control = ConnectPinned(config, config.target_conninfo, "target", app);
  RequireTargetState(*control, config);
  MustSucceed(*control, control->Exec(TargetSchemaScript()), "installing the trellara target state");
  auto catalog = ConnectPinned(config, config.source_conninfo, "source", app);
  std::vector<TableState> tables;
  for (auto& t : ReadSourceTables(*catalog, config, options.tables)) tables.push_back({std::move(t)});
  catalog.reset();

  std::vector<Worker> workers(static_cast<size_t>(options.jobs));
  for (auto& w : workers) {
    w.source = ConnectPinned(config, config.source_conninfo, "source", app);
    w.target = ConnectPinned(config, config.target_conninfo, "target", app);
  }

  uint64_t point = 0;
  int attempts = 0;
  {
    HoldPoint hold(config, *control, std::chrono::seconds(options.timeout_seconds), "verify");
    point = hold.lsn();
    attempts = hold.attempts();
    for (auto& w : workers) hold.ImportSnapshot(*w.source);
    hold.DropSlot();
    // The target as of the held point: one snapshot, exported to the other workers.
    Worker& first = workers.front();
    MustSucceed(*first.target, first.target->Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
                "opening the target snapshot");
    auto exported = MustSucceed(*first.target, first.target->Exec("SELECT pg_catalog.pg_export_snapshot()"),
                                "exporting the target snapshot");
    const std::string name = exported.Value(0, 0).value_or("");
    for (size_t i = 1; i < workers.size(); i++) {
      MustSucceed(*workers[i].target, workers[i].target->Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
                  "opening a target snapshot");
      MustSucceed(*workers[i].target, workers[i].target->Exec("SET TRANSACTION SNAPSHOT '" + name + "'"),
                  "importing the target snapshot " + name);
    }
    hold.Release();
  }
  const auto held = Clock::now();

  // A table still being copied (trellara snapshot / reseed run not handoff_ready) differs by design:
  // it is not compared, and verify cannot say it converged (exit 2 unless another table differs).
  auto copying = MustSucceed(*workers.front().target,
                             workers.front().target->ExecParams(
                                 "SELECT schema_name || '.' || table_name, state FROM trellara.snapshot_tables "
                                 "WHERE flow = $1 AND state <> 'handoff_ready'",
                                 {config.flow_name}),
                             "reading the snapshot state of the flow's tables (trellara.snapshot_tables)");
  for (int i = 0; i < copying.rows(); i++)
    for (auto& ts : tables)
      if (ts.table.name == copying.Value(i, 0).value_or("")) ts.copy_state = copying.Value(i, 1).value_or("");

  Comparison comparison(tables);
  for (size_t i = 0; i < tables.size(); i++)
    if (tables[i].compared()) PlanTable(workers.front(), tables[i], options.chunk_rows, comparison, i);
  comparison.Run(workers);
  for (auto& w : workers) {
    w.source->Exec("COMMIT");
    w.target->Exec("COMMIT");
  }
  const double compare_seconds = std::chrono::duration<double>(Clock::now() - held).count();
  const double total_seconds = std::chrono::duration<double>(Clock::now() - started).count();

  std::vector<std::string> mismatching, not_compared;
  for (const auto& ts : tables) {
    if (!ts.compared()) not_compared.push_back(ts.table.name + " (snapshot " + ts.copy_state + ")");
    else if (!ts.match()) mismatching.push_back(ts.table.name);
  }
  auto rate = [](uint64_t rows, double seconds) { return seconds > 0 ? rows / seconds : 0.0; };

  if (options.format == OutputFormat::Json) {
    using J = nlohmann::ordered_json;
    J j;
    j["flow"] = config.flow_name;
    j["consistent_lsn"] = FormatLsn(point);
    j["hold_attempts"] = attempts;
    j["tables"] = J::array();
    for (const auto& ts : tables) {
      auto side = [](uint64_t rows, const std::string& error) {
        J o;
        o["rows"] = error.empty() ? J(rows) : J();
        o["error"] = error.empty() ? J() : J(error);
        return o;
      };
      J ranges = J::array();
      for (const auto& m : ts.mismatches) {
        ranges.push_back({{"key_column", ts.table.split_key ? J(ts.table.split_key_plain) : J()},
                          {"lo", m.range.lo ? J(*m.range.lo) : J()},
                          {"hi", m.range.hi ? J(*m.range.hi) : J()},
                          {"source_rows", m.source_rows},
                          {"target_rows", m.target_rows},
                          {"narrowed", m.narrowed},
                          {"reseed", ReseedCommand(config, ts.table, m.range)}});
      }
      const std::string status = !ts.compared()                                           ? "copying"
                                 : !ts.source_error.empty() || !ts.target_error.empty() ? "error"
                                 : ts.mismatches.empty()                               ? "match"
                                                                                       : "mismatch";
      j["tables"].push_back({{"table", ts.table.name},
                             {"status", status},
                             {"match", ts.compared() && ts.match()},
                             {"snapshot_state", ts.compared() ? J() : J(ts.copy_state)},
                             {"key_column", ts.table.split_key ? J(ts.table.split_key_plain) : J()},
                             {"chunks", ts.chunks},
                             {"source", side(ts.source_rows, ts.source_error)},
                             {"target", side(ts.target_rows, ts.target_error)},
                             {"mismatching_ranges", ranges}});
    }
    j["match"] = mismatching.empty() && not_compared.empty();
    j["mismatching_tables"] = mismatching;
    j["not_compared_tables"] = not_compared;
    j["jobs"] = options.jobs;
    j["seconds"] = total_seconds;
    j["compare_seconds"] = compare_seconds;
    // rows_per_second: all jobs together (compare wall time); per_job: one connection's own speed.
    j["source"] = {{"rows_read", comparison.source_rows_read}, {"query_seconds", comparison.source_seconds},
                   {"rows_per_second", rate(comparison.source_rows_read, compare_seconds)},
                   {"rows_per_second_per_job", rate(comparison.source_rows_read, comparison.source_seconds)}};
    j["target"] = {{"rows_read", comparison.target_rows_read}, {"query_seconds", comparison.target_seconds},
                   {"rows_per_second", rate(comparison.target_rows_read, compare_seconds)},
                   {"rows_per_second_per_job", rate(comparison.target_rows_read, comparison.target_seconds)}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "verify flow " << config.flow_name << " at source consistent point " << FormatLsn(point)
              << " (target held there, attempt " << attempts << ")\n";
    for (const auto& ts : tables) {
      auto describe = [](uint64_t rows, const std::string& error) {
        return error.empty() ? std::to_string(rows) + " rows" : "error: " + error;
      };
      if (!ts.compared()) {
        std::cout << "COPYING   " << ts.table.name << "  not compared: its snapshot copy is " << ts.copy_state << "\n";
        continue;
      }
      std::cout << (ts.match() ? "match     " : "MISMATCH  ") << ts.table.name << "  " << ts.chunks << " chunk"
                << (ts.chunks == 1 ? "" : "s") << "; source " << describe(ts.source_rows, ts.source_error)
                << "; target " << describe(ts.target_rows, ts.target_error) << "\n";
      for (const auto& m : ts.mismatches)
        std::cout << "  differs: " << ts.table.name << " " << DescribeRange(ts.table, m.range) << ": source "
                  << m.source_rows << " rows, target " << m.target_rows << " rows"
                  << (m.narrowed ? "" : " (not narrowed further)") << "\n    repair: "
                  << ReseedCommand(config, ts.table, m.range) << "\n";
    }
    std::cout << "compared in " << static_cast<int64_t>(compare_seconds * 1000) << " ms with " << options.jobs
              << " jobs: source " << static_cast<uint64_t>(rate(comparison.source_rows_read, compare_seconds))
              << " rows/s (" << static_cast<uint64_t>(rate(comparison.source_rows_read, comparison.source_seconds))
              << " per job), target " << static_cast<uint64_t>(rate(comparison.target_rows_read, compare_seconds))
              << " rows/s (" << static_cast<uint64_t>(rate(comparison.target_rows_read, comparison.target_seconds))
              << " per job)\n";
  }
  std::string copying_names;
  for (const auto& name : not_compared) copying_names += (copying_names.empty() ? "" : ", ") + name;
  if (mismatching.empty() && !not_compared.empty())
    throw CommandFailed("could not verify flow " + config.flow_name + " completely: " + copying_names +
                            " still being copied (the other tables match); rerun verify once trellara snapshot --config " +
                            config.path + " finished them",
                        kExitCouldNotHold);
  if (mismatching.empty()) return std::nullopt;
  std::string names;
  for (const auto& name : mismatching) names += (names.empty() ? "" : ", ") + name;
  return "flow " + config.flow_name + ": source and target differ in " + std::to_string(mismatching.size()) + " of " +
         std::to_string(tables.size()) + " tables at " + FormatLsn(point) + ": " + names +
         "; repair with the reseed commands printed above and rerun verify" +
         (copying_names.empty() ? std::string() : " (not compared, still being copied: " + copying_names + ")");
}

}  // namespace
}  // namespace verify_command

void RegisterVerify(CLI::App& app) {
  using namespace verify_command;
  auto* cmd = app.add_subcommand("verify", "compare source and target at one exact point while both are live (--config F)");
  auto options = std::make_shared<Options>();
  AddConfigOption(cmd, options->config_path);
  cmd->add_option("--table", options->tables, "only this table (schema.table; repeatable)");
  AddFormatOption(cmd, options->format);
  cmd->add_option("--timeout,--wait-seconds", options->timeout_seconds,
                  "how long to wait for the applier to reach the source's point (seconds, default 60)")
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--jobs", options->jobs, "chunks compared in parallel (default 4)")->check(CLI::Range(1, 64));
  cmd->add_option("--chunk-rows", options->chunk_rows, "about this many rows per compared chunk (default 100000)")
      ->check(CLI::Range(uint64_t{1000}, uint64_t{1} << 40));
  cmd->callback([options] {
    std::optional<std::string> mismatch;
    // Exit 1 means "differs" and nothing else: any failure before the comparison finished (a lost
    // connection, a refused statement) is "could not verify".
    try {
      mismatch = Run(*options);
    } catch (const CommandFailed& e) {
      if (e.exit_code == kExitCouldNotHold) throw;
      throw CommandFailed(std::string("could not verify: ") + e.what(), kExitCouldNotHold);
    } catch (const std::exception& e) {
      throw CommandFailed(std::string("could not verify: ") + e.what(), kExitCouldNotHold);
    }
    if (mismatch) throw CommandFailed(*mismatch, kExitMismatch);
  });
}

}  // namespace trellara::cli
