// soak_processes.cpp — the processes `trellara soak` watches: the `trellara apply` it starts
// with --run-applier (ChildApplier), the relay worker found through the source's
// trellara.status(), and the memory of both (VmHWM / VmRSS from /proc/<pid>/status every 100 ms,
// MemorySampler).
//
// Never signals a process soak did not start (a --applier-pid process and the relay are only read),
// never signals a child it has already reaped (its PID may belong to another process), and always
// waits for the child it started.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>

#include "soak_command_internal.h"

namespace trellara::cli::soak_detail {
namespace {

constexpr auto kMemorySampleInterval = std::chrono::milliseconds(100);
constexpr auto kRelayLookupInterval = std::chrono::seconds(1);

// One sample into `m`; false when the process is gone or its status has no VmHWM (a zombie).
bool Sample(int64_t pid, soak::ProcessMemory& m) {
  auto status = ReadProcFile(pid, "status");
  if (!status) return false;
  auto hwm = soak::ParseProcStatusKib(*status, "VmHWM");
  auto rss = soak::ParseProcStatusKib(*status, "VmRSS");
  if (!hwm || !rss) return false;
  m.samples++;
  m.peak_hwm_kib = std::max(m.peak_hwm_kib, *hwm);
  m.max_rss_kib = std::max(m.max_rss_kib, *rss);
  auto keep_max = [&](std::optional<uint64_t>& into, const char* field) {
    if (auto v = soak::ParseProcStatusKib(*status, field)) into = std::max(into.value_or(0), *v);
  };
  keep_max(m.max_rss_anon_kib, "RssAnon");
  keep_max(m.max_rss_file_kib, "RssFile");
  keep_max(m.max_rss_shmem_kib, "RssShmem");
  return true;
}

}  // namespace

ChildApplier::ChildApplier(const std::string& config_path) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = fork();
  if (pid_ < 0) throw SetupFailed(std::string("cannot start trellara apply: fork failed: ") + std::strerror(errno));
  if (pid_ == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    const char* argv[] = {"trellara", "apply", "--config", config_path.c_str(), nullptr};
    execv("/proc/self/exe", const_cast<char* const*>(argv));
    std::fprintf(stderr, "trellara soak: cannot exec /proc/self/exe apply: %s\n", std::strerror(errno));
    _exit(127);
  }
}

std::optional<int> ChildApplier::TryReap() {
  std::lock_guard lock(mu_);
  if (!status_) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
  }
  return status_;
}

std::pair<int, bool> ChildApplier::Stop() {
  if (auto ended = TryReap()) return {*ended, false};
  kill(pid_, SIGTERM);
  const auto deadline = Clock::now() + kApplierStopTimeout;
  while (!TryReap()) {
    if (Clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      std::lock_guard lock(mu_);
      status_ = status;
      return {status, false};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {*status_, true};
}

std::optional<std::string> ReadProcFile(int64_t pid, const char* name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + name, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<int64_t> FindRelayPid(PgConnection& source, const FlowConfig& config) {
  auto r = source.ExecParams("SELECT worker_pid FROM trellara.status() WHERE flow = $1", {config.flow_name});
  if (!r.ok() || r.rows() != 1 || !r.Value(0, 0)) return std::nullopt;
  const int64_t pid = std::stoll(*r.Value(0, 0));
  auto cmdline = ReadProcFile(pid, "cmdline");
  if (!cmdline) return std::nullopt;
  std::replace(cmdline->begin(), cmdline->end(), '\0', ' ');
  if (cmdline->find("trellara relay " + config.flow_name) == std::string::npos) return std::nullopt;
  return pid;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

MemorySampler::MemorySampler(const FlowConfig& config, int64_t relay_pid, int64_t applier_pid, ChildApplier* child)
    : config_(config), applier_pid_(applier_pid), child_(child) {
  source_ = ConnectPinned(config, config.source_conninfo, "source", "trellara-soak-sampler/" + config.flow_name);
  relay_.pid = relay_pid;
  applier_.pid = applier_pid;
  thread_ = std::thread([this] { Loop(); });
}

void MemorySampler::Loop() {
  auto next_lookup = Clock::now();
  while (!stop_) {
    const auto started = Clock::now();
    try {
      std::lock_guard lock(mu_);
      int64_t pid = *relay_.pid;
      if (!Sample(pid, relay_) && started >= next_lookup) {
        next_lookup = started + kRelayLookupInterval;
        if (auto found = FindRelayPid(*source_, config_); found && *found != pid) {
          relay_.pid = *found;
          relay_pids_.push_back(*found);
          Sample(*found, relay_);
        }
      }
      if (!applier_gone_) {
        if (child_ && child_->TryReap()) applier_gone_ = true;
        if (!applier_gone_ && !Sample(applier_pid_, applier_) && !child_) applier_gone_ = true;
      }
    } catch (const std::exception&) {
      // A malformed answer of trellara.status(): the relay is looked up again next second.
    }
    std::this_thread::sleep_until(started + kMemorySampleInterval);
  }
}

}  // namespace trellara::cli::soak_detail
