// apply_status.h — `trellara status`'s verdict: the flow's apply state and the safe next action in
// words, as a pure function of facts the command reads from the target and the log
// (DESIGN §7 "status names the safe next action").
//
//   blocked    a quarantined boundary exists (whether or not an applier runs): the action is the
//              quarantine's own message plus the CLI replay-ready command;
//   running    an applier holds the flow and the log is ahead of the consumer offset;
//   caught_up  nothing left in the log (with or without a running applier);
//   stopped    no applier runs and there is work: a replay-ready boundary to retry, a flow never
//              applied on this target, or records to apply;
//   retrying / reconnecting
//              a live applier (its state file's pid is alive) is retrying a transient failure on
//              its session, or has lost the target and is reconnecting: the
//              action names the last error, the attempt and since when; nothing to do but fix the
//              target if it does not come back;
//   target_unreachable
//              status itself cannot reach the target and no live applier is retrying.
// A quarantine still wins over retrying (it can only be seen when the target answers).
// The adapter (applier/commands/status_command.cpp) only reads the facts and prints the verdict.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trellara {

struct StatusBoundary {
  std::string xid;
  std::string commit_lsn;
  std::string message;  // the quarantine row's operator message
};

// What a live applier wrote about its retries (applier state file).
struct ApplierRetryState {
  std::string state;  // retrying | reconnecting (other states are not retries)
  std::string last_error;
  std::string sqlstate;  // "" for a lost connection
  uint64_t attempt = 0;
  std::string since;  // UTC time of the first failure of this series
};

struct ApplyStatusFacts {
  std::string flow;
  std::string config_path;            // for the commands the action names
  bool target_state_present = false;  // the trellara schema exists on the target
  std::string recorded_state;         // trellara.apply_status row; "" when none
  bool applier_running = false;       // a session holds the flow's applier lock
  uint64_t lag_records = 0;           // log records past the consumer offset
  uint64_t lag_bytes = 0;
  std::optional<StatusBoundary> blocking;  // the oldest quarantined boundary
  std::optional<StatusBoundary> waiting;   // the oldest replay-ready boundary
  // status's own connection to the target failed with this error ("" when it connected; then
  // the target facts above are unknown and left at their defaults).
  std::string target_error;
  // The applier's state file (<log>/consumers/.applier.state) when its writer is alive.
  std::optional<ApplierRetryState> retry;
  // Tables of this flow whose copy (trellara snapshot / reseed) is not handoff-ready, and the run
  // that owns the first of them: the initial copy still has to be finished.
  uint64_t snapshot_tables_unfinished = 0;
  std::string snapshot_unfinished_run;
};

struct ApplyStatusVerdict {
  std::string state;  // running | caught_up | blocked | stopped | retrying | reconnecting | target_unreachable
  std::string next_action;
};

ApplyStatusVerdict DecideApplyStatus(const ApplyStatusFacts& facts);

}  // namespace trellara
