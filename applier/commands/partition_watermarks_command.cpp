// partition_watermarks_command.cpp — `trellara partition-watermarks --config F [--format text|json]`
// (docs/partitioned.md): can partitioned scale expose global visibility safely? Shows each
// partition's checkpoint evidence, lag and blocker (trellara.partition_checkpoints on the target),
// the global watermark (core GlobalWatermark over the partitioned transactions the log holds past
// what the publisher made visible) and what holds it back.
//
// Exit 0: read and shown (whatever the state); 3: a partition is blocked; 2: could not read.
#include <CLI/CLI.hpp>

#include <iostream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "commands/partitioned_log.h"
#include "trellara/partition/partition.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace partition_watermarks_command {
namespace {

using json = nlohmann::json;

struct PartitionRow {
  uint32_t partition = 0;
  uint64_t checkpoint_lsn = 0;
  uint64_t log_offset = 0;
  uint64_t transactions = 0;
  uint64_t chunks = 0;
  std::optional<std::string> blocker;
  std::optional<uint64_t> blocked_lsn;
  std::optional<std::string> applier_pid;
  double seconds_since_update = 0;
};

uint64_t Num(const std::optional<std::string>& v) { return v ? std::stoull(*v) : 0; }

int Run(const std::string& config_path, OutputFormat format) {
  FlowConfig config = LoadConfigOrFail(config_path);
  auto target = ConnectPinned(config, config.target_conninfo, "target", "trellara partition-watermarks");
  PgResult has = MustSucceed(*target, target->Exec("SELECT to_regclass('trellara.partition_checkpoints') IS NOT NULL"),
                             "looking up trellara.partition_checkpoints");
  std::vector<PartitionRow> rows;
  uint64_t visible_lsn = 0;
  uint64_t staged_chunks = 0;
  if (has.Value(0, 0) == std::optional<std::string>("t")) {
    PgResult r = MustSucceed(
        *target,
        target->ExecParams("SELECT partition, (commit_lsn - '0/0')::numeric::text, log_offset, transactions, chunks, "
                           "blocker, (blocked_commit_lsn - '0/0')::numeric::text, applier_pid, "
                           "extract(epoch FROM now() - updated_at)::text "
                           "FROM trellara.partition_checkpoints WHERE flow = $1 ORDER BY partition",
                           {config.flow_name}),
        "reading trellara.partition_checkpoints");
    for (int i = 0; i < r.rows(); i++) {
      PartitionRow row;
      row.partition = static_cast<uint32_t>(Num(r.Value(i, 0)));
      row.checkpoint_lsn = Num(r.Value(i, 1));
      row.log_offset = Num(r.Value(i, 2));
      row.transactions = Num(r.Value(i, 3));
      row.chunks = Num(r.Value(i, 4));
      row.blocker = r.Value(i, 5);
      if (r.Value(i, 6)) row.blocked_lsn = Num(r.Value(i, 6));
      row.applier_pid = r.Value(i, 7);
      row.seconds_since_update = std::stod(r.Value(i, 8).value_or("0"));
      rows.push_back(row);
    }
    PgResult v = MustSucceed(*target,
                             target->ExecParams("SELECT (coalesce(max(commit_lsn), '0/0') - '0/0')::numeric::text "
                                                "FROM trellara.applied_transactions WHERE flow = $1",
                                                {config.flow_name}),
                             "reading what the publisher made visible");
    visible_lsn = Num(v.Value(0, 0));
    PgResult s = MustSucceed(*target,
                             target->ExecParams("SELECT count(*) FROM trellara.partition_stage WHERE flow = $1",
                                                {config.flow_name}),
                             "counting staged chunks");
    staged_chunks = Num(s.Value(0, 0));
  }
  // The partitioned transactions the log holds past what is visible, with the partitions each lists.
  const PendingLog log = ReadPendingLog(config, visible_lsn);
  const std::vector<partition::PendingTransaction>& pending = log.partitioned;
  const uint64_t log_end_lsn = log.last_commit_lsn;
  const std::string& log_problem = log.problem;
  std::map<uint32_t, uint64_t> pending_per_partition;
  std::map<uint32_t, uint64_t> checkpoints;
  for (const PartitionRow& row : rows) checkpoints[row.partition] = row.checkpoint_lsn;
  // A partition's pending transactions: those listing it past its own checkpoint.
  for (const partition::PendingTransaction& p : pending)
    for (uint32_t part : p.partitions) {
      auto evidence = checkpoints.find(part);
      if (evidence == checkpoints.end() || evidence->second < p.commit_lsn) pending_per_partition[part]++;
    }
  auto watermark = partition::GlobalWatermark(visible_lsn, pending, checkpoints);
  if (!watermark) throw CommandFailed(watermark.error().message, kExitCouldNotRead);
  bool blocked = false;
  for (const PartitionRow& row : rows) blocked = blocked || row.blocker.has_value();
  // Partitions some pending transaction lists that have no row at all: no applier ever ran.
  std::vector<uint32_t> never_ran;
  for (const auto& [part, count] : pending_per_partition)
    if (checkpoints.find(part) == checkpoints.end()) never_ran.push_back(part);

  if (format == OutputFormat::Json) {
    json j;
    j["flow"] = config.flow_name;
    j["global_watermark_lsn"] = FormatLsn(watermark->commit_lsn);
    j["visible_lsn"] = FormatLsn(visible_lsn);
    j["log_end_lsn"] = FormatLsn(log_end_lsn);
    j["pending_partitioned_transactions"] = pending.size();
    j["staged_chunks"] = staged_chunks;
    j["held_at_lsn"] = watermark->held_at ? json(FormatLsn(*watermark->held_at)) : json(nullptr);
    j["holding_partitions"] = watermark->holding;
    j["partitions_without_applier"] = never_ran;
    j["log_problem"] = log_problem.empty() ? json(nullptr) : json(log_problem);
    json parts = json::array();
    for (const PartitionRow& row : rows) {
      json p;
      p["partition"] = row.partition;
      p["checkpoint_lsn"] = FormatLsn(row.checkpoint_lsn);
      p["log_offset"] = row.log_offset;
      p["transactions_staged"] = row.transactions;
      p["chunks_staged"] = row.chunks;
      p["pending_transactions"] = pending_per_partition.count(row.partition) ? pending_per_partition[row.partition] : 0;
      p["lag_bytes"] = log_end_lsn > row.checkpoint_lsn ? log_end_lsn - row.checkpoint_lsn : 0;
      p["seconds_since_update"] = row.seconds_since_update;
      p["blocker"] = row.blocker ? json(*row.blocker) : json(nullptr);
      p["blocked_lsn"] = row.blocked_lsn ? json(FormatLsn(*row.blocked_lsn)) : json(nullptr);
      p["applier_pid"] = row.applier_pid ? json(std::stoll(*row.applier_pid)) : json(nullptr);
      parts.push_back(p);
    }
    j["partitions"] = parts;
    std::cout << j.dump(2) << std::endl;
  } else {
    std::cout << "flow " << config.flow_name << ": global watermark " << FormatLsn(watermark->commit_lsn)
              << ", visible in the user tables up to " << FormatLsn(visible_lsn) << ", log up to "
              << FormatLsn(log_end_lsn) << "\n";
    if (watermark->held_at) {
      std::string holding;
      for (uint32_t p : watermark->holding) holding += (holding.empty() ? "" : ", ") + std::to_string(p);
      std::cout << "held back at " << FormatLsn(*watermark->held_at) << " by partition(s) " << holding
                << " (no checkpoint evidence yet)\n";
    } else {
      std::cout << "nothing held back: every pending partitioned transaction has evidence from all its partitions\n";
    }
    std::cout << pending.size() << " partitioned transaction(s) not yet visible, " << staged_chunks
              << " chunk(s) staged\n";
    for (uint32_t p : never_ran)
      std::cout << "partition " << p << ": no partition applier has run (trellara apply --config " << config.path
                << " --partition " << p << ")\n";
    for (const PartitionRow& row : rows) {
      std::cout << "partition " << row.partition << ": checkpoint " << FormatLsn(row.checkpoint_lsn) << " (log offset "
                << row.log_offset << "), " << row.transactions << " transaction(s) staged, "
                << (pending_per_partition.count(row.partition) ? pending_per_partition[row.partition] : 0)
                << " pending, updated " << static_cast<int64_t>(row.seconds_since_update) << " s ago";
      if (row.blocker)
        std::cout << "; BLOCKED at " << (row.blocked_lsn ? FormatLsn(*row.blocked_lsn) : std::string("?")) << ": "
                  << *row.blocker;
      std::cout << "\n";
    }
    if (!log_problem.empty()) std::cout << "the log could not be read to its end: " << log_problem << "\n";
    std::cout.flush();
  }
  return blocked ? kExitFlowBlocked : kExitOk;
}

}  // namespace
}  // namespace partition_watermarks_command

void RegisterPartitionWatermarks(CLI::App& app) {
  using namespace partition_watermarks_command;
  auto* cmd = app.add_subcommand("partition-watermarks",
                                 "a partitioned flow's partition checkpoints, global watermark and what holds it back");
  auto config_path = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>(OutputFormat::Text);
  AddConfigOption(cmd, *config_path);
  AddFormatOption(cmd, *format);
  cmd->callback([config_path, format] {
    const int code = Run(*config_path, *format);
    if (code != kExitOk) throw CommandFailed("a partition of the flow is blocked (see above)", code);
  });
}

}  // namespace trellara::cli
