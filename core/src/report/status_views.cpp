// status_views.cpp — see status_views.h.
#include "trellara/report/status_views.h"

namespace trellara {

namespace {

Alert Make(std::string name, std::string severity) {
  Alert a;
  a.name = std::move(name);
  a.severity = std::move(severity);
  return a;
}

Alert Threshold(const char* name, uint64_t value, uint64_t threshold, const std::string& what,
                const std::string& next_action) {
  Alert a = Make(name, "warning");
  a.numeric = true;
  a.value = std::to_string(value);
  a.threshold = std::to_string(threshold);
  if (threshold == 0) {
    a.why = what + " is " + a.value + "; the alert is disabled (threshold 0)";
    return a;
  }
  a.firing = value > threshold;
  a.why = what + " is " + a.value + (a.firing ? ", over the threshold " : ", within the threshold ") + a.threshold;
  a.next_action = a.firing ? next_action : "nothing to do";
  return a;
}

}  // namespace

std::vector<Alert> DecideAlerts(const AlertFacts& f, const AlertThresholds& t) {
  std::vector<Alert> out;
  const std::string apply_cmd = "trellara apply --config " + f.config_path;
  const std::string diagnose = "trellara status --config " + f.config_path + " --view diagnostics";

  {
    Alert a = Make("quarantine_present", "critical");
    a.numeric = true;
    a.threshold = "0";
    if (!f.target_reachable) {
      a.numeric = false;
      a.value = "unknown";
      a.why = "the target is not reachable: its quarantine cannot be read";
      a.next_action = "see target_unreachable";
    } else {
      a.value = std::to_string(f.quarantined);
      a.firing = f.quarantined > 0;
      if (a.firing) {
        a.why = std::to_string(f.quarantined) + " transaction(s) of flow " + f.flow +
                " quarantined; the applier halts at the oldest, xid " + f.blocking_xid + " (commit " +
                f.blocking_commit_lsn + ")";
        a.next_action = f.apply_next_action;
      } else {
        a.why = "no transaction of flow " + f.flow + " is quarantined";
        a.next_action = "nothing to do";
      }
    }
    out.push_back(std::move(a));
  }
  {
    Alert a = Make("applier_not_running", "critical");
    a.numeric = true;
    a.value = std::to_string(f.lag_records);
    a.threshold = "0";
    a.firing = !f.applier_running && f.transactions_pending;
    if (a.firing) {
      a.why = "no applier runs for flow " + f.flow + " and the log holds transactions past its consumer offset (" +
              a.value + " record(s))";
      a.next_action = f.quarantined > 0 ? "repair the quarantine first (see quarantine_present), then run " + apply_cmd
                                        : "run " + apply_cmd + " (or start its service)";
    } else {
      a.why = f.applier_running ? "an applier runs for flow " + f.flow
                                : "no applier runs, but no transaction in the log waits to be applied" +
                                      (f.lag_records ? std::string(" (only ") + a.value + " progress record(s))" : "");
      a.next_action = "nothing to do";
    }
    out.push_back(std::move(a));
  }
  {
    Alert a = Make("target_unreachable", "critical");
    a.value = f.target_reachable ? "reachable" : "unreachable";
    a.threshold = "reachable";
    a.firing = !f.target_reachable;
    a.why = a.firing ? f.target_error : "status connected to the target";
    a.next_action = a.firing ? "start the target or fix [target] conninfo in " + f.config_path : "nothing to do";
    out.push_back(std::move(a));
  }
  {
    Alert a = Make("relay_error", "critical");
    a.threshold = "not failed/backoff";
    if (!f.source_checked) {
      a.value = "unknown";
      a.why = "the relay was not checked: " + f.source_unchecked_reason;
      a.next_action = "nothing to do for this alert; to evaluate it, make the source reachable with [source] conninfo in " +
                      f.config_path;
    } else if (f.relay_state.empty()) {
      a.value = "absent";
      a.firing = true;
      a.why = "the source has no flow " + f.flow + " in trellara.status()";
      a.next_action = "create the flow on the source (SELECT trellara.create_flow(...)) or fix [flow] name in " +
                      f.config_path;
    } else {
      a.value = f.relay_state;
      // failed/backoff: the launcher restarts the relay; error: the flow cannot continue as it is
      // and the relay is not restarted (docs/relay.md, "the error state").
      a.firing = f.relay_state == "failed" || f.relay_state == "backoff" || f.relay_state == "error";
      if (a.firing) {
        a.why = "the relay of flow " + f.flow + " is " + f.relay_state +
                (f.relay_last_error.empty() ? std::string() : ": " + f.relay_last_error);
        a.next_action = f.relay_state == "error"
                            ? "the relay is not restarted in the error state: follow the last error's HINT "
                              "(trellara.status() on the source), then on the source: SELECT trellara.start_flow('" + f.flow + "')"
                            : "fix the cause named in the relay's last error (source server log, trellara.status() on "
                              "the source); the relay retries by itself";
      } else {
        a.why = "the relay of flow " + f.flow + " is " + f.relay_state;
        a.next_action = "nothing to do";
      }
    }
    out.push_back(std::move(a));
  }
  {
    Alert a = Make("log_consumer_lost", "critical");
    a.value = f.consumer_lost ? "lost" : "live";
    a.threshold = "live";
    a.firing = f.consumer_lost;
    a.why = a.firing ? "the log's retention ceiling deleted records the applier of flow " + f.flow +
                           " had not applied; its consumer is marked lost"
                     : "the applier's consumer is not marked lost";
    a.next_action = a.firing ? "reseed the target (trellara reseed --config " + f.config_path +
                               "), then unregister the lost consumer (SELECT trellara.unregister_consumer('" + f.flow +
                               "', 'applier') on the source) and run " + apply_cmd
                             : "nothing to do";
    out.push_back(std::move(a));
  }
  out.push_back(Threshold("lag_records", f.lag_records, t.lag_records,
                          "the number of log records past the applier's consumer offset",
                          f.applier_running ? "watch it fall; if it does not, see " + diagnose
                                            : "run " + apply_cmd));
  out.push_back(Threshold("lag_bytes", f.lag_bytes, t.lag_bytes,
                          "the log bytes past the applier's consumer offset",
                          f.applier_running ? "watch it fall; if it does not, see " + diagnose
                                            : "run " + apply_cmd));
  if (f.log_bytes) {
    out.push_back(Threshold("log_retention_bytes", *f.log_bytes, t.log_retention_bytes,
                            "the bytes the log directory's segments hold",
                            "find the slowest consumer (" + diagnose +
                                ", consumers) and let it catch up, or unregister a consumer that is gone"));
  } else {
    Alert a = Make("log_retention_bytes", "warning");
    a.value = "unknown";
    a.threshold = std::to_string(t.log_retention_bytes);
    a.why = "the log directory's segment sizes could not be read";
    a.next_action = "see " + diagnose;
    out.push_back(std::move(a));
  }
  if (f.broker) {
    Alert a = Make("broker_quorum_unavailable", "critical");
    if (f.broker_process.empty()) {
      a.value = "unknown";
      a.why = "neither trellara forward nor a remote trellara apply of this flow runs on this host with this "
              "log directory, so nothing says whether the broker acknowledges";
      a.next_action = "run trellara status on the host of the forwarder or of the remote applier";
    } else {
      a.firing = f.broker_state == "broker_quorum_unavailable";
      a.value = f.broker_state;
      a.why = f.broker_process + (a.firing ? " has had no acknowledgement from the broker since " + f.broker_since +
                                                 (f.broker_error.empty() ? "" : ": " + f.broker_error) +
                                                 "; nothing is published or received meanwhile, and with source_ack = "
                                                 "broker_quorum the source's slot does not advance (its WAL is kept)"
                                           : " reaches the broker (state " + f.broker_state + ")");
      a.next_action = a.firing ? "bring the NATS cluster's quorum back (docs/broker.md \"Failure playbook\"): "
                                 "start the stopped nodes, check each node's /healthz; both processes resume "
                                 "by themselves"
                               : "none";
    }
    out.push_back(std::move(a));
  }
  return out;
}

int AlertsExitCode(const std::vector<Alert>& alerts) {
  bool warning = false;
  for (const Alert& a : alerts) {
    if (!a.firing) continue;
    if (a.severity == "critical") return kAlertsExitCritical;
    warning = true;
  }
  return warning ? kAlertsExitWarning : kAlertsExitNone;
}

std::string AlertsSummary(const std::vector<Alert>& alerts) {
  switch (AlertsExitCode(alerts)) {
    case kAlertsExitCritical: return "critical";
    case kAlertsExitWarning: return "warning";
    default: return "ok";
  }
}

}  // namespace trellara
