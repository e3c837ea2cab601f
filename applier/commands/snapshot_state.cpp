// snapshot_state.cpp — the states a snapshot run and a finished table move through on the target
// (docs/snapshot.md): the run's state (MoveRun), and a table whose chunks are all copied moved to
// copied, then handoff_ready (FinishTable), with its quarantined row conflicts marked replay-ready.
//
// Every move is read under FOR UPDATE and checked by core's CheckSnapshotTransition. Never writes a
// table's handoff_ready before every one of its chunks is committed as copied, never finishes a
// table another run took over, and never resolves a quarantined transaction (it is only retried).
#include <iostream>
#include <string>
#include <vector>

#include "pg/session.h"
#include "snapshot_command_internal.h"
#include "trellara/base/fault.h"

namespace trellara::cli::snapshot_detail {

SnapshotState StateOrFail(const std::optional<std::string>& text, const std::string& what) {
  auto s = ParseSnapshotState(text.value_or(""));
  if (!s) throw CommandFailed("the target's snapshot state of " + what + " is unreadable: " + s.error().message);
  return *s;
}

std::optional<SnapshotState> ReadRunState(PgConnection& target, const FlowConfig& config, const std::string& run_id) {
  auto r = MustSucceed(target,
                       target.ExecParams("SELECT state FROM trellara.snapshot_runs WHERE flow = $1 AND run_id = $2",
                                         {config.flow_name, run_id}),
                       "reading snapshot run " + run_id + " of flow " + config.flow_name);
  if (r.rows() == 0) return std::nullopt;
  return StateOrFail(r.Value(0, 0), "snapshot run " + run_id);
}

void MoveRun(PgConnection& target, const FlowConfig& config, const std::string& run_id, SnapshotState to, bool force,
             const std::optional<std::string>& error) {
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

}  // namespace trellara::cli::snapshot_detail
