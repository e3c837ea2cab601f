// status_read.cpp — see status_read.h.
#include <sstream>
#include <algorithm>
#include <csignal>
#include <cerrno>
#include <map>
#include <type_traits>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands/status_read.h"
#include "kit/errors.h"
#include "pg/session.h"
#include "trellara/report/apply_status.h"
#include "trellara/record/envelope.h"
#include "trellara/report/status_views.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/format.h"
#include "trellara/log/reader.h"
#include "trellara/log/retention.h"
#include "trellara/log/uring_device.h"


namespace trellara::cli::status {

namespace {

// A query that may fail without failing the command: the rows, or the error named.
struct Optional {
  std::optional<PgResult> result;
  std::string error;  // "" when result holds rows
};

Optional TryQuery(PgConnection& conn, const std::string& sql, const SqlParams& params, const std::string& what) {
  Optional o;
  PgResult r = params.empty() ? conn.Exec(sql) : conn.ExecParams(sql, params);
  if (r.ok())
    o.result = std::move(r);
  else
    o.error = what + " failed on " + conn.Describe() + ": " + r.Describe();
  return o;
}


}  // namespace

uint64_t ToU64(const std::optional<std::string>& text) { return text ? std::stoull(*text) : 0; }

// The applier's state file (engine/applier.cpp), when the process that wrote it is alive.
std::optional<ApplierRetryState> ReadApplierState(const FlowConfig& config) {
  std::ifstream in(config.log_directory + "/" + log::kApplierStateFile);
  if (!in) return std::nullopt;
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const pid_t pid = static_cast<pid_t>(j.value("pid", 0));
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return std::nullopt;  // not running any more
  ApplierRetryState r;
  r.state = j.value("state", "");
  r.last_error = j.value("last_error", "");
  r.sqlstate = j.value("sqlstate", "");
  r.attempt = j.value("attempt", 0);
  r.since = j.value("since", "");
  return r;
}

FlowStatus ReadStatus(const FlowConfig& config, const std::string& config_path,
                      std::unique_ptr<PgConnection>* keep_target) {
  FlowStatus s;
  s.applier_state = ReadApplierState(config);
  std::unique_ptr<PgConnection> target;
  try {
    target = ConnectPinned(config, config.target_conninfo, "target", "trellara-status/" + config.flow_name);
  } catch (const CommandFailed& failed) {
    // The target down is exactly when status must still answer: from the log and the state file.
    s.target_error = failed.what();
  }
  if (target) {
  auto present = MustSucceed(*target,
                             target->Exec("SELECT to_regprocedure('trellara.apply_status()') IS NOT NULL"),
                             "looking up trellara.apply_status()");
  s.target_state_present = present.Value(0, 0) == std::optional<std::string>("t");
  if (s.target_state_present) {
    auto r = MustSucceed(*target,
                         target->ExecParams("SELECT recorded_state, applier_running, applied_commit_lsn::text, "
                                            "quarantined, replay_ready, last_error, updated_at::text "
                                            "FROM trellara.apply_status() WHERE flow = $1",
                                            {config.flow_name}),
                         "reading trellara.apply_status() of flow " + config.flow_name);
    if (r.rows() == 1) {
      s.recorded_state = r.Value(0, 0).value_or("");
      s.applier_running = r.Value(0, 1) == std::optional<std::string>("t");
      s.applied_commit_lsn = r.Value(0, 2);
      s.quarantined = ToU64(r.Value(0, 3));
      s.replay_ready = ToU64(r.Value(0, 4));
      s.last_error = r.Value(0, 5);
      s.updated_at = r.Value(0, 6);
    }
    auto q = MustSucceed(*target,
                         target->ExecParams("SELECT xid::text, commit_lsn::text, state, reason, message "
                                            "FROM trellara.quarantine_list() WHERE flow = $1 "
                                            "AND state IN ('quarantined', 'replay_ready') ORDER BY commit_lsn",
                                            {config.flow_name}),
                         "reading trellara.quarantine_list() of flow " + config.flow_name);
    auto snap = target->Exec("SELECT to_regprocedure('trellara.snapshot_status()') IS NOT NULL");
    if (snap.ok() && snap.Value(0, 0) == std::optional<std::string>("t")) {
      auto t = MustSucceed(*target,
                           target->ExecParams("SELECT table_name, run_id, state, chunks, chunks_copied, rows_copied, "
                                              "bytes_copied, skipped_transactions, seconds, last_error "
                                              "FROM trellara.snapshot_status() WHERE flow = $1",
                                              {config.flow_name}),
                           "reading trellara.snapshot_status() of flow " + config.flow_name);
      for (int i = 0; i < t.rows(); i++) {
        SnapshotRow row;
        row.table = t.Value(i, 0).value_or("");
        row.run_id = t.Value(i, 1).value_or("");
        row.state = t.Value(i, 2).value_or("");
        row.chunks = std::stoll(t.Value(i, 3).value_or("0"));
        row.chunks_copied = std::stoll(t.Value(i, 4).value_or("0"));
        row.rows_copied = std::stoll(t.Value(i, 5).value_or("0"));
        row.bytes_copied = std::stoll(t.Value(i, 6).value_or("0"));
        row.skipped_transactions = std::stoll(t.Value(i, 7).value_or("0"));
        row.seconds = std::stod(t.Value(i, 8).value_or("0"));
        row.last_error = t.Value(i, 9);
        s.snapshot.push_back(std::move(row));
      }
    }
    for (int i = 0; i < q.rows(); i++) {
      QuarantineRow row{q.Value(i, 0).value_or(""), q.Value(i, 1).value_or(""), q.Value(i, 2).value_or(""),
                        q.Value(i, 3).value_or(""), q.Value(i, 4).value_or("")};
      if (row.state == "quarantined" && !s.blocking) s.blocking = row;
      if (row.state == "replay_ready" && !s.waiting) s.waiting = row;
    }
  }
  }  // target
  // The target's lock table cannot say whether an applier runs when the target is down; a live
  // writer of the state file can.
  if (!target && s.applier_state) s.applier_running = true;
  s.log = ReadLogProgress(config);

  ApplyStatusFacts facts;
  facts.flow = config.flow_name;
  facts.config_path = config_path;
  facts.target_state_present = s.target_state_present;
  facts.recorded_state = s.recorded_state;
  facts.applier_running = s.applier_running;
  facts.lag_records = s.log.lag_records;
  facts.lag_bytes = s.log.lag_bytes;
  if (s.blocking) facts.blocking = StatusBoundary{s.blocking->xid, s.blocking->commit_lsn, s.blocking->message};
  if (s.waiting) facts.waiting = StatusBoundary{s.waiting->xid, s.waiting->commit_lsn, s.waiting->message};
  facts.target_error = s.target_error;
  facts.retry = s.applier_state;
  for (const SnapshotRow& t : s.snapshot) {
    if (t.state == "handoff_ready") continue;
    if (!facts.snapshot_tables_unfinished) facts.snapshot_unfinished_run = t.run_id;
    facts.snapshot_tables_unfinished++;
  }
  const ApplyStatusVerdict verdict = DecideApplyStatus(facts);
  s.state = verdict.state;
  s.next_action = verdict.next_action;
  if (keep_target) *keep_target = std::move(target);
  return s;
}


LogFacts ReadLogFacts(const FlowConfig& config) {
  LogFacts f;
  auto device = log::OpenUringDevice();
  if (!device) {
    f.error = "cannot open the log device: " + device.error().message;
    return f;
  }
  auto segments = log::ListSegmentSizes(**device, config.log_directory);
  if (!segments) {
    f.error = "cannot list the segments of " + config.log_directory + ": " + segments.error().message;
    return f;
  }
  f.segments = segments->size();
  for (const auto& seg : *segments) f.bytes += seg.bytes;
  if (!segments->empty()) f.first_offset = segments->front().first_offset;
  auto consumers = log::ReadConsumerStates(**device, config.log_directory);
  if (!consumers) {
    f.error = "cannot read the consumers of " + config.log_directory + ": " + consumers.error().message;
    return f;
  }
  for (const auto& [name, state] : *consumers) {
    f.consumers.emplace_back(name, state);
    if (name == log::kApplierConsumer && state.lost) f.applier_lost = true;
  }
  return f;
}

SourceFacts ReadSourceFacts(const FlowConfig& config) {
  SourceFacts f;
  if (config.source_conninfo.empty()) {
    f.error = "no [source] conninfo in " + config.path + ": the relay was not read";
    f.publication_error = f.error;
    return f;
  }
  f.configured = true;
  f.described = PgConnection::DescribeConninfo(config.source_conninfo);
  std::unique_ptr<PgConnection> source;
  try {
    source = ConnectPinned(config, config.source_conninfo, "source", "trellara-status/" + config.flow_name);
  } catch (const CommandFailed& failed) {
    f.error = failed.what();  // names host and port, never the password
    f.publication_error = "the source was not read: " + f.error;
    return f;
  }
  auto status = TryQuery(*source, "SELECT row_to_json(s)::text FROM trellara.status() s WHERE s.flow = $1",
                         {config.flow_name}, "reading trellara.status() of flow " + config.flow_name);
  if (!status.result) {
    f.error = status.error + "; is the trellara extension installed there, and does the role have pg_monitor?";
    f.publication_error = "the source was not read: " + f.error;
    return f;
  }
  f.reachable = true;
  if (status.result->rows() == 1) {
    auto row = Json::parse(status.result->Value(0, 0).value_or("{}"), nullptr, false);
    if (!row.is_discarded()) f.status_row = std::move(row);
  }
  auto metrics = TryQuery(*source, "SELECT metric, value::text FROM trellara.relay_metrics() WHERE flow = $1",
                          {config.flow_name}, "reading trellara.relay_metrics() of flow " + config.flow_name);
  if (metrics.result)
    for (int i = 0; i < metrics.result->rows(); i++)
      f.metrics.emplace_back(metrics.result->Value(i, 0).value_or(""), metrics.result->Value(i, 1).value_or(""));
  else
    f.metrics_error = metrics.error;
  if (f.status_row && (*f.status_row)["publication"].is_string()) {
    auto tables = TryQuery(*source,
                           "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_publication_tables "
                           "WHERE pubname = $1 ORDER BY 1",
                           {(*f.status_row)["publication"].get<std::string>()},
                           "listing the tables of publication " + (*f.status_row)["publication"].get<std::string>());
    if (tables.result)
      for (int i = 0; i < tables.result->rows(); i++) f.publication_tables.push_back(tables.result->Value(i, 0).value_or(""));
    else
      f.publication_error = tables.error;
  } else {
    f.publication_error = "the source has no flow " + config.flow_name + " in trellara.status()";
  }
  return f;
}

Extended ReadExtended(const FlowConfig& config, PgConnection* target) {
  Extended e;
  e.log = ReadLogFacts(config);
  e.source = ReadSourceFacts(config);
  if (!target) return e;
  e.target_described = target->Describe();
  const SqlParams flow = {config.flow_name};
  auto locks = TryQuery(*target,
                        "SELECT l.pid::text, a.application_name, a.usename::text, coalesce(a.client_addr::text, 'local'), "
                        "a.backend_start::text, a.state FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
                        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                        "AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()) "
                        "AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended('trellara apply ' || $1, 0) "
                        "ORDER BY l.pid",
                        flow, "reading the applier lock holder of flow " + config.flow_name + " from pg_locks");
  if (locks.result)
    for (int i = 0; i < locks.result->rows(); i++)
      e.lock_holders.push_back({locks.result->Value(i, 0).value_or(""), locks.result->Value(i, 1).value_or("unknown"),
                                locks.result->Value(i, 2).value_or("unknown"), locks.result->Value(i, 3).value_or(""),
                                locks.result->Value(i, 4).value_or("unknown"), locks.result->Value(i, 5).value_or("unknown")});
  else
    e.lock_error = locks.error;
  auto origin = TryQuery(*target,
                         "SELECT remote_lsn::text, local_lsn::text FROM pg_replication_origin_status "
                         "WHERE external_id = 'trellara_' || $1",
                         flow, "reading pg_replication_origin_status for origin trellara_" + config.flow_name);
  if (origin.result && origin.result->rows() == 1) {
    e.origin_remote_lsn = origin.result->Value(0, 0);
    e.origin_local_lsn = origin.result->Value(0, 1);
  } else if (origin.result) {
    e.origin_error = "no replication origin trellara_" + config.flow_name + " on the target (never applied here)";
  } else {
    e.origin_error = origin.error;
  }
  auto dedup = TryQuery(*target, "SELECT count(*) FROM trellara.applied_transactions WHERE flow = $1", flow,
                        "counting trellara.applied_transactions of flow " + config.flow_name);
  if (dedup.result)
    e.dedup_rows = ToU64(dedup.result->Value(0, 0));
  else
    e.dedup_error = dedup.error + " (the dedup table is readable by the apply role, not by pg_monitor)";
  auto recorded = TryQuery(*target,
                           "SELECT consumer_offset, applied_transactions, skipped_duplicates FROM trellara.apply_status() "
                           "WHERE flow = $1",
                           flow, "reading trellara.apply_status() of flow " + config.flow_name);
  if (recorded.result && recorded.result->rows() == 1) {
    e.recorded_consumer_offset = ToU64(recorded.result->Value(0, 0));
    e.applied_transactions = ToU64(recorded.result->Value(0, 1));
    e.skipped_duplicates = ToU64(recorded.result->Value(0, 2));
  } else if (!recorded.result) {
    e.state_error = recorded.error;
  }
  auto quarantine = TryQuery(*target,
                             "SELECT xid::text, commit_lsn::text, state, reason, message FROM trellara.quarantine_list() "
                             "WHERE flow = $1 ORDER BY commit_lsn",
                             flow, "reading trellara.quarantine_list() of flow " + config.flow_name);
  if (quarantine.result)
    for (int i = 0; i < quarantine.result->rows(); i++) {
      QuarantineRow row{quarantine.result->Value(i, 0).value_or(""), quarantine.result->Value(i, 1).value_or(""),
                        quarantine.result->Value(i, 2).value_or(""), quarantine.result->Value(i, 3).value_or(""),
                        quarantine.result->Value(i, 4).value_or("")};
      e.quarantine_by_state[row.state]++;
      if (row.state != "resolved") e.open_quarantine.push_back(std::move(row));
    }
  else
    e.state_error += (e.state_error.empty() ? "" : "; ") + quarantine.error;
  auto partitions = TryQuery(*target,
                             "SELECT count(*), count(*) FILTER (WHERE blocker IS NOT NULL), "
                             "string_agg('partition ' || partition || ' at ' || coalesce(blocked_commit_lsn::text, '?') "
                             "|| ': ' || blocker, E'\\n' ORDER BY partition) FILTER (WHERE blocker IS NOT NULL), "
                             "(SELECT count(*) FROM trellara.partition_stage WHERE flow = $1) "
                             "FROM trellara.partition_checkpoints WHERE flow = $1 "
                             "AND to_regclass('trellara.partition_checkpoints') IS NOT NULL",
                             flow, "reading trellara.partition_checkpoints of flow " + config.flow_name);
  if (partitions.result && partitions.result->rows() == 1) {
    e.partition_appliers = ToU64(partitions.result->Value(0, 0));
    e.partitioned = e.partition_appliers > 0;
    if (auto blockers = partitions.result->Value(0, 2)) {
      std::stringstream lines(*blockers);
      for (std::string line; std::getline(lines, line);) e.partition_blockers.push_back(line);
    }
    e.staged_chunks = ToU64(partitions.result->Value(0, 3));
  } else if (!partitions.result) {
    e.partition_error = partitions.error;
  }
  return e;
}


}  // namespace trellara::cli::status
