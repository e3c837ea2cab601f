// commands.h — the `trellara` command's subcommands; each lives in its own file.
//
// A Register* function adds its subcommand(s) to the CLI11 app and sets the callback. Callbacks
// report failure by throwing CommandFailed (message for the operator, exit code); main() prints
// it to stderr as "trellara: <message>" and exits with that code.
#pragma once

// CLI11 is declared, not included: only the files that register options include <CLI/CLI.hpp>
// (about 5 s of compile time per file that parses it).
namespace CLI {
class App;
class Option;
}  // namespace CLI

#include "kit/config.h"
#include "kit/errors.h"
#include "kit/log_progress.h"
#include "kit/options.h"
#include "pg/pg_connection.h"
#include "pg/session.h"

namespace trellara::cli {

void RegisterInspectTransaction(CLI::App& app);
// `apply --config F [--until-caught-up]` (apply_command.cpp).
void RegisterApply(CLI::App& app);
void RegisterLogCommands(CLI::App& app);
// `log records`; call after RegisterLogCommands (it adds to the `log` subcommand).
void RegisterLogRecords(CLI::App& app);
// `status --config F [--format json]` (status_command.cpp).
void RegisterStatus(CLI::App& app);
// `quarantine list|replay-ready` (quarantine_command.cpp).
void RegisterQuarantine(CLI::App& app);
// `verify --config F [--table T] [--format json]` (verify_command.cpp).
void RegisterVerify(CLI::App& app);
// `snapshot --config F [--table T ...] [--jobs N] [--run-id R] [--force]` (snapshot_command.cpp).
void RegisterSnapshot(CLI::App& app);
// `reseed --config F --table T [--where SQL]` (reseed_command.cpp).
void RegisterReseed(CLI::App& app);
// `chaos report --output FILE [--results DIR] [--matrix FILE] [--format html|json]` (chaos_command.cpp).
void RegisterChaos(CLI::App& app);
// `contract-test --config F [--format text|json]` (contract_test_command.cpp).
void RegisterContractTest(CLI::App& app);
// `repair-plan --config F [--format text|json]` (repair_plan_command.cpp).
void RegisterRepairPlan(CLI::App& app);
// `soak --config F --duration D [--run-applier | --applier-pid PID] [--format json]` (soak_command.cpp).
void RegisterSoak(CLI::App& app);
// `check --config F [--format text|json]` (check_command.cpp).
void RegisterCheck(CLI::App& app);
// `pilot-package --config F --output DIR [--report P] [--sample-offset N] [--force]` (pilot_package_command.cpp).
void RegisterPilotPackage(CLI::App& app);
// `forward --config F [--until-caught-up] [--format json]` (forward_command.cpp).
void RegisterForward(CLI::App& app);
// `partition-watermarks --config F [--format text|json]` (partition_watermarks_command.cpp).
void RegisterPartitionWatermarks(CLI::App& app);
// `run --local --verify --config F [--timeout S]` (run_command.cpp).
void RegisterRun(CLI::App& app);
// `lake fanin run|verify --config F`, `lake plan --config F` (lake_command.cpp).
void RegisterLake(CLI::App& app);

}  // namespace trellara::cli
