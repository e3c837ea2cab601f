// quarantine_command.cpp — `trellara quarantine list --config F [--format json]` and
// `trellara quarantine replay-ready --config F --xid X --commit-lsn L` (DESIGN §2, §7).
//
// list prints the flow's rows of trellara.quarantine_list() on the target (every state, oldest
// boundary first). replay-ready reads the same rows, lets core's DecideReplayReady decide, and only
// on Mark calls trellara.quarantine_replay_ready(xid, commit_lsn, flow), which checks the boundary again
// under a row lock. It never marks a boundary core refused, never marks anything but the one exact
// (flow, xid, commit LSN) asked for, and never changes user data or the applier's progress.
#include <CLI/CLI.hpp>

#include <iostream>
#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "trellara/apply/apply_decision.h"
#include "trellara/record/envelope.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace quarantine_command {
namespace {

struct Row {
  std::string xid, commit_lsn, state, reason, sqlstate, detail, message, next_step, first_quarantined_at,
      last_failed_at;
  int attempts = 0;
};

std::vector<Row> ReadRows(PgConnection& target, const FlowConfig& config) {
  RequireTargetState(target, config);
  auto r = MustSucceed(target,
                       target.ExecParams("SELECT xid::text, commit_lsn::text, state, reason, sqlstate, attempts, detail, "
                                         "message, next_step, first_quarantined_at::text, last_failed_at::text "
                                         "FROM trellara.quarantine_list() WHERE flow = $1 ORDER BY commit_lsn",
                                         {config.flow_name}),
                       "reading trellara.quarantine_list() of flow " + config.flow_name);
  std::vector<Row> rows;
  for (int i = 0; i < r.rows(); i++) {
    Row row;
    row.xid = r.Value(i, 0).value_or("");
    row.commit_lsn = r.Value(i, 1).value_or("");
    row.state = r.Value(i, 2).value_or("");
    row.reason = r.Value(i, 3).value_or("");
    row.sqlstate = r.Value(i, 4).value_or("");
    row.attempts = std::stoi(r.Value(i, 5).value_or("0"));
    row.detail = r.Value(i, 6).value_or("");
    row.message = r.Value(i, 7).value_or("");
    row.next_step = r.Value(i, 8).value_or("");
    row.first_quarantined_at = r.Value(i, 9).value_or("");
    row.last_failed_at = r.Value(i, 10).value_or("");
    rows.push_back(std::move(row));
  }
  return rows;
}

void List(const FlowConfig& config, OutputFormat format) {
  auto target = ConnectPinned(config, config.target_conninfo, "target", "trellara-quarantine/" + config.flow_name);
  const std::vector<Row> rows = ReadRows(*target, config);
  if (format == OutputFormat::Json) {
    auto out = nlohmann::ordered_json::array();
    for (const Row& row : rows) {
      nlohmann::ordered_json j;
      j["flow"] = config.flow_name;
      j["xid"] = std::stoull(row.xid);
      j["commit_lsn"] = row.commit_lsn;
      j["state"] = row.state;
      j["reason"] = row.reason;
      j["sqlstate"] = row.sqlstate.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(row.sqlstate);
      j["attempts"] = row.attempts;
      j["detail"] = row.detail;
      j["message"] = row.message;
      j["next_step"] = row.next_step;
      j["first_quarantined_at"] = row.first_quarantined_at;
      j["last_failed_at"] = row.last_failed_at;
      out.push_back(std::move(j));
    }
    std::cout << out.dump(2) << "\n";
    return;
  }
  size_t open = 0;
  for (const Row& row : rows) open += row.state != "resolved";
  std::cout << "flow " << config.flow_name << ": " << open << " quarantined or replay-ready, "
            << rows.size() - open << " resolved\n";
  for (const Row& row : rows) {
    std::cout << "\ntransaction " << row.xid << " (commit " << row.commit_lsn << "): " << row.state << ", " << row.reason
              << (row.sqlstate.empty() ? std::string() : " (SQLSTATE " + row.sqlstate + ")") << ", attempts "
              << row.attempts << ", first " << row.first_quarantined_at << ", last " << row.last_failed_at << "\n"
              << "  " << row.message << "\n";
    if (row.state == "quarantined")
      std::cout << "  after the repair: trellara quarantine replay-ready --config " << config.path << " --xid " << row.xid
                << " --commit-lsn " << row.commit_lsn << "\n";
  }
}

std::optional<QuarantineState> StateFromName(const std::string& name) {
  for (auto s : {QuarantineState::Quarantined, QuarantineState::ReplayReady, QuarantineState::Resolved})
    if (name == QuarantineStateName(s)) return s;
  return std::nullopt;
}

QuarantineReason ReasonFromName(const std::string& name) {
  for (int i = 0; i <= static_cast<int>(kLastQuarantineReason); i++) {
    const auto reason = static_cast<QuarantineReason>(i);
    if (name == QuarantineReasonName(reason)) return reason;
  }
  return QuarantineReason::SqlError;  // only informative here: DecideReplayReady does not use it
}

void ReplayReady(const FlowConfig& config, const std::string& xid_text, const std::string& lsn_text) {
  uint32_t xid = 0;
  try {
    size_t used = 0;
    const unsigned long long value = std::stoull(xid_text, &used);
    if (used != xid_text.size() || value > 0xFFFFFFFFull) throw std::out_of_range("xid");
    xid = static_cast<uint32_t>(value);
  } catch (const std::exception&) {
    throw CommandFailed("--xid " + xid_text + " is not a transaction id (0..4294967295, as trellara quarantine list "
                        "prints it)", 2);
  }
  const auto commit_lsn = ParseLsn(lsn_text);
  if (!commit_lsn)
    throw CommandFailed("--commit-lsn " + lsn_text + " is not an LSN (X/X hex, as trellara quarantine list prints it)",
                        2);

  auto target = ConnectPinned(config, config.target_conninfo, "target", "trellara-quarantine/" + config.flow_name);
  std::vector<QuarantineEntry> entries;
  for (const Row& row : ReadRows(*target, config)) {
    QuarantineEntry entry;
    entry.xid = static_cast<uint32_t>(std::stoull(row.xid));
    const auto lsn = ParseLsn(row.commit_lsn);
    const auto state = StateFromName(row.state);
    if (!lsn || !state)
      throw CommandFailed("trellara.quarantine row of flow " + config.flow_name + " (xid " + row.xid + ", commit " +
                          row.commit_lsn + ", state " + row.state + ") is not readable; inspect trellara.quarantine "
                          "on the target");
    entry.commit_lsn = *lsn;
    entry.state = *state;
    entry.reason = ReasonFromName(row.reason);
    entries.push_back(entry);
  }
  const ReplayReadyDecision decision = DecideReplayReady(config.flow_name, entries, xid, *commit_lsn);
  switch (decision.outcome) {
    case ReplayReadyOutcome::Refuse:
      throw CommandFailed(decision.message + " (nothing was marked; trellara quarantine list --config " + config.path +
                          " shows the exact boundaries)");
    case ReplayReadyOutcome::AlreadyReplayReady:
      std::cout << decision.message << "\n";
      return;
    case ReplayReadyOutcome::Mark:
      break;
  }
  auto marked = MustSucceed(*target,
                            target->ExecParams("SELECT trellara.quarantine_replay_ready($1::bigint, $2::pg_lsn, $3)",
                                               {std::to_string(xid), FormatLsn(*commit_lsn), config.flow_name}),
                            "trellara.quarantine_replay_ready(" + std::to_string(xid) + ", '" + FormatLsn(*commit_lsn) +
                                "', '" + config.flow_name + "')");
  std::cout << marked.Value(0, 0).value_or("") << "\n"
            << "next: a running applier retries it within a second; otherwise run trellara apply --config "
            << config.path << "\n";
}

}  // namespace
}  // namespace quarantine_command

void RegisterQuarantine(CLI::App& app) {
  using namespace quarantine_command;
  auto* cmd = app.add_subcommand("quarantine", "list quarantined transactions / mark one replay-ready (--config F)");
  cmd->require_subcommand(1);

  auto* list = cmd->add_subcommand("list", "the flow's quarantined, replay-ready and resolved transactions");
  auto list_config = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>(OutputFormat::Text);
  AddConfigOption(list, *list_config);
  AddFormatOption(list, *format);
  list->callback([list_config, format] { List(LoadConfigOrFail(*list_config), *format); });

  auto* ready = cmd->add_subcommand(
      "replay-ready", "after repairing the target, let the applier retry one exact quarantined transaction");
  auto ready_config = std::make_shared<std::string>();
  auto xid = std::make_shared<std::string>();
  auto lsn = std::make_shared<std::string>();
  AddConfigOption(ready, *ready_config);
  ready->add_option("--xid", *xid, "the quarantined transaction's xid (as quarantine list prints it)")->required();
  ready->add_option("--commit-lsn", *lsn, "its commit LSN, e.g. 0/3A1F2B0 (as quarantine list prints it)")->required();
  ready->callback([ready_config, xid, lsn] { ReplayReady(LoadConfigOrFail(*ready_config), *xid, *lsn); });
}

}  // namespace trellara::cli
