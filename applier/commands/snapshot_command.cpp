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
//
// This file runs a snapshot; its parts are snapshot_plan.cpp (the run id, the tables, their
// chunks), snapshot_registration.cpp (registering each table), snapshot_state.cpp (the run's and
// a finished table's state), snapshot_progress.cpp (the progress lines) and engine/snapshot_copy.cpp
// (the copy workers).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "commands/commands.h"
#include "engine/snapshot_copy.h"
#include "pg/target_schema.h"
#include "snapshot_command_internal.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace snapshot_command {
namespace {

using namespace snapshot_detail;

// How long after registering tables the first chunk's copy starts (see Run).
constexpr auto kCommitLogMargin = std::chrono::seconds(1);

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
}  // namespace snapshot_command

void RegisterSnapshot(CLI::App& app) {
  using namespace snapshot_command;
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
