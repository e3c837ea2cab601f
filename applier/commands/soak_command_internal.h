// soak_command_internal.h — what the parts of `trellara soak` share: soak_command.cpp runs the
// soak, soak_processes.cpp starts the applier it may run and samples the memory of both processes,
// soak_lag.cpp follows the target's applied position, soak_workload.cpp prepares the soak table
// and writes the workload on the source. Internal to applier/commands: included by these files
// only, and it adds no rule of its own (each part states its own).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kit/config.h"
#include "kit/errors.h"
#include "pg/pg_connection.h"
#include "pg/session.h"
#include "pg/source_tables.h"
#include "trellara/report/soak.h"

namespace trellara::cli::soak_detail {

using Clock = std::chrono::steady_clock;
inline constexpr auto kLagPollInterval = std::chrono::milliseconds(10);
inline constexpr auto kApplierStopTimeout = std::chrono::seconds(60);

inline CommandFailed SetupFailed(const std::string& message) { return CommandFailed(message, kExitSetup); }

// ---- soak_processes.cpp: the applier soak starts, and the memory of both processes ------------

// `trellara apply --config F` as our child (this same binary), stdout to /dev/null (soak's own
// stdout carries the summary), stderr shared. Stopped with SIGTERM by Stop(), or by the destructor
// on any failure path, and always waited for.
class ChildApplier {
 public:
  explicit ChildApplier(const std::string& config_path);
  ChildApplier(const ChildApplier&) = delete;
  ChildApplier& operator=(const ChildApplier&) = delete;
  ~ChildApplier() { Stop(); }
  pid_t pid() const { return pid_; }

  // The wait status once the child has ended (reaping it); nullopt while it runs. A reaped PID is
  // never signalled again: it may belong to another process by then.
  std::optional<int> TryReap();

  // SIGTERM and wait (SIGKILL after kApplierStopTimeout) unless it already ended. Returns its
  // wait status and whether it was still running and stopped on SIGTERM.
  std::pair<int, bool> Stop();

 private:
  pid_t pid_ = -1;
  std::mutex mu_;
  std::optional<int> status_;
};

// /proc/<pid>/<name>; nullopt when the process is gone.
std::optional<std::string> ReadProcFile(int64_t pid, const char* name);
// The relay worker's PID from the source's trellara.status(), only when /proc says it is
// `trellara relay <flow>` (as tests/integration/capture_support.py worker_pid does).
std::optional<int64_t> FindRelayPid(PgConnection& source, const FlowConfig& config);
// How a child process ended, for a person: "exited with status 1", "was killed by signal ...".
std::string DescribeWaitStatus(int status);

// Samples the relay and the applier every 100 ms on its own thread (the relay's PID is looked up
// again on its own source session when its process is gone: a restarted relay is followed). With
// a child applier, it also notices the child exiting (and reaps it: the only waitpid while it runs).
class MemorySampler {
 public:
  MemorySampler(const FlowConfig& config, int64_t relay_pid, int64_t applier_pid, ChildApplier* child);
  ~MemorySampler() { Stop(); }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  soak::ProcessMemory relay() {
    std::lock_guard lock(mu_);
    return relay_;
  }
  soak::ProcessMemory applier() {
    std::lock_guard lock(mu_);
    return applier_;
  }
  std::vector<int64_t> relay_pids() {
    std::lock_guard lock(mu_);
    return relay_pids_;
  }
  // The applier process ended while it was watched.
  bool applier_gone() const { return applier_gone_; }

 private:
  void Loop();

  const FlowConfig& config_;
  const int64_t applier_pid_;
  ChildApplier* const child_;
  std::unique_ptr<PgConnection> source_;
  std::mutex mu_;
  soak::ProcessMemory relay_, applier_;
  std::vector<int64_t> relay_pids_;
  std::atomic<bool> applier_gone_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---- soak_lag.cpp: the target's applied position ----------------------------------------------

struct CommittedTransaction {
  uint64_t lower_lsn = 0;  // pg_current_wal_insert_lsn() inside the transaction, before COMMIT
  uint64_t upper_lsn = 0;  // the same right after COMMIT returned
  std::string xid;         // pg_current_xact_id() (with epoch)
  std::string xid32;       // the same without the epoch, as a decoded transaction names it
  Clock::time_point committed_at;
  std::string what;
};

class LagTracker {
 public:
  explicit LagTracker(const FlowConfig& config);
  ~LagTracker() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  void Add(CommittedTransaction t) {
    std::lock_guard lock(mu_);
    committed_++;
    pending_.push_back(std::move(t));
  }
  bool AllApplied() {
    std::lock_guard lock(mu_);
    return pending_.empty();
  }
  uint64_t committed() {
    std::lock_guard lock(mu_);
    return committed_;
  }
  uint64_t applied() {
    std::lock_guard lock(mu_);
    return lag_ms_.size();
  }
  std::vector<double> lag_ms() {
    std::lock_guard lock(mu_);
    return lag_ms_;
  }
  std::string FirstPending();

 private:
  void Loop();
  void Poll();

  const FlowConfig& config_;
  std::unique_ptr<PgConnection> target_;
  std::string origin_;
  std::mutex mu_;
  std::deque<CommittedTransaction> pending_;  // committed on the source, not yet seen applied, in commit order
  std::vector<double> lag_ms_;
  uint64_t committed_ = 0;
  std::optional<uint64_t> applied_lsn_;
  std::string last_error_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---- soak_workload.cpp: the soak table and the workload written to it -------------------------

struct SoakTable {
  std::string name;       // schema.table as given / read
  std::string schema, table;
  std::string qualified;  // quoted for SQL
  std::string publication;
};

// Resolves --table, creates the table when missing (only if the flow's publication then covers
// it: FOR ALL TABLES or FOR TABLES IN SCHEMA) and refuses a table the publication does not publish.
SoakTable PrepareTable(PgConnection& source, const FlowConfig& config, const std::string& table_arg);

// Count and order-independent digest of the table on one side, with the expression verify uses
// (verify_command.cpp CountSide): the published columns in source order through ROW(...)::text.
soak::TableDigest Digest(PgConnection& conn, const SourceTable& t);

class Workload {
 public:
  Workload(PgConnection& source, const SoakTable& table, uint64_t rows, LagTracker& lag, soak::Report& report)
      : source_(source), table_(table), rows_(rows), lag_(lag), report_(report) {}

  // One iteration; stops between transactions once `deadline` passed.
  void Iterate(int64_t batch_start, int64_t previous_previous_start, Clock::time_point deadline);

 private:
  void Begin() { Run("BEGIN", "BEGIN"); }

  [[noreturn]] void Fail(const std::string& what, const PgResult& r);
  uint64_t Run(const std::string& sql, const std::string& what);
  void Commit(const std::string& what);

  PgConnection& source_;
  const SoakTable& table_;
  uint64_t rows_;
  LagTracker& lag_;
  soak::Report& report_;
};

}  // namespace trellara::cli::soak_detail
