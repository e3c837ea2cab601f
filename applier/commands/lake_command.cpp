// lake_command.cpp — `trellara lake fanin run|verify` and `trellara lake plan` (docs/lake.md): the
// fleet fan-in of many store flows into one Iceberg lake (lake/fanin.h).
//
// Exit codes: run — 0 stopped or caught up, 3 an epoch is quarantined, 2 the configuration is
// unusable, 1 a failure on the way (a store's log unreadable, the catalog or the object store
// refusing; the message names it);
// plan — 0 shown, 2 could not read; fanin verify — 0 the lake agrees with its catalog and the
// stores' logs, 1 a difference (named), 2 could not verify.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "engine/applier.h"
#include "lake/fanin.h"
#include "lake/lake_metrics.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace lake_command {
namespace {

void PrintPlanText(const nlohmann::json& plan) {
  std::cout << "lake " << plan["lake"].get<std::string>() << ": epochs of " << plan["epoch_seconds"].get<uint64_t>()
            << " s, gap policy " << plan["gap_policy"].get<std::string>() << " (deadline "
            << plan["gap_deadline_seconds"].get<uint64_t>() << " s); views complete through epoch index "
            << plan["views_complete_through_epoch"].get<uint64_t>() << "\n";
  for (const auto& e : plan["epochs"]) {
    std::cout << "  " << e["epoch"].get<std::string>() << "  " << e["state"].get<std::string>() << "  "
              << e["completeness"].get<std::string>();
    if (!e["published_transactions"].is_null())
      std::cout << "  published " << e["published_transactions"] << " transactions / " << e["published_changes"]
                << " changes";
    if (!e["waits_for"].get<std::string>().empty()) std::cout << "\n      " << e["waits_for"].get<std::string>();
    if (e.contains("quarantine")) std::cout << "\n      quarantine: " << e["quarantine"].get<std::string>();
    std::cout << "\n";
  }
  const auto& views = plan["views"];
  std::cout << "views: horizon " << views["horizon_epochs"].get<uint64_t>() << " epoch(s), through "
            << (views["through_epoch"].is_null() ? std::string("none") : views["through_epoch"].get<std::string>()) << "\n";
  for (const auto& t : views["tables"])
    std::cout << "  " << t["table"].get<std::string>() << "  through "
              << (t["through_epoch"].is_null() ? std::string("none") : t["through_epoch"].get<std::string>()) << "  "
              << t["rows"].get<uint64_t>() << " rows\n";
}

}  // namespace
}  // namespace lake_command

void RegisterLake(CLI::App& app) {
  using namespace lake_command;
  auto* lake = app.add_subcommand("lake", "the fleet fan-in: many store flows into one Iceberg lake (docs/lake.md)");
  lake->require_subcommand(1);
  auto* fanin = lake->add_subcommand("fanin", "run or verify the fan-in of the lake's stores");
  fanin->require_subcommand(1);

  auto run_config = std::make_shared<std::string>();
  auto until = std::make_shared<bool>(false);
  auto* run = fanin->add_subcommand("run", "read every store's log into the lake's epochs and publish them");
  run->add_option("--config", *run_config, "the lake's configuration ([lake] and one [[store]] per store)")->required();
  run->add_flag("--until-caught-up", *until,
                "read every store to its end, publish what may be published now, then exit");
  auto metrics_listen = std::make_shared<std::string>();
  run->add_option("--metrics-listen", *metrics_listen,
                  "serve GET /metrics and /readyz of the fan-in on HOST:PORT (from the catalog, once a second)");
  run->callback([run_config, until, metrics_listen] {
    const lake::LakeConfig config = lake::LoadLakeConfig(*run_config);
    apply::InstallStopHandlers();
    std::unique_ptr<lake::LakeMetrics> metrics;
    if (!metrics_listen->empty()) metrics = std::make_unique<lake::LakeMetrics>(config, *metrics_listen);
    const int code = lake::RunFanin(config, lake::FaninOptions{*until});
    if (code != 0) throw CommandFailed("lake " + config.name + " has a quarantined epoch: trellara lake plan --config " +
                                           *run_config + " names it and why", code);
  });

  auto verify_config = std::make_shared<std::string>();
  auto verify_format = std::make_shared<OutputFormat>(OutputFormat::Text);
  auto* verify = fanin->add_subcommand("verify", "check every published epoch's files and counts against the catalog "
                                                 "and the stores' logs");
  verify->add_option("--config", *verify_config, "the lake's configuration")->required();
  AddFormatOption(verify, *verify_format);
  verify->callback([verify_config, verify_format] {
    const lake::LakeConfig config = lake::LoadLakeConfig(*verify_config);
    nlohmann::json report;
    const int code = lake::VerifyLake(config, report);
    if (*verify_format == OutputFormat::Json) {
      std::cout << report.dump() << std::endl;
    } else {
      std::cout << "lake " << config.name << ": " << report["epochs"].size() << " published epoch(s), "
                << report["data_files_checked"] << " data file(s) checked: "
                << (code == 0 ? "the lake agrees with its catalog and the stores' logs" : "DIFFERENCES") << "\n";
      for (const auto& p : report["problems"]) std::cout << "  " << p.get<std::string>() << "\n";
    }
    if (code != 0) throw CommandFailed("lake " + config.name + " does not agree with its catalog or the stores' logs", 1);
  });

  auto plan_config = std::make_shared<std::string>();
  auto plan_format = std::make_shared<OutputFormat>(OutputFormat::Text);
  auto* plan = lake->add_subcommand("plan", "every epoch: its state, each store's state for it and what it waits for");
  plan->add_option("--config", *plan_config, "the lake's configuration")->required();
  AddFormatOption(plan, *plan_format);
  plan->callback([plan_config, plan_format] {
    const lake::LakeConfig config = lake::LoadLakeConfig(*plan_config);
    const nlohmann::json p = lake::PlanLake(config);
    if (*plan_format == OutputFormat::Json) std::cout << p.dump() << std::endl;
    else PrintPlanText(p);
  });
}

}  // namespace trellara::cli
