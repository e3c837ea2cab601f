// apply_status.h — `trellara status`'s verdict: the flow's apply state and the safe next action in
// words, as a pure function of facts the command reads from the target and the log (issue 5,
// deliverable 8; DESIGN §7 "status names the safe next action").
//
//   blocked    a quarantined boundary exists (whether or not an applier runs): the action is the
//              quarantine's own message plus the CLI replay-ready command;
//   running    an applier holds the flow and the log is ahead of the consumer offset;
//   caught_up  nothing left in the log (with or without a running applier);
//   stopped    no applier runs and there is work: a replay-ready boundary to retry, a flow never
//              applied on this target, or records to apply.
// The adapter (applier/status_command.cpp) only reads the facts and prints the verdict.
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
};

struct ApplyStatusVerdict {
  std::string state;  // running | caught_up | blocked | stopped
  std::string next_action;
};

ApplyStatusVerdict DecideApplyStatus(const ApplyStatusFacts& facts);

}  // namespace trellara
