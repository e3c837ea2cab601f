// run_command.cpp — `trellara run --local --verify --config F [--timeout S]` (docs/partitioned.md
// "One command"): applies a local flow until the target holds everything its log held at start,
// then verifies the target against the source, with one exit code.
//
// It runs the flow's appliers as its own children — one `trellara apply --partition K` per
// partition a pending partitioned transaction lists (or that reported a checkpoint before), and
// the flow's applier, which publishes — waits until the target's dedup rows reach the last
// transaction the log held when it started, runs `trellara verify` beside them (verify holds the
// applier at an exact point), then stops them with SIGTERM.
//
// Exit 0: caught up and the target equals the source; 1: verify found a mismatch; 3: the flow is
// blocked (an applier or a partition applier halted, a quarantined transaction); 2: it could not
// run (configuration, log, target, an applier that exited, --timeout reached).
#include <CLI/CLI.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <set>
#include <thread>

#include "commands/commands.h"
#include "commands/partitioned_log.h"
#include "pg/target_schema.h"

extern char** environ;

namespace trellara::cli {
// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace run_command {
namespace {

std::string SelfPath() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw CommandFailed("cannot find the trellara executable (/proc/self/exe)", kExitCouldNotRun);
  return std::string(path, static_cast<size_t>(n));
}

pid_t Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (int rc = posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ); rc != 0)
    throw CommandFailed("cannot start " + argv[1] + ": " + std::strerror(rc), kExitCouldNotRun);
  return pid;
}

// The children, stopped with SIGTERM (and waited for) however run ends.
struct Children {
  std::vector<std::pair<pid_t, std::string>> running;
  ~Children() { StopAll(); }
  void StopAll() {
    for (auto& [pid, name] : running) kill(pid, SIGTERM);
    for (auto& [pid, name] : running) waitpid(pid, nullptr, 0);
    running.clear();
  }
  // The first child that exited, with its exit code (-signal when killed by one), or nullopt.
  std::optional<std::pair<std::string, int>> Exited() {
    for (auto it = running.begin(); it != running.end(); ++it) {
      int status = 0;
      if (waitpid(it->first, &status, WNOHANG) == it->first) {
        auto result = std::make_pair(it->second, WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
        running.erase(it);
        return result;
      }
    }
    return std::nullopt;
  }
};

uint64_t Number(const std::optional<std::string>& v) { return v ? std::stoull(*v) : 0; }

int Run(const std::string& config_path, int timeout_s) {
  FlowConfig config = LoadConfigOrFail(config_path);
  if (config.transport.kind != TransportKind::Local)
    throw CommandFailed("trellara run --local runs a flow from its local log; " + config.path +
                        " names a broker ([transport] kind = \"nats\"): run trellara apply and trellara verify instead",
                        kExitConfig);
  if (config.source_conninfo.empty())
    throw CommandFailed("trellara run --verify compares with the source: set [source] conninfo in " + config.path,
                        kExitConfig);
  const PendingLog facts = ReadPendingLog(config, 0);
  auto target = ConnectPinned(config, config.target_conninfo, "target", "trellara run");
  MustSucceed(*target, target->Exec(TargetSchemaScript()), "creating the trellara state schema on the target");
  std::set<uint32_t> partitions;
  for (const partition::PendingTransaction& tx : facts.partitioned) partitions.insert(tx.partitions.begin(), tx.partitions.end());
  PgResult known = MustSucceed(*target,
                               target->ExecParams("SELECT partition FROM trellara.partition_checkpoints WHERE flow = $1",
                                                  {config.flow_name}),
                               "reading the flow's partitions");
  for (int i = 0; i < known.rows(); i++) partitions.insert(static_cast<uint32_t>(Number(known.Value(i, 0))));
  const std::string self = SelfPath();
  Children children;
  for (uint32_t p : partitions)
    children.running.emplace_back(Spawn({self, "apply", "--config", config.path, "--partition", std::to_string(p)}),
                                  "the partition applier of partition " + std::to_string(p));
  children.running.emplace_back(Spawn({self, "apply", "--config", config.path}), "the flow's applier");
  std::cout << "trellara run: flow " << config.flow_name << ": " << partitions.size() << " partition applier(s) and "
            << "the applier started; applying through " << FormatLsn(facts.last_commit_lsn) << std::endl;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    if (auto exited = children.Exited())
      throw CommandFailed(exited->first + " exited " + std::to_string(exited->second) + " before the flow caught up",
                          exited->second == kExitFlowBlocked ? kExitFlowBlocked : kExitCouldNotRun);
    PgResult r = MustSucceed(
        *target,
        target->ExecParams(
            "SELECT (SELECT (coalesce(max(commit_lsn), '0/0') - '0/0')::numeric::text FROM trellara.applied_transactions "
            "WHERE flow = $1), (SELECT count(*) FROM trellara.quarantine WHERE flow = $1 AND state = 'quarantined'), "
            "(SELECT string_agg('partition ' || partition || ': ' || blocker, '; ') FROM "
            "trellara.partition_checkpoints WHERE flow = $1 AND blocker IS NOT NULL)",
            {config.flow_name}),
        "reading how far the target is");
    if (Number(r.Value(0, 1)) > 0)
      throw CommandFailed("flow " + config.flow_name + " is blocked by a quarantined transaction (trellara quarantine "
                          "list --config " + config.path + ")",
                          kExitFlowBlocked);
    if (r.Value(0, 2))
      throw CommandFailed("flow " + config.flow_name + " is blocked: " + *r.Value(0, 2), kExitFlowBlocked);
    if (Number(r.Value(0, 0)) >= facts.last_commit_lsn) break;
    if (std::chrono::steady_clock::now() > deadline)
      throw CommandFailed("flow " + config.flow_name + " did not catch up within --timeout " + std::to_string(timeout_s) +
                          " s (the target is at " + FormatLsn(Number(r.Value(0, 0))) + ")",
                          kExitCouldNotRun);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cout << "trellara run: flow " << config.flow_name << " caught up through " << FormatLsn(facts.last_commit_lsn)
            << "; verifying" << std::endl;
  const pid_t verify = Spawn({self, "verify", "--config", config.path});
  int status = 0;
  waitpid(verify, &status, 0);
  children.StopAll();
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : kExitCouldNotRun;
  std::cout << "trellara run: flow " << config.flow_name << ": "
            << (code == kExitOk ? "the target equals the source" : code == kExitMismatch ? "the target differs from the source"
                                                                                           : "verify could not compare")
            << std::endl;
  return code;
}

}  // namespace
}  // namespace run_command

void RegisterRun(CLI::App& app) {
  using namespace run_command;
  auto* cmd = app.add_subcommand("run", "apply a local flow until caught up, then verify it (--local --verify --config F)");
  auto config_path = std::make_shared<std::string>();
  auto local = std::make_shared<bool>(false);
  auto verify = std::make_shared<bool>(false);
  auto timeout_s = std::make_shared<int>(3600);
  AddConfigOption(cmd, *config_path);
  cmd->add_flag("--local", *local, "run the flow from its local log (the only mode built)");
  cmd->add_flag("--verify", *verify, "once caught up, compare the target with the source (trellara verify)");
  cmd->add_option("--timeout", *timeout_s, "give up catching up after this many seconds (default 3600)")
      ->check(CLI::Range(1, 86400 * 7));
  cmd->callback([config_path, local, verify, timeout_s] {
    if (!*local || !*verify)
      throw CommandFailed("trellara run needs --local and --verify: it runs a local flow until caught up and verifies "
                          "it (to only apply, run trellara apply --until-caught-up)",
                          kExitUsage);
    const int code = Run(*config_path, *timeout_s);
    if (code != kExitOk) throw CommandFailed("flow verification did not pass (see above)", code);
  });
}

}  // namespace trellara::cli
