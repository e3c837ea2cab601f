// status_print.cpp — how `trellara status` shows what it read (status_read.h): the dashboard,
// and the diagnostics, alerts and report views (docs/status.md). The alerts' decisions are core's
// (trellara/report/status_views.h).
#include <algorithm>
#include <csignal>
#include <cerrno>
#include <map>
#include <type_traits>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "broker/broker_state.h"
#include "commands/status_print.h"
#include "kit/errors.h"
#include "trellara/report/apply_status.h"
#include "trellara/record/envelope.h"
#include "trellara/report/status_views.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/format.h"
#include "trellara/log/reader.h"
#include "trellara/log/retention.h"
#include "trellara/log/uring_device.h"


namespace trellara::cli::status {

void Print(const FlowConfig& config, const FlowStatus& s, OutputFormat format) {
  // The last durable record's offset; the log is empty when its durable end is 0.
  const bool has_records = s.log.end_offset > 0;
  const uint64_t last_offset = has_records ? s.log.end_offset - 1 : 0;
  if (format == OutputFormat::Json) {
    nlohmann::ordered_json j;
    j["flow"] = config.flow_name;
    j["state"] = s.state;
    j["applier_running"] = s.applier_running;
    j["recorded_state"] = s.recorded_state.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s.recorded_state);
    j["applied_commit_lsn"] = s.applied_commit_lsn ? nlohmann::ordered_json(*s.applied_commit_lsn) : nlohmann::ordered_json();
    j["consumer_offset"] = s.log.consumer_offset ? nlohmann::ordered_json(*s.log.consumer_offset) : nlohmann::ordered_json();
    j["log_last_offset"] = has_records ? nlohmann::ordered_json(last_offset) : nlohmann::ordered_json();
    j["log_end_offset"] = s.log.end_offset;
    j["log_last_commit_lsn"] = s.log.last_commit_lsn ? nlohmann::ordered_json(FormatLsn(s.log.last_commit_lsn))
                                                     : nlohmann::ordered_json();
    j["lag_records"] = s.log.lag_records;
    j["lag_bytes"] = s.log.lag_bytes;
    j["quarantined"] = s.quarantined;
    j["replay_ready"] = s.replay_ready;
    j["last_error"] = s.last_error ? nlohmann::ordered_json(*s.last_error) : nlohmann::ordered_json();
    j["target_error"] = s.target_error.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s.target_error);
    if (s.applier_state && (s.applier_state->state == "retrying" || s.applier_state->state == "reconnecting"))
      j["retry"] = {{"state", s.applier_state->state},
                    {"last_error", s.applier_state->last_error},
                    {"sqlstate", s.applier_state->sqlstate},
                    {"attempt", s.applier_state->attempt},
                    {"since", s.applier_state->since}};
    else
      j["retry"] = nullptr;
    // Stopped at a hold of verify / reseed --where (docs/snapshot.md): what it waits for.
    j["held"] = s.applier_state && s.applier_state->state == "held" ? nlohmann::ordered_json(s.applier_state->last_error)
                                                                      : nlohmann::ordered_json();
    j["status_updated_at"] = s.updated_at ? nlohmann::ordered_json(*s.updated_at) : nlohmann::ordered_json();
    if (s.blocking) {
      j["blocked_at"] = {{"xid", std::stoull(s.blocking->xid)},
                         {"commit_lsn", s.blocking->commit_lsn},
                         {"reason", s.blocking->reason}};
    }
    j["snapshot"] = nlohmann::ordered_json::array();
    for (const SnapshotRow& t : s.snapshot)
      j["snapshot"].push_back({{"table", t.table},
                               {"run_id", t.run_id},
                               {"state", t.state},
                               {"chunks", t.chunks},
                               {"chunks_copied", t.chunks_copied},
                               {"rows", t.rows_copied},
                               {"bytes", t.bytes_copied},
                               {"skipped_transactions", t.skipped_transactions},
                               {"seconds", t.seconds},
                               {"last_error", t.last_error ? nlohmann::ordered_json(*t.last_error) : nlohmann::ordered_json()}});
    j["next_action"] = s.next_action;
    std::cout << j.dump(2) << "\n";
    return;
  }
  auto or_none = [](const std::optional<std::string>& v) { return v ? *v : std::string("none"); };
  std::cout << "flow:                " << config.flow_name << "\n"
            << "state:               " << s.state << "\n"
            << "applier running:     " << (s.applier_running ? "yes (holds the flow's advisory lock on the target)" : "no")
            << "\n"
            << "applied commit LSN:  " << or_none(s.applied_commit_lsn) << "  (replication origin trellara_"
            << config.flow_name << ")\n"
            << "consumer offset:     "
            << (s.log.consumer_offset ? std::to_string(*s.log.consumer_offset) : std::string("none (never written)"))
            << "\n"
            << "log last offset:     " << (has_records ? std::to_string(last_offset) : std::string("none (empty log)"))
            << "  (durable end " << s.log.end_offset << ")\n"
            << "lag:                 " << s.log.lag_records << " records, " << s.log.lag_bytes << " bytes\n"
            << "quarantined:         " << s.quarantined << " (replay-ready: " << s.replay_ready << ")\n";
  if (s.last_error && !s.last_error->empty()) std::cout << "last error:          " << *s.last_error << "\n";
  if (!s.target_error.empty()) std::cout << "target:              unreachable: " << s.target_error << "\n";
  if (s.applier_state && (s.applier_state->state == "retrying" || s.applier_state->state == "reconnecting"))
    std::cout << "applier:             " << s.applier_state->state << " (attempt " << s.applier_state->attempt
              << ", since " << s.applier_state->since << "): " << s.applier_state->last_error
              << (s.applier_state->sqlstate.empty() ? std::string() : " (SQLSTATE " + s.applier_state->sqlstate + ")")
              << "\n";
  if (s.applier_state && s.applier_state->state == "held")
    std::cout << "applier:             " << s.applier_state->last_error << "\n";
  for (const SnapshotRow& t : s.snapshot) {
    std::cout << "snapshot:            " << t.table << " " << t.state << " (run " << t.run_id << "): " << t.chunks_copied
              << "/" << t.chunks << " chunks, " << t.rows_copied << " rows, " << t.bytes_copied << " bytes";
    if (t.skipped_transactions) std::cout << ", " << t.skipped_transactions << " streamed transactions wait for their chunk";
    if (t.last_error && !t.last_error->empty()) std::cout << "; last error: " << *t.last_error;
    std::cout << "\n";
  }
  std::cout << "next action:         " << s.next_action << "\n";
}



std::string RelayState(const SourceFacts& s) {
  if (!s.status_row) return "";
  const Json& st = (*s.status_row)["state"];
  return st.is_string() ? st.get<std::string>() : "";
}

std::vector<Alert> Alerts(const FlowConfig& config, const std::string& config_path, const FlowStatus& s,
                          const Extended& e, const AlertThresholds& thresholds) {
  AlertFacts f;
  f.flow = config.flow_name;
  f.config_path = config_path;
  f.apply_next_action = s.next_action;
  f.target_reachable = s.target_error.empty();
  f.target_error = s.target_error;
  f.applier_running = s.applier_running;
  f.quarantined = s.quarantined;
  if (s.blocking) {
    f.blocking_xid = s.blocking->xid;
    f.blocking_commit_lsn = s.blocking->commit_lsn;
  }
  f.lag_records = s.log.lag_records;
  f.lag_bytes = s.log.lag_bytes;
  f.transactions_pending = s.log.last_commit_lsn != 0;  // set only by transaction frames past the offset
  if (e.log.error.empty()) f.log_bytes = e.log.bytes;
  f.consumer_lost = e.log.applier_lost;
  f.source_checked = e.source.reachable;
  f.source_unchecked_reason = e.source.error;
  f.relay_state = RelayState(e.source);
  if (e.source.status_row && (*e.source.status_row)["last_error"].is_string())
    f.relay_last_error = (*e.source.status_row)["last_error"].get<std::string>();
  f.broker = config.transport.kind == TransportKind::Nats;
  if (f.broker) {
    if (auto b = broker::ReadBrokerState(config.log_directory)) {
      f.broker_process = b->process + " (pid " + std::to_string(b->pid) + ")";
      f.broker_state = b->state;
      f.broker_since = b->since;
      f.broker_error = b->last_error;
    }
  }
  return DecideAlerts(f, thresholds);
}

Json OrNull(const std::optional<std::string>& v) { return v ? Json(*v) : Json(); }
Json OrNull(const std::optional<uint64_t>& v) { return v ? Json(*v) : Json(); }
Json ErrorOrNull(const std::string& error) { return error.empty() ? Json() : Json(error); }

Json AlertsJson(const std::vector<Alert>& alerts) {
  Json out = Json::array();
  for (const Alert& a : alerts)
    out.push_back({{"name", a.name},
                   {"severity", a.severity},
                   {"firing", a.firing},
                   {"value", a.numeric ? Json(std::stoull(a.value)) : Json(a.value)},
                   {"threshold", a.numeric ? Json(std::stoull(a.threshold)) : Json(a.threshold)},
                   {"why", a.why},
                   {"next_action", a.next_action}});
  return out;
}

Json SourceJson(const SourceFacts& s) {
  Json j;
  j["configured"] = s.configured;
  j["reachable"] = s.reachable;
  j["server"] = s.described.empty() ? Json() : Json(s.described);
  j["error"] = ErrorOrNull(s.error);
  j["relay"] = s.status_row ? *s.status_row : Json();
  Json metrics = Json::object();
  for (const auto& [name, value] : s.metrics) metrics[name] = value;
  j["relay_metrics"] = s.reachable && s.metrics_error.empty() ? metrics : Json();
  j["relay_metrics_error"] = ErrorOrNull(s.metrics_error);
  return j;
}

void PrintDiagnostics(const FlowConfig& config, const FlowStatus& s, const Extended& e, OutputFormat format) {
  if (format == OutputFormat::Json) {
    Json j;
    j["view"] = "diagnostics";
    j["flow"] = config.flow_name;
    j["state"] = s.state;
    Json lg;
    lg["directory"] = config.log_directory;
    lg["error"] = ErrorOrNull(e.log.error);
    lg["segments"] = e.log.segments;
    lg["bytes"] = e.log.bytes;
    lg["first_offset"] = OrNull(e.log.first_offset);
    lg["last_offset"] = s.log.end_offset > 0 ? Json(s.log.end_offset - 1) : Json();
    lg["end_offset"] = s.log.end_offset;
    lg["pending_last_commit_lsn"] = s.log.last_commit_lsn ? Json(FormatLsn(s.log.last_commit_lsn)) : Json();
    lg["lag_records"] = s.log.lag_records;
    lg["lag_bytes"] = s.log.lag_bytes;
    lg["consumers"] = Json::array();
    for (const auto& [name, c] : e.log.consumers)
      lg["consumers"].push_back({{"name", name}, {"next_offset", c.next_offset}, {"lost", c.lost}});
    if (e.source.status_row) {
      lg["retained_bytes"] = (*e.source.status_row)["log_retained_bytes"];
      lg["retained_by"] = (*e.source.status_row)["log_retained_by"];
    } else {
      lg["retained_bytes"] = nullptr;
      lg["retained_by"] = nullptr;
    }
    j["log"] = lg;
    Json t;
    t["reachable"] = s.target_error.empty();
    t["server"] = e.target_described.empty() ? Json() : Json(e.target_described);
    t["error"] = ErrorOrNull(s.target_error);
    t["applier_running"] = s.applier_running;
    t["lock_holders"] = Json::array();
    for (const LockHolder& h : e.lock_holders)
      t["lock_holders"].push_back({{"pid", std::stoll(h.pid)},
                                   {"application_name", h.application_name},
                                   {"user", h.user},
                                   {"client", h.client},
                                   {"backend_start", h.backend_start},
                                   {"state", h.state}});
    t["lock_error"] = ErrorOrNull(e.lock_error);
    t["origin"] = {{"name", "trellara_" + config.flow_name},
                   {"remote_lsn", OrNull(e.origin_remote_lsn)},
                   {"local_lsn", OrNull(e.origin_local_lsn)},
                   {"error", ErrorOrNull(e.origin_error)}};
    t["applied_commit_lsn"] = OrNull(s.applied_commit_lsn);
    t["recorded_state"] = s.recorded_state.empty() ? Json() : Json(s.recorded_state);
    t["recorded_consumer_offset"] = OrNull(e.recorded_consumer_offset);
    t["last_session_applied"] = OrNull(e.applied_transactions);
    t["last_session_skipped_duplicates"] = OrNull(e.skipped_duplicates);
    t["dedup_rows"] = OrNull(e.dedup_rows);
    t["dedup_error"] = ErrorOrNull(e.dedup_error);
    t["last_error"] = OrNull(s.last_error);
    t["status_updated_at"] = OrNull(s.updated_at);
    t["state_error"] = ErrorOrNull(e.state_error);
    t["quarantine"] = Json::array();
    for (const QuarantineRow& q : e.open_quarantine)
      t["quarantine"].push_back({{"xid", q.xid}, {"commit_lsn", q.commit_lsn}, {"state", q.state},
                                 {"reason", q.reason}, {"message", q.message}});
    j["target"] = t;
    j["applier_state_file"] = s.applier_state ? Json({{"state", s.applier_state->state},
                                                      {"last_error", s.applier_state->last_error},
                                                      {"sqlstate", s.applier_state->sqlstate},
                                                      {"attempt", s.applier_state->attempt},
                                                      {"since", s.applier_state->since}})
                                              : Json();
    j["source"] = SourceJson(e.source);
    j["next_action"] = s.next_action;
    std::cout << j.dump(2) << "\n";
    return;
  }
  auto opt = [](const auto& v, const std::string& none) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::optional<std::string>>) return v ? *v : none;
    else return v ? std::to_string(*v) : none;
  };
  std::cout << "flow " << config.flow_name << ": " << s.state << "\n\nlog (" << config.log_directory << ")\n";
  if (!e.log.error.empty()) std::cout << "  error:               " << e.log.error << "\n";
  std::cout << "  segments:            " << e.log.segments << " (" << e.log.bytes << " bytes)\n"
            << "  first offset:        " << opt(e.log.first_offset, "none") << "\n"
            << "  last offset:         " << (s.log.end_offset ? std::to_string(s.log.end_offset - 1) : std::string("none (empty log)"))
            << "  (durable end " << s.log.end_offset << ")\n"
            << "  pending up to:       "
            << (s.log.last_commit_lsn ? "commit " + FormatLsn(s.log.last_commit_lsn) : std::string("no pending transaction"))
            << "\n"
            << "  lag:                 " << s.log.lag_records << " records, " << s.log.lag_bytes << " bytes\n";
  for (const auto& [name, c] : e.log.consumers)
    std::cout << "  consumer:            " << name << " at offset " << c.next_offset << (c.lost ? " (LOST)" : "") << "\n";
  if (e.log.consumers.empty() && e.log.error.empty()) std::cout << "  consumer:            none registered\n";
  if (e.source.status_row)
    std::cout << "  retained:            " << (*e.source.status_row)["log_retained_bytes"].dump() << " bytes, by "
              << (*e.source.status_row)["log_retained_by"].dump() << " (source trellara.status())\n";
  std::cout << "\ntarget" << (e.target_described.empty() ? "" : " (" + e.target_described + ")") << "\n";
  if (!s.target_error.empty()) {
    std::cout << "  unreachable:         " << s.target_error << "\n";
  } else {
    std::cout << "  applier running:     " << (s.applier_running ? "yes" : "no") << "\n";
    for (const LockHolder& h : e.lock_holders)
      std::cout << "  lock holder:         pid " << h.pid << ", application_name " << h.application_name << ", user "
                << h.user << ", client " << h.client << ", since " << h.backend_start << ", " << h.state << "\n";
    if (!e.lock_error.empty()) std::cout << "  lock holder:         unknown: " << e.lock_error << "\n";
    std::cout << "  origin trellara_" << config.flow_name << ": "
              << (e.origin_error.empty() ? "remote " + opt(e.origin_remote_lsn, "none") + ", local " +
                                               opt(e.origin_local_lsn, "none")
                                         : "unknown: " + e.origin_error)
              << "\n"
              << "  applied commit LSN:  " << opt(s.applied_commit_lsn, "none") << "\n"
              << "  recorded state:      " << (s.recorded_state.empty() ? "none" : s.recorded_state) << " (consumer offset "
              << opt(e.recorded_consumer_offset, "none") << ", updated " << opt(s.updated_at, "never") << ")\n"
              << "  last applier session: " << opt(e.applied_transactions, "unknown") << " transactions applied, "
              << opt(e.skipped_duplicates, "unknown") << " duplicates skipped\n"
              << "  dedup rows:          " << (e.dedup_rows ? std::to_string(*e.dedup_rows) : "unknown: " + e.dedup_error)
              << "\n";
    if (s.last_error && !s.last_error->empty()) std::cout << "  last error:          " << *s.last_error << "\n";
    if (!e.state_error.empty()) std::cout << "  trellara state:      not read: " << e.state_error << "\n";
    for (const QuarantineRow& q : e.open_quarantine)
      std::cout << "  quarantine:          xid " << q.xid << " commit " << q.commit_lsn << " " << q.state << " ("
                << q.reason << "): " << q.message << "\n";
    if (e.open_quarantine.empty()) std::cout << "  quarantine:          none\n";
  }
  if (s.applier_state)
    std::cout << "  applier state file:  " << s.applier_state->state
              << (s.applier_state->last_error.empty() ? std::string() : ": " + s.applier_state->last_error) << "\n";
  std::cout << "\nsource" << (e.source.described.empty() ? "" : " (" + e.source.described + ")") << "\n";
  if (!e.source.reachable) {
    std::cout << "  relay:               not read: " << e.source.error << "\n";
  } else if (!e.source.status_row) {
    std::cout << "  relay:               the source has no flow " << config.flow_name << " in trellara.status()\n";
  } else {
    const Json& r = *e.source.status_row;
    std::cout << "  relay:               " << r["state"].get<std::string>() << " (worker pid " << r["worker_pid"].dump()
              << ", slot " << r["slot_name"].dump() << " active " << r["slot_active"].dump() << ", wal_status "
              << r["wal_status"].dump() << ")\n"
              << "  slot:                confirmed " << r["confirmed_flush_lsn"].dump() << ", restart "
              << r["restart_lsn"].dump() << ", WAL retained " << r["wal_retained_bytes"].dump() << " bytes\n"
              << "  log durable:         offset " << r["log_durable_offset"].dump() << ", LSN "
              << r["log_durable_lsn"].dump() << ", records written " << r["records_written"].dump() << "\n";
    if (r["last_error"].is_string())
      std::cout << "  relay last error:    " << r["last_error"].get<std::string>() << " (at " << r["last_error_at"].dump()
                << ", consecutive failures " << r["consecutive_failures"].dump() << ")\n";
    for (const auto& [name, value] : e.source.metrics)
      std::cout << "  metric:              " << name << " = " << value << "\n";
    if (!e.source.metrics_error.empty()) std::cout << "  metrics:             not read: " << e.source.metrics_error << "\n";
  }
  std::cout << "\nnext action:           " << s.next_action << "\n";
}

void PrintAlerts(const FlowConfig& config, const std::vector<Alert>& alerts, OutputFormat format) {
  if (format == OutputFormat::Json) {
    Json j;
    j["view"] = "alerts";
    j["flow"] = config.flow_name;
    j["status"] = AlertsSummary(alerts);
    j["exit_code"] = AlertsExitCode(alerts);
    j["alerts"] = AlertsJson(alerts);
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "alerts of flow " << config.flow_name << ": " << AlertsSummary(alerts) << "\n";
  for (const Alert& a : alerts) {
    std::cout << (a.firing ? "FIRING  " : "ok      ") << a.severity << (a.severity == "warning" ? "   " : "  ") << a.name
              << ": " << a.value << " (threshold " << a.threshold << "): " << a.why << "\n";
    if (a.firing) std::cout << "        next action: " << a.next_action << "\n";
  }
}

void PrintReport(const FlowConfig& config, const std::string& config_path, const FlowStatus& s, const Extended& e,
                 OutputFormat format) {
  const std::string verify = "trellara verify --config " + config_path;
  auto count = [&](const char* state) {
    auto it = e.quarantine_by_state.find(state);
    return it == e.quarantine_by_state.end() ? uint64_t{0} : it->second;
  };
  const Json* relay = e.source.status_row ? &*e.source.status_row : nullptr;
  if (format == OutputFormat::Json) {
    Json j;
    j["view"] = "report";
    j["flow"] = config.flow_name;
    j["config"] = config_path;
    j["log_directory"] = config.log_directory;
    j["source"] = {{"server", e.source.described.empty() ? Json() : Json(e.source.described)},
                   {"reachable", e.source.reachable},
                   {"error", ErrorOrNull(e.source.error)},
                   {"publication", relay ? (*relay)["publication"] : Json()},
                   {"slot", relay ? (*relay)["slot_name"] : Json()},
                   {"relay_state", relay ? (*relay)["state"] : Json()}};
    j["target"] = {{"server", e.target_described.empty() ? Json() : Json(e.target_described)},
                   {"reachable", s.target_error.empty()},
                   {"error", ErrorOrNull(s.target_error)}};
    j["publication_tables"] = e.source.publication_error.empty() ? Json(e.source.publication_tables) : Json();
    j["publication_tables_error"] = ErrorOrNull(e.source.publication_error);
    j["snapshot"] = Json::array();
    for (const SnapshotRow& t : s.snapshot)
      j["snapshot"].push_back({{"table", t.table}, {"run_id", t.run_id}, {"state", t.state},
                               {"chunks", t.chunks}, {"chunks_copied", t.chunks_copied}, {"rows", t.rows_copied},
                               {"last_error", OrNull(t.last_error)}});
    j["state"] = s.state;
    j["applied_commit_lsn"] = OrNull(s.applied_commit_lsn);
    j["applied_transactions"] = OrNull(e.dedup_rows);  // every transaction ever applied on this target
    j["applied_transactions_error"] = ErrorOrNull(e.dedup_error);
    j["last_session_applied"] = OrNull(e.applied_transactions);
    j["last_session_skipped_duplicates"] = OrNull(e.skipped_duplicates);
    j["quarantined"] = count("quarantined");
    j["replay_ready"] = count("replay_ready");
    j["resolved"] = count("resolved");
    j["state_error"] = ErrorOrNull(e.state_error);
    j["lag_records"] = s.log.lag_records;
    if (e.partitioned) {
      j["partition_appliers"] = e.partition_appliers;
      j["staged_chunks"] = e.staged_chunks;
      j["partition_blockers"] = e.partition_blockers;
    }
    j["verify_hint"] = verify;
    j["next_action"] = s.next_action;
    std::cout << j.dump(2) << "\n";
    return;
  }
  auto dump = [&](const char* field) { return relay ? (*relay)[field].dump() : std::string("unknown"); };
  std::cout << "Trellara flow report: " << config.flow_name << "\n"
            << "configuration:       " << config_path << " (log directory " << config.log_directory << ")\n"
            << "source:              " << (e.source.described.empty() ? "not configured" : e.source.described)
            << (e.source.reachable ? "" : " — not read: " + e.source.error) << "\n"
            << "publication:         " << dump("publication") << ", slot " << dump("slot_name") << ", relay "
            << dump("state") << "\n"
            << "target:              " << (e.target_described.empty() ? "unreachable: " + s.target_error : e.target_described)
            << "\n";
  if (!e.source.publication_error.empty())
    std::cout << "published tables:    unknown: " << e.source.publication_error << "\n";
  else
    for (const std::string& t : e.source.publication_tables) {
      std::string snap = "no snapshot recorded (rows before the flow started were not copied by trellara)";
      for (const SnapshotRow& r : s.snapshot)
        if (r.table == t)
          snap = "snapshot " + r.state + " (run " + r.run_id + ", " + std::to_string(r.chunks_copied) + "/" +
                 std::to_string(r.chunks) + " chunks, " + std::to_string(r.rows_copied) + " rows)";
      std::cout << "published table:     " << t << ": " << snap << "\n";
    }
  for (const SnapshotRow& r : s.snapshot)
    if (std::find(e.source.publication_tables.begin(), e.source.publication_tables.end(), r.table) ==
        e.source.publication_tables.end())
      std::cout << "snapshot:            " << r.table << " " << r.state << " (run " << r.run_id << ")"
                << (e.source.publication_error.empty() ? " — not in the publication" : "") << "\n";
  std::cout << "state:               " << s.state << "\n"
            << "applied:             " << (e.dedup_rows ? std::to_string(*e.dedup_rows) : "unknown (" + e.dedup_error + ")")
            << " transactions up to commit " << (s.applied_commit_lsn ? *s.applied_commit_lsn : std::string("none"))
            << " (last applier session: " << (e.applied_transactions ? std::to_string(*e.applied_transactions) : "unknown")
            << " applied, " << (e.skipped_duplicates ? std::to_string(*e.skipped_duplicates) : "unknown")
            << " duplicates skipped)\n"
            << "quarantine:          "
            << (e.state_error.empty() ? std::to_string(count("quarantined")) + " quarantined, " +
                                            std::to_string(count("replay_ready")) + " replay-ready, " +
                                            std::to_string(count("resolved")) + " resolved"
                                      : "unknown: " + e.state_error)
            << "\n"
            << "pending in log:      " << s.log.lag_records << " records\n";
  if (e.partitioned) {
    std::cout << "partitions:          " << e.partition_appliers << " partition applier(s) reported, "
              << e.staged_chunks << " chunk(s) staged and not yet published (trellara partition-watermarks --config "
              << config_path << ")\n";
    for (const std::string& blocker : e.partition_blockers) std::cout << "blocker:             " << blocker << "\n";
  }
  std::cout << "verify:              " << verify << " (compares source and target at one exact point)\n"
            << "next action:         " << s.next_action << "\n";
}


}  // namespace trellara::cli::status
