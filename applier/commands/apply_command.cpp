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
    // The applier reads the local log; reading the broker's stream is not built yet (docs/broker.md).
    if (config.transport.kind != TransportKind::Local)
      throw CommandFailed("configuration " + config.path + ": trellara apply reads the flow's log directory on this "
                          "host; applying from the broker's stream ([transport] kind = \"nats\") is not built yet. "
                          "Run the applier on the source host with a configuration whose [transport] kind is "
                          "\"local\" (trellara forward keeps publishing with the other)", kExitConfig);
    apply::InstallStopHandlers();
    apply::Applier applier(std::move(config), *until_caught_up);
    applier.Run();
  });
}

}  // namespace trellara::cli
