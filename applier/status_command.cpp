// status_command.cpp — `trellara status --config F [--format json]`: where the flow's applier is
// (running | caught_up | blocked | stopped), how far behind the log it is, what is quarantined, and
// the safe next action in words (DESIGN §7). Also the small pieces the operator commands share
// (declared in commands.h): configuration loading, a pinned session, the log's progress.
//
// The state and the next action are core's DecideApplyStatus (core/include/trellara/apply_status.h);
// this file reads the facts: the target's trellara.apply_status() and quarantine_list() (whether an
// applier runs is read from pg_locks, never by trying the lock) and the log directory's progress.
// It only reads: it never writes the log directory, never takes the applier's lock, never
// bootstraps or changes target state.
#include <algorithm>
#include <csignal>
#include <cerrno>
#include <map>
#include <type_traits>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "trellara/apply_status.h"
#include "trellara/envelope.h"
#include "trellara/status_views.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/format.h"
#include "trellara/log/reader.h"
#include "trellara/log/retention.h"
#include "trellara/log/uring_device.h"

namespace trellara::cli {

namespace {
constexpr const char* kConsumerName = "applier";  // as apply_command.cpp registers it
}  // namespace

FlowConfig LoadConfigOrFail(const std::string& path) {
  auto config = LoadFlowConfig(path);
  if (!config) throw CommandFailed(config.error().message, 2);
  return std::move(config.value());
}

PgResult MustSucceed(PgConnection& conn, PgResult result, const std::string& what) {
  if (!result.ok()) throw CommandFailed(what + " failed on " + conn.Describe() + ": " + result.Describe());
  return result;
}

std::unique_ptr<PgConnection> ConnectPinned(const FlowConfig& config, const std::string& conninfo,
                                            const std::string& role, const std::string& application_name) {
  auto conn = PgConnection::Connect(conninfo, application_name);
  if (!conn)
    throw CommandFailed("cannot connect to the " + role + " of flow " + config.flow_name + " (" + role +
                        ".conninfo in " + config.path + "): " + conn.error().message);
  MustSucceed(**conn,
              (*conn)->Exec(kPinnedSessionSettingsSql),
              "pinning the session settings on the " + role);
  return std::move(conn.value());
}

void RequireTargetState(PgConnection& target, const FlowConfig& config) {
  auto r = MustSucceed(target,
                       target.Exec("SELECT to_regprocedure('trellara.apply_status()') IS NOT NULL AND "
                                   "to_regprocedure('trellara.quarantine_list()') IS NOT NULL"),
                       "looking up the trellara state functions");
  if (r.Value(0, 0) != std::optional<std::string>("t"))
    throw CommandFailed("the target " + target.Describe() + " has no trellara.apply_status() / "
                        "trellara.quarantine_list() (trellara apply never ran there with this version); run "
                        "trellara apply --config " + config.path + " once: it installs them");
}

LogProgress ReadLogProgress(const FlowConfig& config) {
  const std::string where = "the log of flow " + config.flow_name + " at " + config.log_directory +
                            " (flow.log_directory in " + config.path + ")";
  auto device = log::OpenUringDevice();
  if (!device) throw CommandFailed("cannot open the log device for " + where + ": " + device.error().message);
  auto reader = log::LogReader::Open(**device, config.log_directory);
  if (!reader) throw CommandFailed("cannot open " + where + ": " + reader.error().message);
  auto offsets = log::ReadConsumerOffsets(**device, config.log_directory);
  if (!offsets) throw CommandFailed("cannot read the consumer offsets of " + where + ": " + offsets.error().message);
  LogProgress progress;
  if (auto it = offsets->find(kConsumerName); it != offsets->end()) {
    progress.consumer_offset = it->second;
    Status seek = (*reader)->Seek(it->second);
    if (!seek.ok())
      throw CommandFailed("cannot seek " + where + " to the applier's consumer offset " + std::to_string(it->second) +
                          ": " + seek.error().message);
  }
  progress.scanned_from = (*reader)->next_offset();
  for (;;) {
    auto next = (*reader)->Next();
    if (!next)
      throw CommandFailed("reading " + where + " at offset " + std::to_string((*reader)->next_offset()) +
                          " failed: " + next.error().message + "; run trellara log inspect on the directory");
    if (!*next) break;
    const log::LogRecord& record = **next;
    progress.lag_records++;
    progress.lag_bytes += log::kFrameHeaderBytes + record.payload.size();
    const auto type = static_cast<log::RecordType>(record.type);
    if ((type == log::RecordType::kEnvelope || type == log::RecordType::kCommitMarker) &&
        record.commit_lsn > progress.last_commit_lsn)
      progress.last_commit_lsn = record.commit_lsn;
  }
  progress.end_offset = (*reader)->next_offset();
  return progress;
}

namespace {

struct QuarantineRow {
  std::string xid, commit_lsn, state, reason, message;
};

// One table of the flow's snapshot (trellara.snapshot_status()).
struct SnapshotRow {
  std::string table, run_id, state;
  int64_t chunks = 0, chunks_copied = 0, rows_copied = 0, bytes_copied = 0, skipped_transactions = 0;
  double seconds = 0;
  std::optional<std::string> last_error;
};

struct FlowStatus {
  std::string state;
  std::vector<SnapshotRow> snapshot;  // empty: nothing copied by trellara snapshot / reseed
  bool target_state_present = false;
  bool applier_running = false;
  std::string recorded_state;  // apply_status row, "" when none
  std::optional<std::string> applied_commit_lsn;
  uint64_t quarantined = 0;
  uint64_t replay_ready = 0;
  std::optional<std::string> last_error;
  std::optional<std::string> updated_at;
  std::optional<QuarantineRow> blocking;  // the oldest quarantined boundary
  std::optional<QuarantineRow> waiting;   // the oldest replay-ready boundary
  std::string target_error;                // status could not reach the target
  std::optional<ApplierRetryState> applier_state;  // consumers/.applier.state, writer alive
  LogProgress log;
  std::string next_action;
};

uint64_t ToU64(const std::optional<std::string>& text) { return text ? std::stoull(*text) : 0; }

// The applier's state file (apply_command.cpp), when the process that wrote it is alive.
std::optional<ApplierRetryState> ReadApplierState(const FlowConfig& config) {
  std::ifstream in(config.log_directory + "/consumers/.applier.state");
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
                      std::unique_ptr<PgConnection>* keep_target = nullptr) {
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


// ---- --view diagnostics | alerts | report (docs/status.md) --------------------------------------
// The facts beyond the dashboard. Each optional piece that cannot be read (a privilege the status
// role lacks, the source down, no [source] configured) is recorded as a fact with its reason and
// shown as such: the command itself still succeeds.

using Json = nlohmann::ordered_json;

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

struct LogFacts {
  std::string error;  // "" when the segments and consumers were read
  uint64_t segments = 0;
  uint64_t bytes = 0;
  std::optional<uint64_t> first_offset;  // the oldest segment's first offset
  std::vector<std::pair<std::string, log::ConsumerState>> consumers;
  bool applier_lost = false;
};

struct LockHolder {
  std::string pid, application_name, user, client, backend_start, state;
};

struct SourceFacts {
  bool configured = false;
  bool reachable = false;
  std::string error;     // why not reachable / why the relay could not be read
  std::string described; // host/port/dbname/user, never the password
  std::optional<Json> status_row;  // trellara.status() of the flow; nullopt: no such flow there
  std::vector<std::pair<std::string, std::string>> metrics;  // trellara.relay_metrics()
  std::string metrics_error;
  std::vector<std::string> publication_tables;
  std::string publication_error;
};

struct Extended {
  LogFacts log;
  std::string target_described;
  std::vector<LockHolder> lock_holders;
  std::string lock_error;
  std::optional<std::string> origin_remote_lsn, origin_local_lsn;
  std::string origin_error;
  std::optional<uint64_t> dedup_rows;
  std::string dedup_error;
  std::optional<uint64_t> recorded_consumer_offset, applied_transactions, skipped_duplicates;
  std::string state_error;  // apply_status() / quarantine_list() unreadable (e.g. apply never ran here)
  std::map<std::string, uint64_t> quarantine_by_state;  // quarantined | replay_ready | resolved
  std::vector<QuarantineRow> open_quarantine;           // quarantined and replay_ready rows
  SourceFacts source;
};

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
    if (name == kConsumerName && state.lost) f.applier_lost = true;
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
  return e;
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
            << "pending in log:      " << s.log.lag_records << " records\n"
            << "verify:              " << verify << " (compares source and target at one exact point)\n"
            << "next action:         " << s.next_action << "\n";
}

}  // namespace

void RegisterStatus(CLI::App& app) {
  auto* cmd = app.add_subcommand("status", "flow state, lag, quarantine and the safe next action (--config F); "
                                           "--view dashboard|diagnostics|alerts|report (docs/status.md)");
  auto config_path = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>(OutputFormat::Text);
  auto view = std::make_shared<std::string>("dashboard");
  auto thresholds = std::make_shared<AlertThresholds>();
  cmd->add_option("--config", *config_path, "the flow's TOML configuration file")->required();
  AddFormatOption(cmd, *format);
  cmd->add_option("--view", *view,
                  "dashboard (default: state, lag, quarantine, next action), diagnostics (log, lock holder, origin, "
                  "dedup rows, source relay), alerts (exit 0 none firing, 3 a critical one fires, 4 only warnings), "
                  "report (the flow's hand-over summary)")
      ->check(CLI::IsMember({"dashboard", "diagnostics", "alerts", "report"}));
  cmd->add_option("--alert-lag-records", thresholds->lag_records,
                  "alerts: lag_records fires above this many records past the consumer offset (0 disables)")
      ->default_val(thresholds->lag_records);
  cmd->add_option("--alert-lag-bytes", thresholds->lag_bytes,
                  "alerts: lag_bytes fires above this many log bytes past the consumer offset (0 disables)")
      ->default_val(thresholds->lag_bytes);
  cmd->add_option("--alert-log-retention-bytes", thresholds->log_retention_bytes,
                  "alerts: log_retention_bytes fires above this many bytes of log segments (0 disables)")
      ->default_val(thresholds->log_retention_bytes);
  cmd->callback([config_path, format, view, thresholds] {
    const FlowConfig config = LoadConfigOrFail(*config_path);
    if (*view == "dashboard") {
      Print(config, ReadStatus(config, *config_path), *format);
      return;
    }
    std::unique_ptr<PgConnection> target;
    const FlowStatus s = ReadStatus(config, *config_path, &target);
    const Extended e = ReadExtended(config, target.get());
    if (*view == "diagnostics") {
      PrintDiagnostics(config, s, e, *format);
    } else if (*view == "report") {
      PrintReport(config, *config_path, s, e, *format);
    } else {
      const std::vector<Alert> alerts = Alerts(config, *config_path, s, e, *thresholds);
      PrintAlerts(config, alerts, *format);
      std::cout.flush();
      const int code = AlertsExitCode(alerts);
      if (code != kAlertsExitNone) {
        std::string firing;
        for (const Alert& a : alerts)
          if (a.firing) firing += (firing.empty() ? "" : ", ") + a.name + " (" + a.severity + ")";
        throw CommandFailed("flow " + config.flow_name + ": alert(s) firing: " + firing +
                                "; each one's next action is printed above",
                            code);
      }
    }
  });
}

}  // namespace trellara::cli
