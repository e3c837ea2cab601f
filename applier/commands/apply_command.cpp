// apply_command.cpp — `trellara apply --config F [--until-caught-up]`: reads the configuration and
// runs the applier (engine/applier.h) until it is stopped, blocked or (with --until-caught-up)
// caught up with the log.
#include <memory>
#include <string>

#include "commands/commands.h"
#include "engine/applier.h"

namespace trellara::cli {

void RegisterApply(CLI::App& app) {
  auto* cmd = app.add_subcommand("apply", "apply the flow's durable log to the target, exactly once (--config F)");
  auto config_path = std::make_shared<std::string>();
  auto until_caught_up = std::make_shared<bool>(false);
  AddConfigOption(cmd, *config_path);
  cmd->add_flag("--until-caught-up", *until_caught_up,
                "apply every durable record present at start, then exit 0 (non-zero if blocked by a quarantine)");
  cmd->callback([config_path, until_caught_up] {
    FlowConfig config = LoadConfigOrFail(*config_path);
    // With [transport] kind = "nats" the applier keeps flow.log_directory as its replica of the
    // log, fed from the stream (broker/stream_receiver.h, docs/broker.md "Remote apply").
    apply::InstallStopHandlers();
    apply::Applier applier(std::move(config), *until_caught_up);
    applier.Run();
  });
}

}  // namespace trellara::cli
