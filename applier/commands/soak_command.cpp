// soak_command.cpp — `trellara soak --config F --duration D [--format text|json] [--table T]
// [--rows-per-transaction N] [--applier-pid PID | --run-applier] [--settle-timeout D]
// [--memory-limit-mib M]` (docs/soak.md).
//
// Drives large transactions through a running flow for D and measures what an operator needs
// before trusting it with a long run: the relay's and the applier's memory (VmHWM / VmRSS from
// /proc/<pid>/status every 100 ms), the end-to-end lag of every committed transaction (COMMIT
// returned on the source -> seen applied on the target, polled every 10 ms), and at the end that
// the soak table on the target holds exactly the source's rows.
//
// This file runs the soak and judges it; its parts are soak_processes.cpp (the applier it may
// start, the memory of the relay and the applier), soak_lag.cpp (the target's applied position)
// and soak_workload.cpp (the soak table and the transactions written to it).
//
// Decisions that need no server or clock (durations, /proc parsing, percentiles, checks, output)
// are core's (trellara/report/soak.h). It writes only the soak table on the source (and creates it there
// when missing and the publication covers it); it never writes the target and never signals a
// process it did not start (a --applier-pid process is only read).
// Exit 0 every check passed, 1 a check failed, 2 usage, setup or a failure that stopped the run.
#include <CLI/CLI.hpp>

#include <sys/wait.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "commands/commands.h"
#include "soak_command_internal.h"

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace soak_command {
namespace {

using namespace soak_detail;

constexpr auto kSettlePollInterval = std::chrono::milliseconds(100);
constexpr auto kApplierStartGrace = std::chrono::milliseconds(500);
constexpr uint64_t kRowsPerTransactionDefault = 200000;
constexpr const char* kTableDefault = "public.trellara_soak";
constexpr const char* kSettleTimeoutDefault = "10m";

struct Options {
  std::string config_path;
  std::string duration = "";
  std::string table = kTableDefault;
  uint64_t rows_per_transaction = kRowsPerTransactionDefault;
  std::optional<int64_t> applier_pid;
  bool run_applier = false;
  std::string settle_timeout = kSettleTimeoutDefault;
  std::string pause;  // between iterations; empty = none (flat out)
  std::optional<uint64_t> memory_limit_mib;
  OutputFormat format = OutputFormat::Text;
};

// ---- the run --------------------------------------------------------------------------------------

int Run(const Options& options) {
  auto duration_s = soak::ParseDurationSeconds(options.duration, "--duration");
  if (!duration_s) throw SetupFailed(duration_s.error().message);
  auto settle_s = soak::ParseDurationSeconds(options.settle_timeout, "--settle-timeout");
  uint64_t pause_s = 0;
  if (!options.pause.empty()) {
    auto parsed = soak::ParseDurationSeconds(options.pause, "--pause");
    if (!parsed.ok()) throw SetupFailed(parsed.error().message);
    pause_s = *parsed;
  }
  if (!settle_s) throw SetupFailed(settle_s.error().message);
  if (!options.run_applier && !options.applier_pid)
    throw SetupFailed("soak measures the applier too: pass --run-applier (soak starts trellara apply --config " +
                      options.config_path + " and stops it at the end) or --applier-pid PID of a running trellara apply");
  const FlowConfig config = LoadConfigOrFail(options.config_path);
  if (config.source_conninfo.empty())
    throw SetupFailed("soak writes to the source: set source.conninfo in " + config.path);

  const std::string app = "trellara-soak/" + config.flow_name;
  auto source = ConnectPinned(config, config.source_conninfo, "source", app);
  const SoakTable table = PrepareTable(*source, config, options.table);
  const auto relay_pid = FindRelayPid(*source, config);
  if (!relay_pid)
    throw SetupFailed("the relay worker of flow " + config.flow_name + " is not running on the source " +
                      source->Describe() + " (trellara.status() has no worker_pid that is a 'trellara relay " +
                      config.flow_name + "' process); check SELECT * FROM trellara.status() for its last_error");
  if (options.applier_pid && !ReadProcFile(*options.applier_pid, "status"))
    throw SetupFailed("--applier-pid " + std::to_string(*options.applier_pid) +
                      ": no such process (/proc/<pid>/status unreadable); pass the PID of a running trellara apply "
                      "--config " + config.path + ", or --run-applier");

  // The ids of this run start past everything the table holds (a rerun appends).
  auto max_id = MustSucceed(*source, source->Exec("SELECT coalesce(max(id), 0) + 1 FROM " + table.qualified),
                            "reading the largest id of " + table.name);
  const int64_t first_id = std::stoll(max_id.Value(0, 0).value_or("1"));

  std::optional<ChildApplier> child;
  if (options.run_applier) {
    child.emplace(config.path);
    std::this_thread::sleep_for(kApplierStartGrace);
    if (auto status = child->TryReap())
      throw SetupFailed("trellara apply --config " + config.path + " (started by soak) " + DescribeWaitStatus(*status) +
                        " right after it started (its error is above); fix that, then rerun soak");
  }
  const int64_t applier_pid = child ? child->pid() : *options.applier_pid;

  soak::Report report;
  report.flow = config.flow_name;
  report.table = table.name;
  report.rows_per_transaction = options.rows_per_transaction;
  LagTracker lag(config);
  MemorySampler sampler(config, *relay_pid, applier_pid, child ? &*child : nullptr);

  const auto started = Clock::now();
  const auto deadline = started + std::chrono::seconds(*duration_s);
  Workload workload(*source, table, options.rows_per_transaction, lag, report);
  const int64_t n = static_cast<int64_t>(options.rows_per_transaction);
  for (int64_t batch = 0; Clock::now() < deadline; batch++) {
    // Batches are 2N ids apart: the N after a batch are the ids its rolled-back writes use.
    const int64_t start = first_id + batch * 2 * n;
    workload.Iterate(start, batch >= 2 ? start - 4 * n : -1, deadline);
    // --pause: a sustained rate instead of flat out (a flat-out workload measures how far the
    // applier trails, not the lag at a rate it keeps up with).
    for (uint64_t waited = 0; waited < pause_s * 10 && Clock::now() < deadline; waited++)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  report.duration_s = std::chrono::duration<double>(Clock::now() - started).count();

  const auto settle_deadline = Clock::now() + std::chrono::seconds(*settle_s);
  while (!lag.AllApplied() && Clock::now() < settle_deadline && !sampler.applier_gone())
    std::this_thread::sleep_for(kSettlePollInterval);
  // A last look: the applier may have finished just before it stopped.
  std::this_thread::sleep_for(kLagPollInterval * 3);
  lag.Stop();
  sampler.Stop();

  report.relay = sampler.relay();
  report.applier = sampler.applier();
  report.lag = soak::SummarizeLag(lag.lag_ms());
  report.checks.push_back(soak::SettledCheck(lag.committed(), lag.applied(), *settle_s, lag.FirstPending()));

  auto tables = ReadSourceTables(*source, config, {table.name});
  auto target = ConnectPinned(config, config.target_conninfo, "target", app);
  report.checks.push_back(
      soak::CompareTableDigests(table.name, Digest(*source, tables.front()), Digest(*target, tables.front())));

  const auto relay_pids = sampler.relay_pids();
  report.checks.push_back({"relay_sampled", report.relay.samples > 0,
                           "relay of flow " + config.flow_name + " sampled " + std::to_string(report.relay.samples) +
                               " times" +
                               (relay_pids.empty() ? std::string()
                                                   : "; it restarted during the run (now pid " +
                                                         std::to_string(relay_pids.back()) + ")")});
  if (child) {
    const bool gone_early = sampler.applier_gone();
    const auto [status, by_sigterm] = child->Stop();
    const bool ok = !gone_early && by_sigterm && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    report.checks.push_back(
        {"applier_ran", ok,
         "trellara apply (pid " + std::to_string(applier_pid) + ", started by soak) " +
             (gone_early ? "ended during the run: it " + DescribeWaitStatus(status) + " (its error is above)"
                         : std::string(by_sigterm ? "ran throughout and, on SIGTERM, " : "did not stop within ") +
                               (by_sigterm ? DescribeWaitStatus(status)
                                           : std::to_string(kApplierStopTimeout.count()) + " s of SIGTERM and was killed"))});
  } else {
    const bool gone = sampler.applier_gone();
    report.checks.push_back({"applier_ran", !gone,
                             "trellara apply (pid " + std::to_string(applier_pid) + ", --applier-pid) " +
                                 (gone ? "ended during the run" : "ran throughout")});
  }
  if (options.memory_limit_mib)
    report.checks.push_back(soak::MemoryLimitCheck(report.relay, report.applier, *options.memory_limit_mib));

  std::cout << (options.format == OutputFormat::Json ? soak::RenderReportJson(report) : soak::RenderReportText(report));
  std::cout.flush();
  if (report.ok()) return 0;
  std::string failed;
  for (const auto& c : report.checks)
    if (!c.ok) failed += (failed.empty() ? "" : ", ") + c.name;
  throw CommandFailed("soak of flow " + config.flow_name + " failed: " + failed + " (details above)", kExitMismatch);
}

}  // namespace
}  // namespace soak_command

void RegisterSoak(CLI::App& app) {
  using namespace soak_command;
  auto* cmd = app.add_subcommand(
      "soak", "drive large transactions through a running flow; report memory, lag and consistency (--config F --duration D)");
  auto options = std::make_shared<Options>();
  AddConfigOption(cmd, options->config_path);
  cmd->add_option("--duration", options->duration, "how long to drive the workload: 30s, 10m, 1h or seconds")->required();
  AddFormatOption(cmd, options->format);
  cmd->add_option("--table", options->table,
                  "the soak table on the source (default public.trellara_soak; created when missing)");
  cmd->add_option("--rows-per-transaction", options->rows_per_transaction,
                  "rows per large transaction (default 200000)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000000}));
  auto* pid = cmd->add_option("--applier-pid", options->applier_pid, "sample this running trellara apply process");
  auto* run = cmd->add_flag("--run-applier", options->run_applier,
                            "start trellara apply --config F as a child for the run and stop it (SIGTERM) at the end");
  pid->excludes(run);
  cmd->add_option("--settle-timeout", options->settle_timeout,
                  "how long to wait at the end for the target to apply everything (default 10m)");
  cmd->add_option("--pause", options->pause,
                  "sleep this long between workload iterations (30s, 1m; default none: flat out)");
  cmd->add_option("--memory-limit-mib", options->memory_limit_mib,
                  "fail when the relay's or the applier's peak VmHWM exceeds this many MiB")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->callback([options] { Run(*options); });
}

}  // namespace trellara::cli
