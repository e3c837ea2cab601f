// reseed_command.cpp — `trellara reseed --config F --table T [--where SQL] [--format text|json]`:
// copies a table's rows again from the source (docs/snapshot.md "Reseed").
//
// With --where (a row filter, SQL evaluated as given on both sides): at the exact point of a
// HoldPoint (source exported snapshot at C, applier held right after C), in ONE target transaction:
//   1. the source rows matching the filter, COPY'd from the exported snapshot into a temporary
//      staging table holding the source's columns;
//   2. target rows matching the filter whose key is not staged are deleted;
//   3. the staged rows upserted: INSERT ... ON CONFLICT (key) DO UPDATE SET <source columns only>,
//      so rows outside the filter and target-owned columns (those the source lacks) are untouched;
//   4. quarantine rows of this flow naming the table with commit LSN <= C still open are marked
//      resolved (rule in docs/snapshot.md);
// then COMMIT and the hold is released. The applier resumes after C: everything <= C is in the
// copy or was already applied, everything > C is applied from the stream.
//
// Without --where the table is copied again by the snapshot machinery: this process execs
// `trellara snapshot --config F --table T --force` (a new run of that table; no hold is needed, each
// chunk has its own exact boundary).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "engine/hold_point.h"
#include "pg/source_tables.h"
#include "pg/target_schema.h"
#include "trellara/record/envelope.h"
#include "trellara/base/fault.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace reseed_command {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kStageTable = "trellara_reseed_stage";

struct Options {
  std::string config_path;
  std::string table;
  std::optional<std::string> where;
  OutputFormat format = OutputFormat::Text;
  int timeout_seconds = 60;
};

struct Outcome {
  uint64_t staged = 0, deleted = 0, upserted = 0, resolved = 0, bytes = 0;
  uint64_t point = 0;
};

// Streams `COPY (SELECT cols FROM t WHERE filter) TO STDOUT` on `source` into the staging table
// on `target`, buffer by buffer (nothing held per row). Returns rows staged.
uint64_t CopyIntoStage(PgConnection& source, PgConnection& target, const SourceTable& t, const std::string& filter,
                       uint64_t& bytes) {
  std::string select = "SELECT " + t.columns + " FROM " + t.qualified + " WHERE (" + filter + ")";
  if (t.row_filter) select += " AND (" + *t.row_filter + ")";
  MustSucceed(target, target.StartCopy(std::string("COPY pg_temp.") + kStageTable + " (" + t.columns + ") FROM STDIN"),
              "starting the COPY into the staging table of " + t.name);
  auto out = source.StartCopy("COPY (" + select + ") TO STDOUT");
  if (!out.ok()) {
    (void)target.PutCopyEnd("the source COPY failed");  // the COPY fails on purpose; its error is not ours to report
    target.FinishCopy();
    throw CommandFailed("reading the rows of " + t.name + " matching the filter on the source " + source.Describe() +
                        " failed: " + out.Describe() + "; check --where (SQL over the source's columns)");
  }
  for (;;) {
    const char* data = nullptr;
    size_t length = 0;
    auto got = source.GetCopyData(&data, &length);
    if (!got) {
      (void)target.PutCopyEnd("the source COPY failed");  // the COPY fails on purpose; its error is not ours to report
      target.FinishCopy();
      throw CommandFailed(got.error().message);
    }
    if (*got == 0) break;
    bytes += length;
    if (auto put = target.PutCopyData(data, length); !put.ok()) throw CommandFailed(put.error().message);
  }
  MustSucceed(source, source.FinishCopy(), "finishing the source COPY of " + t.name);
  if (auto end = target.PutCopyEnd(); !end.ok()) throw CommandFailed(end.error().message);
  auto done = MustSucceed(target, target.FinishCopy(), "finishing the COPY into the staging table of " + t.name);
  return done.affected();
}

Outcome ReseedFiltered(const FlowConfig& config, const Options& o) {
  const std::string app = "trellara-reseed/" + config.flow_name;
  auto control = ConnectPinned(config, config.target_conninfo, "target", app);
  RequireTargetState(*control, config);
  MustSucceed(*control, control->Exec(TargetSchemaScript()), "installing the trellara target state");
  auto source = ConnectPinned(config, config.source_conninfo, "source", app);
  const std::vector<SourceTable> selected = ReadSourceTables(*source, config, {o.table});
  if (selected.size() != 1) {
    std::string names;
    for (const auto& s : selected) names += (names.empty() ? "" : ", ") + s.name;
    throw CommandFailed("reseed --where of " + o.table + " selects its " + std::to_string(selected.size()) +
                            " published partitions (" + names + "); reseed them one at a time with --table <partition>",
                        2);
  }
  const SourceTable t = selected.front();
  if (t.key_columns.empty())
    throw CommandFailed("reseed --where of " + t.name + " needs a primary key or replica identity index on the source "
                        "(rows are matched by key); reseed the whole table without --where", 2);
  auto target = ConnectPinned(config, config.target_conninfo, "target", app);

  Outcome out;
  HoldPoint hold(config, *control, std::chrono::seconds(o.timeout_seconds), "reseed");
  out.point = hold.lsn();
  hold.ImportSnapshot(*source);
  hold.DropSlot();

  const std::string what = "reseeding " + t.name + " where " + *o.where;
  MustSucceed(*target, target->Exec("BEGIN"), what);
  // The applier's role for triggers and FK checks on the target (config [apply]).
  MustSucceed(*target, target->Exec(std::string("SET LOCAL session_replication_role = ") + SettingValue(config.session_replication_role)), what);
  MustSucceed(*target,
              target->Exec(std::string("CREATE TEMPORARY TABLE ") + kStageTable + " ON COMMIT DROP AS SELECT " +
                           t.columns + " FROM " + t.qualified + " WITH NO DATA"),
              "creating the staging table for " + t.name + " (the target must have the source's columns)");
  out.staged = CopyIntoStage(*source, *target, t, *o.where, out.bytes);
  source->Exec("COMMIT");
  std::string key_list, key_match;
  for (const auto& k : t.key_columns) {
    key_list += (key_list.empty() ? "" : ", ") + k;
    key_match += (key_match.empty() ? "" : " AND ") + std::string("s.") + k + " = t." + k;
  }
  MustSucceed(*target, target->Exec(std::string("ANALYZE pg_temp.") + kStageTable), what);
  // Negative control (tests only, TRELLARA_FAULTS=defect.reseed_delete_ignores_filter:1:defect;
  // seed row filtered_reseed_preserves_out_of_scope_rows, caught by
  // negative_control_reseed_delete_ignores_filter_is_caught in tests/integration/test_verify_reseed.py):
  // the delete step leaves out the filter, so every target row not staged — all rows outside the
  // filter among them — is deleted, as if the whole table were being replaced.
  const std::string scope = fault::Hit("defect.reseed_delete_ignores_filter") == fault::Action::Defect
                                ? std::string("true")
                                : *o.where;
  auto deleted = MustSucceed(*target,
                             // ExecParams: one statement only, whatever the filter's text holds.
                             target->ExecParams("DELETE FROM " + t.qualified + " AS t WHERE (" + scope +
                                          ") AND NOT EXISTS (SELECT 1 FROM pg_temp." + kStageTable + " AS s WHERE " +
                                          key_match + ")",
                                          {}),
                             "deleting the target rows of " + t.name + " the source no longer has (--where evaluated "
                             "on the target)");
  out.deleted = deleted.affected();
  std::string set;
  for (const auto& c : t.column_list) {
    if (std::find(t.key_columns.begin(), t.key_columns.end(), c) != t.key_columns.end()) continue;
    set += (set.empty() ? "" : ", ") + c + " = EXCLUDED." + c;
  }
  auto upserted = MustSucceed(
      *target,
      target->Exec("INSERT INTO " + t.qualified + " AS t (" + t.columns + ") SELECT " + t.columns + " FROM pg_temp." +
                   kStageTable + " ON CONFLICT (" + key_list + ") " +
                   (set.empty() ? std::string("DO NOTHING") : "DO UPDATE SET " + set)),
      "upserting the source rows of " + t.name + " (the target needs a unique index on " + key_list + ")");
  out.upserted = upserted.affected();
  // Quarantines this reseed covers (docs/snapshot.md "Reseed"): open, of this flow, at or before C,
  // and naming this table.
  auto resolved = MustSucceed(
      *target,
      target->ExecParams("UPDATE trellara.quarantine SET state = 'resolved', resolved_at = now() "
                         "WHERE flow = $1 AND state IN ('quarantined', 'replay_ready') AND commit_lsn <= $2::pg_lsn "
                         "AND (strpos(detail, $3) > 0 OR strpos(message, $3) > 0 OR strpos(detail, $4) > 0 "
                         "OR strpos(message, $4) > 0)",
                         {config.flow_name, FormatLsn(out.point), t.name, t.qualified}),
      "closing the quarantines of " + t.name + " the reseed covers");
  out.resolved = resolved.affected();
  MustSucceed(*target, target->Exec("COMMIT"), what);
  hold.Release();
  return out;
}

void Run(const Options& o) {
  const FlowConfig config = LoadConfigOrFail(o.config_path);
  if (config.source_conninfo.empty())
    throw CommandFailed("reseed needs the source: set source.conninfo in " + config.path, 2);
  if (!o.where) {
    // The whole table: a new snapshot run of that one table (chunks, per-chunk boundaries, no
    // hold), i.e. exactly `trellara snapshot --table T --force`; this process becomes that command.
    std::vector<std::string> args{"trellara", "snapshot", "--config", o.config_path, "--table", o.table, "--force",
                                  "--format", o.format == OutputFormat::Json ? "json" : "text"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::cout.flush();
    execv("/proc/self/exe", argv.data());
    throw CommandFailed("reseed of the whole table " + o.table + " could not start trellara snapshot (" +
                            std::strerror(errno) + "); run trellara snapshot --config " + config.path + " --table " +
                            o.table + " --force",
                        2);
  }
  const auto started = Clock::now();
  const Outcome out = ReseedFiltered(config, o);
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (o.format == OutputFormat::Json) {
    nlohmann::ordered_json j;
    j["flow"] = config.flow_name;
    j["table"] = o.table;
    j["where"] = *o.where;
    j["consistent_lsn"] = FormatLsn(out.point);
    j["state"] = "copied";
    j["rows"] = out.staged;
    j["bytes"] = out.bytes;
    j["deleted"] = out.deleted;
    j["upserted"] = out.upserted;
    j["quarantines_resolved"] = out.resolved;
    j["seconds"] = seconds;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "reseed flow " << config.flow_name << " table " << o.table << " where " << *o.where
              << " at source consistent point " << FormatLsn(out.point) << ": " << out.staged << " source rows ("
              << out.bytes << " bytes) upserted, " << out.deleted << " target rows the source lacks deleted, "
              << out.resolved << " quarantines resolved, " << static_cast<int64_t>(seconds * 1000) << " ms\n";
  }
}

}  // namespace
}  // namespace reseed_command

void RegisterReseed(CLI::App& app) {
  using namespace reseed_command;
  auto* cmd = app.add_subcommand("reseed", "copy a table's rows, or those a filter selects, again from the source (--config F --table T)");
  auto o = std::make_shared<Options>();
  AddConfigOption(cmd, o->config_path);
  cmd->add_option("--table", o->table, "the table (schema.table)")->required();
  cmd->add_option("--where", o->where,
                  "only rows matching this SQL filter: deterministic, naming only source columns (key columns are best); "
                  "evaluated on the source to copy and on the target to delete rows the source lacks");
  AddFormatOption(cmd, o->format);
  cmd->add_option("--timeout", o->timeout_seconds,
                  "how long to wait for the applier to reach the source's point (seconds, default 60)")
      ->check(CLI::Range(1, 86400));
  cmd->callback([o] { Run(*o); });
}

}  // namespace trellara::cli
