// commands.h — the `trellara` command's subcommands; each lives in its own file.
//
// A Register* function adds its subcommand(s) to the CLI11 app and sets the callback. Callbacks
// report failure by throwing CommandFailed (message for the operator, exit code); main() prints
// it to stderr as "trellara: <message>" and exits with that code.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "config.h"
#include "pg_connection.h"

namespace trellara::cli {

struct CommandFailed : std::runtime_error {
  CommandFailed(const std::string& message, int exit_code_ = 1)
      : std::runtime_error(message), exit_code(exit_code_) {}
  int exit_code;
};

enum class OutputFormat { Text, Json };
// Adds `--format text|json` to a subcommand.
void AddFormatOption(CLI::App* cmd, OutputFormat& format);

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

// ---- shared by status, quarantine and verify (defined in status_command.cpp) ----------------

// Exit codes the operator commands share with `apply`.
constexpr int kExitFlowBlocked = 3;  // the flow is halted at a quarantined transaction
constexpr int kExitMismatch = 1;  // verify: source and target differ (2: could not verify, hold_point.h)

// The session settings every target/source session of the applier pins: text values round-trip
// exactly only with the settings the output plugin pinned while decoding. One definition.
inline constexpr const char* kPinnedSessionSettingsSql =
    "SET client_min_messages = warning; SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; "
    "SET IntervalStyle = 'postgres'; SET extra_float_digits = 3; SET bytea_output = 'hex'; "
    "SET search_path = ''";

// Loads the configuration or throws CommandFailed (exit 2) naming the setting.
FlowConfig LoadConfigOrFail(const std::string& path);

// Connects as `application_name` and pins the session settings the applier pins (TimeZone,
// DateStyle, IntervalStyle, extra_float_digits, bytea_output, empty search_path), so text forms
// read here compare with what the applier wrote. `role` ("target", "source") names the side in
// errors. Throws CommandFailed on failure.
std::unique_ptr<PgConnection> ConnectPinned(const FlowConfig& config, const std::string& conninfo,
                                            const std::string& role, const std::string& application_name);

// Runs a statement or throws CommandFailed naming what was being done, the server and the error.
PgResult MustSucceed(PgConnection& conn, PgResult result, const std::string& what);

// Throws CommandFailed unless the target holds this build's trellara state functions.
void RequireTargetState(PgConnection& target, const FlowConfig& config);

// What the flow's log holds past the applier's consumer offset, read without writing anything.
struct LogProgress {
  std::optional<uint64_t> consumer_offset;  // consumers/applier; nullopt when never written
  uint64_t scanned_from = 0;                // consumer offset, or the log's first offset
  uint64_t end_offset = 0;                  // durable end: the next offset the relay writes
  uint64_t lag_records = 0;                 // records in [scanned_from, end_offset)
  uint64_t lag_bytes = 0;                   // their frame bytes (header + payload)
  uint64_t last_commit_lsn = 0;             // highest commit LSN of a complete transaction in that
                                            // range (envelope or commit marker); 0 if none
};
LogProgress ReadLogProgress(const FlowConfig& config);


}  // namespace trellara::cli
