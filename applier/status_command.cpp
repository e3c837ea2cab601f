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
#include <csignal>
#include <cerrno>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "trellara/apply_status.h"
#include "trellara/envelope.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/format.h"
#include "trellara/log/reader.h"
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

FlowStatus ReadStatus(const FlowConfig& config, const std::string& config_path) {
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

}  // namespace

void RegisterStatus(CLI::App& app) {
  auto* cmd = app.add_subcommand("status", "flow state, lag, quarantine and the safe next action (--config F)");
  auto config_path = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>(OutputFormat::Text);
  cmd->add_option("--config", *config_path, "the flow's TOML configuration file")->required();
  AddFormatOption(cmd, *format);
  cmd->callback([config_path, format] {
    const FlowConfig config = LoadConfigOrFail(*config_path);
    Print(config, ReadStatus(config, *config_path), *format);
  });
}

}  // namespace trellara::cli
