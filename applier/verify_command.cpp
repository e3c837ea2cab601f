// verify_command.cpp — `trellara verify --config F [--format json] [--wait-seconds N]`: waits until
// the target has applied everything the flow's log held durably at start, then compares every table
// of the flow's publication on source and target: row count and an order-independent checksum
// (DESIGN §7, issue 5 item 9).
//
// Both sides compute, in one REPEATABLE READ READ ONLY snapshot per side and with the applier's
// pinned session settings (so text forms agree),
//   SELECT count(*), coalesce(md5(string_agg(md5(ROW(<published columns>)::text), '' ORDER BY 1..)), '')
// over the published columns in the source's column order (by name, so the target's physical
// column order does not matter) and, on the source, the publication's row filter. It never writes
// to either side, and never reports a match it did not compute: a table missing or unreadable on
// either side is a mismatch naming the error.
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "commands.h"
#include "trellara/envelope.h"

namespace trellara::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(200);
constexpr auto kProgressInterval = std::chrono::seconds(5);

struct PublishedTable {
  std::string name;           // schema.table as the operator reads it
  std::string qualified;      // quoted for SQL
  std::string columns;        // quoted, comma-separated, source order
  std::optional<std::string> row_filter;
};

struct Side {
  std::optional<uint64_t> rows;
  std::string checksum;
  std::string error;
};

struct TableResult {
  PublishedTable table;
  Side source, target;
  bool match = false;
};

std::vector<PublishedTable> PublishedTables(PgConnection& source, const FlowConfig& config) {
  auto flow = MustSucceed(source, source.ExecParams("SELECT publication FROM trellara.flows WHERE name = $1",
                                                    {config.flow_name}),
                          "reading flow " + config.flow_name + " from trellara.flows on the source");
  if (flow.rows() != 1)
    throw CommandFailed("flow " + config.flow_name + " does not exist on the source " + source.Describe() +
                        " (trellara.flows); check flow.name and source.conninfo in " + config.path);
  const std::string publication = flow.Value(0, 0).value_or("");
  auto r = MustSucceed(source,
                       source.ExecParams("SELECT schemaname || '.' || tablename, format('%I.%I', schemaname, tablename), "
                                         "array_to_string(ARRAY(SELECT quote_ident(a) FROM unnest(attnames) AS a), ', '), "
                                         "rowfilter FROM pg_catalog.pg_publication_tables WHERE pubname = $1 "
                                         // Trellara's own relations are never captured (docs/capture.md).
                                         "AND schemaname <> 'trellara' ORDER BY schemaname, tablename",
                                         {publication}),
                       "listing the tables of publication " + publication + " on the source");
  std::vector<PublishedTable> tables;
  for (int i = 0; i < r.rows(); i++)
    tables.push_back({r.Value(i, 0).value_or(""), r.Value(i, 1).value_or(""), r.Value(i, 2).value_or(""), r.Value(i, 3)});
  if (tables.empty())
    throw CommandFailed("publication " + publication + " of flow " + config.flow_name +
                        " has no tables on the source; there is nothing to verify");
  return tables;
}

Side Digest(PgConnection& conn, const PublishedTable& table, bool apply_row_filter) {
  const std::string row = "md5(ROW(" + table.columns + ")::text)";
  std::string sql = "SELECT count(*), coalesce(md5(string_agg(" + row + ", '' ORDER BY " + row + ")), '') FROM " +
                    table.qualified;
  if (apply_row_filter && table.row_filter) sql += " WHERE " + *table.row_filter;
  auto r = conn.Exec(sql);
  Side side;
  if (!r.ok()) {
    side.error = r.Describe();
    // The snapshot transaction is aborted; keep it usable for the next table.
    conn.Exec("ROLLBACK TO SAVEPOINT trellara_verify_table");
    return side;
  }
  side.rows = std::stoull(r.Value(0, 0).value_or("0"));
  side.checksum = r.Value(0, 1).value_or("");
  return side;
}

// The quarantine that blocks the flow, as its operator message, or "" when none.
std::string BlockingQuarantine(PgConnection& target, const FlowConfig& config) {
  auto q = MustSucceed(target,
                       target.ExecParams("SELECT message, xid::text, commit_lsn::text FROM trellara.quarantine_list() "
                                         "WHERE flow = $1 AND state = 'quarantined' ORDER BY commit_lsn LIMIT 1",
                                         {config.flow_name}),
                       "reading trellara.quarantine_list() of flow " + config.flow_name);
  if (q.rows() == 0) return {};
  return q.Value(0, 0).value_or("") + "; or after the repair: trellara quarantine replay-ready --config " + config.path +
         " --xid " + q.Value(0, 1).value_or("") + " --commit-lsn " + q.Value(0, 2).value_or("");
}

// Waits until the origin progress of the flow reaches `wait_lsn`. Fails when the flow is blocked
// or the time is up, saying what to do.
void WaitApplied(PgConnection& target, const FlowConfig& config, uint64_t wait_lsn, int wait_seconds) {
  const auto started = Clock::now();
  auto last_report = started;
  for (;;) {
    auto r = MustSucceed(target,
                         target.ExecParams("SELECT applied_commit_lsn::text, applier_running FROM trellara.apply_status() "
                                           "WHERE flow = $1",
                                           {config.flow_name}),
                         "reading trellara.apply_status() of flow " + config.flow_name);
    const auto applied_text = r.rows() == 1 ? r.Value(0, 0) : std::nullopt;
    const uint64_t applied = applied_text ? ParseLsn(*applied_text).value_or(0) : 0;
    const bool running = r.rows() == 1 && r.Value(0, 1) == std::optional<std::string>("t");
    if (applied >= wait_lsn) return;
    const std::string blocked = BlockingQuarantine(target, config);
    if (!blocked.empty())
      throw CommandFailed("cannot verify flow " + config.flow_name + ": the target has applied up to " +
                              (applied_text ? *applied_text : std::string("nothing")) + " of " + FormatLsn(wait_lsn) +
                              " and is blocked: " + blocked,
                          kExitFlowBlocked);
    const double waited = std::chrono::duration<double>(Clock::now() - started).count();
    const std::string where = "applied " + (applied_text ? *applied_text : std::string("nothing")) + " of " +
                              FormatLsn(wait_lsn) + ", applier " + (running ? "running" : "not running");
    if (waited >= wait_seconds)
      throw CommandFailed("cannot verify flow " + config.flow_name + ": the target did not apply everything durable at "
                          "start within " + std::to_string(wait_seconds) + " s (" + where + "); " +
                          (running ? "the applier is still catching up: rerun verify later or with a larger --wait-seconds"
                                   : "run trellara apply --config " + config.path + " --until-caught-up, then rerun verify"));
    if (Clock::now() - last_report >= kProgressInterval) {
      std::cerr << "verify flow=" << config.flow_name << " waiting: " << where << ", " << static_cast<int>(waited)
                << " s of " << wait_seconds << " s\n";
      last_report = Clock::now();
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

void Run(const FlowConfig& config, OutputFormat format, int wait_seconds) {
  if (config.source_conninfo.empty())
    throw CommandFailed("verify needs the source: set source.conninfo in " + config.path, 2);
  // What the log holds durably now is what the target must have applied before comparing.
  const LogProgress log = ReadLogProgress(config);
  auto target = ConnectPinned(config, config.target_conninfo, "target", "trellara-verify/" + config.flow_name);
  RequireTargetState(*target, config);
  if (log.last_commit_lsn != 0) WaitApplied(*target, config, log.last_commit_lsn, wait_seconds);

  auto source = ConnectPinned(config, config.source_conninfo, "source", "trellara-verify/" + config.flow_name);
  const std::vector<PublishedTable> tables = PublishedTables(*source, config);

  for (PgConnection* conn : {source.get(), target.get()})
    MustSucceed(*conn, conn->Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"), "opening the verify snapshot");
  std::vector<TableResult> results;
  for (const PublishedTable& table : tables) {
    TableResult result{table, {}, {}, false};
    for (PgConnection* conn : {source.get(), target.get()})
      MustSucceed(*conn, conn->Exec("SAVEPOINT trellara_verify_table"), "SAVEPOINT before " + table.name);
    result.source = Digest(*source, table, true);
    result.target = Digest(*target, table, false);
    result.match = result.source.error.empty() && result.target.error.empty() &&
                   result.source.rows == result.target.rows && result.source.checksum == result.target.checksum;
    results.push_back(std::move(result));
  }
  for (PgConnection* conn : {source.get(), target.get()}) conn->Exec("COMMIT");

  std::vector<std::string> mismatching;
  for (const TableResult& r : results)
    if (!r.match) mismatching.push_back(r.table.name);

  if (format == OutputFormat::Json) {
    nlohmann::ordered_json j;
    j["flow"] = config.flow_name;
    j["waited_for_commit_lsn"] = log.last_commit_lsn ? nlohmann::ordered_json(FormatLsn(log.last_commit_lsn))
                                                     : nlohmann::ordered_json();
    j["tables"] = nlohmann::ordered_json::array();
    for (const TableResult& r : results) {
      auto side = [](const Side& s) {
        nlohmann::ordered_json o;
        o["rows"] = s.rows ? nlohmann::ordered_json(*s.rows) : nlohmann::ordered_json();
        o["checksum"] = s.error.empty() ? nlohmann::ordered_json(s.checksum) : nlohmann::ordered_json();
        o["error"] = s.error.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s.error);
        return o;
      };
      j["tables"].push_back({{"table", r.table.name}, {"match", r.match}, {"source", side(r.source)},
                             {"target", side(r.target)}});
    }
    j["match"] = mismatching.empty();
    j["mismatching_tables"] = mismatching;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "verify flow " << config.flow_name << ": target applied everything durable at start"
              << (log.last_commit_lsn ? " (up to commit " + FormatLsn(log.last_commit_lsn) + ")" : std::string()) << "\n";
    for (const TableResult& r : results) {
      auto describe = [](const Side& s) {
        return s.error.empty() ? std::to_string(*s.rows) + " rows, checksum " + (s.checksum.empty() ? "-" : s.checksum)
                               : "error: " + s.error;
      };
      std::cout << (r.match ? "match     " : "MISMATCH  ") << r.table.name << "  source " << describe(r.source)
                << "; target " << describe(r.target) << "\n";
    }
  }
  if (!mismatching.empty()) {
    std::string names;
    for (const auto& name : mismatching) names += (names.empty() ? "" : ", ") + name;
    throw CommandFailed("flow " + config.flow_name + ": source and target differ in " + std::to_string(mismatching.size()) +
                            " of " + std::to_string(results.size()) + " tables: " + names +
                            "; repair the target (e.g. reseed the table) and rerun verify",
                        kExitMismatch);
  }
}

}  // namespace

void RegisterVerify(CLI::App& app) {
  auto* cmd = app.add_subcommand("verify", "compare row counts and checksums of source and target (--config F)");
  auto config_path = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>(OutputFormat::Text);
  auto wait_seconds = std::make_shared<int>(300);
  cmd->add_option("--config", *config_path, "the flow's TOML configuration file")->required();
  AddFormatOption(cmd, *format);
  cmd->add_option("--wait-seconds", *wait_seconds,
                  "how long to wait for the target to apply what the log held at start (default 300)")
      ->check(CLI::Range(0, 86400));
  cmd->callback([config_path, format, wait_seconds] {
    Run(LoadConfigOrFail(*config_path), *format, *wait_seconds);
  });
}

}  // namespace trellara::cli
