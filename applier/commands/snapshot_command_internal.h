// snapshot_command_internal.h — what the parts of `trellara snapshot` share: snapshot_command.cpp
// runs a snapshot, snapshot_plan.cpp decides what it copies (the run id, the flow's tables, their
// chunks), snapshot_registration.cpp registers each table in the target's snapshot tables,
// snapshot_state.cpp moves the run and its finished tables forward, snapshot_progress.cpp prints
// the progress. The copy itself is engine/snapshot_copy.cpp. Internal to applier/commands:
// included by these files only, and it adds no rule of its own (each part states its own).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/snapshot_copy.h"
#include "kit/config.h"
#include "kit/options.h"
#include "pg/pg_connection.h"
#include "trellara/apply/snapshot.h"

namespace trellara::cli::snapshot_detail {

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

// ---- snapshot_plan.cpp: what a run copies -----------------------------------------------------

// The flow's tables as the plugin sees them: the publication's tables (or `selected` of them), the
// columns the stream carries, the row filter, and the leading key column when it can be split.
std::vector<SnapshotTable> PublishedTables(PgConnection& source, const FlowConfig& config,
                                           const std::vector<std::string>& selected);
// The table's chunks on its splittable leading key column (PublishedTables); otherwise one
// unbounded chunk.
void PlanTable(PgConnection& source, SnapshotTable& t, uint64_t chunk_rows);
// The run to create or resume: --run-id (checked), else the flow's one unfinished run, else a new
// snap-YYYYMMDD-HHMMSS. Several unfinished runs end the command.
std::string ResolveRunId(PgConnection& target, const FlowConfig& config, const Options& o);

// ---- snapshot_registration.cpp: a table registered in the target's snapshot tables ------------

// Core's DecideRegistration for one table; a refusal ends the command.
Registration Decide(const SnapshotTable& t, const std::optional<std::pair<std::string, SnapshotState>>& row,
                    const std::string& run_id, const Options& o, const FlowConfig& config);
// The table's registered run id and state (nullopt: not registered), FOR UPDATE when asked.
std::optional<std::pair<std::string, SnapshotState>> ReadTableRow(PgConnection& target, const FlowConfig& config,
                                                                  const SnapshotTable& t, bool for_update);
// Registers (or resumes) one table in one target transaction under the flow's control lock, and
// moves it to copying when chunks are pending. Fills t.pending / t.chunks / t.registration.
void RegisterTable(PgConnection& target, const FlowConfig& config, const std::string& run_id, SnapshotTable& t,
                   const Options& o);

// ---- snapshot_state.cpp: the run's state and a finished table's --------------------------------

// A state as the target's registry spells it; an unreadable one ends the command.
SnapshotState StateOrFail(const std::optional<std::string>& text, const std::string& what);
// The run's state (nullopt: no run row).
std::optional<SnapshotState> ReadRunState(PgConnection& target, const FlowConfig& config, const std::string& run_id);
// Moves the run's state to `to` when the transition is allowed (it is read under FOR UPDATE).
void MoveRun(PgConnection& target, const FlowConfig& config, const std::string& run_id, SnapshotState to, bool force,
             const std::optional<std::string>& error = std::nullopt);
// copying -> copied -> handoff_ready, once every chunk of the table's registration is copied.
// Returns the error text when the table is not (yet) complete.
std::optional<std::string> FinishTable(PgConnection& target, const FlowConfig& config, const std::string& run_id,
                                       const SnapshotTable& t, double seconds);

// ---- snapshot_progress.cpp: the progress lines ------------------------------------------------

class SnapshotProgress {
 public:
  SnapshotProgress(std::string flow, std::string run_id, FILE* out);

  // Called about once a second while workers run.
  void Tick(const std::vector<SnapshotTable>& tables, std::deque<TableProgress>& progress, bool final);

 private:
  std::string flow_, run_id_;
  FILE* out_;
  bool tty_;
  int drawn_lines_ = 0;
  Clock::time_point last_line_ = Clock::now();
};

}  // namespace trellara::cli::snapshot_detail
