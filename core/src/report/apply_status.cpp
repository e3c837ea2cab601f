// apply_status.cpp — see apply_status.h.
#include "trellara/report/apply_status.h"

namespace trellara {

ApplyStatusVerdict DecideApplyStatus(const ApplyStatusFacts& s) {
  ApplyStatusVerdict v;
  const std::string apply_cmd = "trellara apply --config " + s.config_path;
  const bool retrying = s.retry && (s.retry->state == "retrying" || s.retry->state == "reconnecting");
  if (!s.blocking && retrying) {
    const ApplierRetryState& r = *s.retry;
    v.state = r.state;
    v.next_action = std::string("nothing to do if the target comes back: the running applier ") +
                    (r.state == "reconnecting" ? "lost the target and is reconnecting" : "is retrying a transient failure") +
                    " (attempt " + std::to_string(r.attempt) + ", since " + r.since + "); last error: " + r.last_error +
                    (r.sqlstate.empty() ? std::string() : " (SQLSTATE " + r.sqlstate + ")") +
                    "; if it persists, fix the target (running? writable? reachable with [target] conninfo in " +
                    s.config_path + "?)";
    return v;
  }
  if (!s.target_error.empty()) {
    v.state = "target_unreachable";
    v.next_action = "cannot reach the target of flow " + s.flow + ": " + s.target_error +
                    "; start it or fix [target] conninfo in " + s.config_path + ", then run " + apply_cmd +
                    " if no applier is running";
    return v;
  }
  if (s.blocking) {
    v.state = "blocked";
    v.next_action = s.blocking->message + "; or from the CLI, after the repair: trellara quarantine replay-ready --config " +
                    s.config_path + " --xid " + s.blocking->xid + " --commit-lsn " + s.blocking->commit_lsn +
                    (s.applier_running ? " (the running applier retries it within a second)"
                                       : ", then run " + apply_cmd);
  } else if (s.applier_running) {
    if (s.lag_records == 0) {
      v.state = "caught_up";
      v.next_action = "nothing to do: the running applier is at the end of the log and applies new transactions as "
                      "they arrive";
    } else {
      v.state = "running";
      v.next_action = "nothing to do: the running applier is " + std::to_string(s.lag_records) +
                      " records behind the log and catching up";
    }
  } else if (!s.target_state_present || s.recorded_state.empty()) {
    // Never applied on this target: "caught up" would be a claim about nothing, even when the log
    // is still empty (a new flow before its first record).
    v.state = "stopped";
    v.next_action = "trellara apply has not run for flow " + s.flow + " on this target: run " + apply_cmd;
  } else if (s.lag_records == 0 && !s.waiting) {
    v.state = "caught_up";
    v.next_action = "nothing to apply now; no applier is running, so new transactions wait in the log: run " +
                    apply_cmd + " to follow them";
  } else {
    v.state = "stopped";
    if (s.waiting)
      v.next_action = "run " + apply_cmd + ": it retries transaction " + s.waiting->xid + " (commit " +
                      s.waiting->commit_lsn + "), marked replay-ready, and continues";
    else
      v.next_action = "run " + apply_cmd + " (" + std::to_string(s.lag_records) + " records, " +
                      std::to_string(s.lag_bytes) + " bytes to apply; add --until-caught-up to stop at the end)";
  }
  if (s.snapshot_tables_unfinished > 0)
    v.next_action += "; and the initial copy is not finished: " + std::to_string(s.snapshot_tables_unfinished) +
                     " table(s) of snapshot run " + s.snapshot_unfinished_run +
                     " are not handoff-ready: run trellara snapshot --config " + s.config_path + " --run-id " +
                     s.snapshot_unfinished_run + " (it copies only the missing chunks)";
  return v;
}

}  // namespace trellara
