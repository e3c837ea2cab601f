// apply_command.cpp — `trellara apply --config F [--until-caught-up] [--partition K]`: reads the configuration and
// runs the applier (engine/applier.h) until it is stopped, blocked or (with --until-caught-up)
// caught up with the log.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "commands/commands.h"
#include "engine/applier.h"
#include "engine/partition_applier.h"

namespace trellara::cli {

void RegisterApply(CLI::App& app) {
  auto* cmd = app.add_subcommand("apply", "apply the flow's durable log to the target, exactly once (--config F)");
  auto config_path = std::make_shared<std::string>();
  auto until_caught_up = std::make_shared<bool>(false);
  auto partition = std::make_shared<int>(-1);
  AddConfigOption(cmd, *config_path);
  cmd->add_option("--partition", *partition,
                  "run as the partition applier of partition K of a partitioned flow (docs/partitioned.md): "
                  "stage K's chunks with K's checkpoint; without it, this is the flow's applier (and, for "
                  "partitioned transactions, their publisher)")
      ->check(CLI::Range(0, 63));
  cmd->add_flag("--until-caught-up", *until_caught_up,
                "apply every durable record present at start, then exit 0 (non-zero if blocked by a quarantine)");
  cmd->callback([config_path, until_caught_up, partition] {
    FlowConfig config = LoadConfigOrFail(*config_path);
    if (*partition >= 0) {
      // With [transport] kind = "nats" a partition applier reads the replica of the log that the
      // flow's applier (the publisher) on this host keeps from the stream (docs/partitioned.md
      // "Through a broker").
      apply::InstallStopHandlers();
      apply::PartitionApplier applier(std::move(config), static_cast<uint32_t>(*partition), *until_caught_up);
      applier.Run();
      return;
    }
    // With [transport] kind = "nats" the applier keeps flow.log_directory as its replica of the
    // log, fed from the stream (broker/stream_receiver.h, docs/broker.md "Remote apply").
    apply::InstallStopHandlers();
    apply::Applier applier(std::move(config), *until_caught_up);
    applier.Run();
  });
}

}  // namespace trellara::cli
