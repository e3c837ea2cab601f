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
// Per iteration, on the source (one session): INSERT of N rows; UPDATE of a quarter of them;
// DELETE of the batch written two iterations before (so the table holds at most two batches and a
// 1-hour run does not grow without bound); one transaction with a SAVEPOINT whose part (N/2
// inserts, N/4 deletes) is rolled back with ROLLBACK TO SAVEPOINT; one whole transaction (N
// inserts, N updates) rolled back. With N large the committed ones are streamed in progress and
// the aborted ones exercise the relay's discard of aborted (sub)transactions.
//
// Applied position: a transaction's commit record lies between pg_current_wal_insert_lsn() read
// inside it before COMMIT (lower) and after COMMIT returned (upper). It is applied once the
// target's replication-origin progress (what `trellara status` reports as applied_commit_lsn) is
// at or past the upper bound, or is at or past the lower bound and trellara.applied_transactions
// holds its xid in [lower, upper] (the row commits with the data and the origin progress).
//
// Decisions that need no server or clock (durations, /proc parsing, percentiles, checks, output)
// are core's (trellara/report/soak.h). It writes only the soak table on the source (and creates it there
// when missing and the publication covers it); it never writes the target and never signals a
// process it did not start (a --applier-pid process is only read).
// Exit 0 every check passed, 1 a check failed, 2 usage, setup or a failure that stopped the run.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "commands/commands.h"
#include "pg/source_tables.h"
#include "trellara/record/envelope.h"
#include "trellara/report/soak.h"

namespace trellara::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kMemorySampleInterval = std::chrono::milliseconds(100);
constexpr auto kLagPollInterval = std::chrono::milliseconds(10);
constexpr auto kRelayLookupInterval = std::chrono::seconds(1);
constexpr auto kSettlePollInterval = std::chrono::milliseconds(100);
constexpr auto kApplierStopTimeout = std::chrono::seconds(60);
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

CommandFailed SetupFailed(const std::string& message) { return CommandFailed(message, kExitSetup); }

uint64_t LsnOrFail(const std::optional<std::string>& text, const std::string& what) {
  auto lsn = text ? ParseLsn(*text) : std::nullopt;
  if (!lsn) throw CommandFailed("reading " + what + " returned '" + text.value_or("NULL") + "', not an LSN", kExitSetup);
  return *lsn;
}

// ---- the applier ---------------------------------------------------------------------------------

// `trellara apply --config F` as our child (this same binary), stdout to /dev/null (soak's own
// stdout carries the summary), stderr shared. Stopped with SIGTERM by Stop(), or by the destructor
// on any failure path, and always waited for.
class ChildApplier {
 public:
  explicit ChildApplier(const std::string& config_path) {
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
  ChildApplier(const ChildApplier&) = delete;
  ChildApplier& operator=(const ChildApplier&) = delete;
  ~ChildApplier() { Stop(); }
  pid_t pid() const { return pid_; }

  // The wait status once the child has ended (reaping it); nullopt while it runs. A reaped PID is
  // never signalled again: it may belong to another process by then.
  std::optional<int> TryReap() {
    std::lock_guard lock(mu_);
    if (!status_) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
    }
    return status_;
  }

  // SIGTERM and wait (SIGKILL after kApplierStopTimeout) unless it already ended. Returns its
  // wait status and whether it was still running and stopped on SIGTERM.
  std::pair<int, bool> Stop() {
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

 private:
  pid_t pid_ = -1;
  std::mutex mu_;
  std::optional<int> status_;
};



// ---- memory: /proc/<pid>/status ----------------------------------------------------------------

std::optional<std::string> ReadProcFile(int64_t pid, const char* name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + name, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

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

// The relay worker's PID from the source's trellara.status(), only when /proc says it is
// `trellara relay <flow>` (as tests/integration/capture_support.py worker_pid does).
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

// Samples the relay and the applier every 100 ms on its own thread (the relay's PID is looked up
// again on its own source session when its process is gone: a restarted relay is followed). With
// a child applier, it also notices the child exiting (and reaps it: the only waitpid while it runs).
class MemorySampler {
 public:
  MemorySampler(const FlowConfig& config, int64_t relay_pid, int64_t applier_pid, ChildApplier* child)
      : config_(config), applier_pid_(applier_pid), child_(child) {
    source_ = ConnectPinned(config, config.source_conninfo, "source", "trellara-soak-sampler/" + config.flow_name);
    relay_.pid = relay_pid;
    applier_.pid = applier_pid;
    thread_ = std::thread([this] { Loop(); });
  }
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
  void Loop() {
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

// ---- lag: the target's applied position --------------------------------------------------------

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
  explicit LagTracker(const FlowConfig& config) : config_(config) {
    target_ = ConnectPinned(config, config.target_conninfo, "target", "trellara-soak-lag/" + config.flow_name);
    origin_ = "trellara_" + config.flow_name;
    thread_ = std::thread([this] { Loop(); });
  }
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
  std::string FirstPending() {
    std::lock_guard lock(mu_);
    if (pending_.empty()) return "";
    const auto& t = pending_.front();
    return t.what + " (source xid " + t.xid + ", commit between " + FormatLsn(t.lower_lsn) + " and " +
           FormatLsn(t.upper_lsn) + "); target applied position " +
           (applied_lsn_ ? FormatLsn(*applied_lsn_) : std::string("none (no replication origin " + origin_ + ")")) +
           (last_error_.empty() ? std::string() : "; last error reading the target: " + last_error_);
  }

 private:
  void Loop() {
    while (!stop_) {
      const auto started = Clock::now();
      Poll();
      std::this_thread::sleep_until(started + kLagPollInterval);
    }
  }

  void Poll() {
    auto r = target_->ExecParams("SELECT CASE WHEN pg_catalog.pg_replication_origin_oid($1) IS NOT NULL THEN "
                                 "pg_catalog.pg_replication_origin_progress($1, false) END::text",
                                 {origin_});
    const auto seen_at = Clock::now();
    std::unique_lock lock(mu_);
    if (!r.ok()) {
      last_error_ = r.Describe();
      return;
    }
    if (!r.Value(0, 0)) return;
    auto progress = ParseLsn(*r.Value(0, 0));
    if (!progress) return;
    applied_lsn_ = *progress;
    while (!pending_.empty() && *progress >= pending_.front().lower_lsn) {
      CommittedTransaction head = pending_.front();
      if (*progress < head.upper_lsn) {
        // The origin is inside this transaction's bounds: only its dedup row says whether it is ours.
        lock.unlock();
        auto row = target_->ExecParams("SELECT 1 FROM trellara.applied_transactions WHERE flow = $1 AND "
                                       "commit_lsn BETWEEN $2::pg_lsn AND $3::pg_lsn AND xid IN ($4::bigint, $5::bigint)",
                                       {config_.flow_name, FormatLsn(head.lower_lsn), FormatLsn(head.upper_lsn),
                                        head.xid, head.xid32});
        lock.lock();
        if (!row.ok()) {
          last_error_ = row.Describe();
          return;
        }
        if (row.rows() == 0) return;
      }
      lag_ms_.push_back(std::chrono::duration<double, std::milli>(seen_at - head.committed_at).count());
      pending_.pop_front();
    }
  }

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

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

// ---- the soak table --------------------------------------------------------------------------

struct SoakTable {
  std::string name;       // schema.table as given / read
  std::string schema, table;
  std::string qualified;  // quoted for SQL
  std::string publication;
};

// Resolves --table, creates the table when missing (only if the flow's publication then covers
// it: FOR ALL TABLES or FOR TABLES IN SCHEMA) and refuses a table the publication does not publish.
SoakTable PrepareTable(PgConnection& source, const FlowConfig& config, const std::string& table_arg) {
  auto flow = MustSucceed(source, source.ExecParams("SELECT publication FROM trellara.flows WHERE name = $1",
                                                    {config.flow_name}),
                          "reading flow " + config.flow_name + " from trellara.flows on the source");
  if (flow.rows() != 1)
    throw SetupFailed("flow " + config.flow_name + " does not exist on the source " + source.Describe() +
                      " (trellara.flows); check flow.name and source.conninfo in " + config.path);
  SoakTable t;
  t.publication = flow.Value(0, 0).value_or("");
  auto ident = source.ExecParams("SELECT CASE array_length(n, 1) WHEN 1 THEN 'public' WHEN 2 THEN n[1] END, n[array_length(n, 1)] "
                                 "FROM (SELECT pg_catalog.parse_ident($1) AS n) s",
                                 {table_arg});
  if (!ident.ok() || !ident.Value(0, 0))
    throw SetupFailed("invalid --table '" + table_arg + "': give schema.table or table (in schema public)" +
                      (ident.ok() ? std::string() : ": " + ident.Describe()));
  t.schema = *ident.Value(0, 0);
  t.table = ident.Value(0, 1).value_or("");
  auto q = MustSucceed(source, source.ExecParams("SELECT pg_catalog.format('%I.%I', $1::text, $2::text)", {t.schema, t.table}),
                       "quoting the soak table's name");
  t.qualified = q.Value(0, 0).value_or("");
  t.name = t.schema + "." + t.table;

  auto exists = MustSucceed(source, source.ExecParams("SELECT pg_catalog.to_regclass($1) IS NOT NULL", {t.qualified}),
                            "looking up " + t.name + " on the source");
  const bool created = exists.Value(0, 0) != std::optional<std::string>("t");
  const std::string published_sql =
      "SELECT 1 FROM pg_catalog.pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3";
  if (created) {
    MustSucceed(source, source.Exec("BEGIN"), "BEGIN");
    MustSucceed(source, source.Exec("CREATE TABLE " + t.qualified + " (id bigint PRIMARY KEY, payload text NOT NULL)"),
                "creating the soak table " + t.name + " on the source");
  } else {
    auto cols = MustSucceed(source,
                            source.ExecParams("SELECT count(*) FROM pg_catalog.pg_attribute WHERE attrelid = $1::regclass "
                                              "AND attname IN ('id', 'payload') AND attnum > 0 AND NOT attisdropped",
                                              {t.qualified}),
                            "reading the columns of " + t.name + " on the source");
    if (cols.Value(0, 0) != std::optional<std::string>("2"))
      throw SetupFailed("table " + t.name + " exists on the source " + source.Describe() +
                        " but has no columns id and payload; soak writes (id bigint PRIMARY KEY, payload text): "
                        "pass --table naming a new table (soak creates it) or one of that shape");
  }
  auto published = MustSucceed(source, source.ExecParams(published_sql, {t.publication, t.schema, t.table}),
                               "reading pg_publication_tables for publication " + t.publication);
  if (published.rows() == 0) {
    if (created) source.Exec("ROLLBACK");
    throw SetupFailed("the soak table " + t.name + " is not published by publication " + t.publication + " of flow " +
                      config.flow_name + " on the source " + source.Describe() +
                      (created ? " (soak did not create it: a new table would not be captured)" : "") +
                      "; add it with ALTER PUBLICATION " + t.publication + " ADD TABLE " + t.qualified +
                      " (and create it on the target), or use a flow whose publication is FOR ALL TABLES");
  }
  if (created) MustSucceed(source, source.Exec("COMMIT"), "committing the creation of " + t.name);
  return t;
}

// Count and order-independent digest of the table on one side, with the expression verify uses
// (verify_command.cpp CountSide): the published columns in source order through ROW(...)::text.
soak::TableDigest Digest(PgConnection& conn, const SourceTable& t) {
  soak::TableDigest d;
  auto r = conn.Exec("SELECT count(*), coalesce(sum(pg_catalog.hashtextextended(ROW(" + t.columns +
                     ")::text, 0)::numeric), 0) FROM " + t.qualified);
  if (!r.ok()) {
    d.error = r.Describe() + " on " + conn.Describe();
    return d;
  }
  d.rows = std::stoull(r.Value(0, 0).value_or("0"));
  d.digest = r.Value(0, 1).value_or("0");
  return d;
}

// ---- the workload -----------------------------------------------------------------------------

class Workload {
 public:
  Workload(PgConnection& source, const SoakTable& table, uint64_t rows, LagTracker& lag, soak::Report& report)
      : source_(source), table_(table), rows_(rows), lag_(lag), report_(report) {}

  // One iteration; stops between transactions once `deadline` passed.
  void Iterate(int64_t batch_start, int64_t previous_previous_start, Clock::time_point deadline) {
    const int64_t n = static_cast<int64_t>(rows_);
    const std::string lo = std::to_string(batch_start), hi = std::to_string(batch_start + n - 1);
    const std::string next_lo = std::to_string(batch_start + n);
    const std::string in_batch = " WHERE id BETWEEN " + lo + " AND " + hi;

    Begin();
    report_.rows_inserted += Run("INSERT INTO " + table_.qualified +
                                     " (id, payload) SELECT g, pg_catalog.repeat(pg_catalog.md5(g::text), 10) "
                                     "FROM pg_catalog.generate_series(" + lo + "::bigint, " + hi + "::bigint) g",
                                 "inserting " + std::to_string(n) + " rows");
    Commit("INSERT of rows " + lo + ".." + hi);
    if (Clock::now() >= deadline) return;

    Begin();
    report_.rows_updated += Run("UPDATE " + table_.qualified + " SET payload = pg_catalog.md5(payload) || ' updated'" +
                                    in_batch + " AND id % 4 = 0",
                                "updating a quarter of rows " + lo + ".." + hi);
    Commit("UPDATE of rows " + lo + ".." + hi + " with id % 4 = 0");
    if (Clock::now() >= deadline) return;

    if (previous_previous_start >= 0) {
      const std::string old_lo = std::to_string(previous_previous_start);
      const std::string old_hi = std::to_string(previous_previous_start + n - 1);
      Begin();
      report_.rows_deleted += Run("DELETE FROM " + table_.qualified + " WHERE id BETWEEN " + old_lo + " AND " + old_hi,
                                  "deleting rows " + old_lo + ".." + old_hi);
      Commit("DELETE of rows " + old_lo + ".." + old_hi);
      if (Clock::now() >= deadline) return;
    }

    // A subtransaction abort inside a committed transaction.
    Begin();
    report_.rows_updated += Run("UPDATE " + table_.qualified + " SET payload = payload || ' kept'" + in_batch +
                                    " AND id % 4 = 1",
                                "updating rows before the savepoint");
    Run("SAVEPOINT trellara_soak", "SAVEPOINT");
    report_.rows_rolled_back +=
        Run("INSERT INTO " + table_.qualified + " (id, payload) SELECT g, 'rolled back to savepoint ' || g " +
                "FROM pg_catalog.generate_series(" + next_lo + "::bigint, " + std::to_string(batch_start + n + n / 2 - 1) +
                "::bigint) g",
            "inserting rows inside the savepoint");
    report_.rows_rolled_back += Run("DELETE FROM " + table_.qualified + in_batch + " AND id % 4 = 2",
                                    "deleting rows inside the savepoint");
    Run("ROLLBACK TO SAVEPOINT trellara_soak", "ROLLBACK TO SAVEPOINT");
    report_.rows_updated += Run("UPDATE " + table_.qualified + " SET payload = payload || ' after savepoint'" +
                                    in_batch + " AND id % 97 = 3",
                                "updating rows after the savepoint rollback");
    Commit("transaction with a rolled-back savepoint on rows " + lo + ".." + hi);
    report_.savepoint_rollbacks++;
    if (Clock::now() >= deadline) return;

    // A top-level abort.
    Begin();
    report_.rows_rolled_back +=
        Run("INSERT INTO " + table_.qualified + " (id, payload) SELECT g, 'rolled back ' || g " +
                "FROM pg_catalog.generate_series(" + next_lo + "::bigint, " + std::to_string(batch_start + 2 * n - 1) +
                "::bigint) g",
            "inserting rows in the rolled-back transaction");
    report_.rows_rolled_back += Run("UPDATE " + table_.qualified + " SET payload = 'rolled back'" + in_batch,
                                    "updating rows in the rolled-back transaction");
    Run("ROLLBACK", "ROLLBACK");
    report_.rolled_back++;
  }

 private:
  void Begin() { Run("BEGIN", "BEGIN"); }

  [[noreturn]] void Fail(const std::string& what, const PgResult& r) {
    throw CommandFailed("soak workload on " + table_.name + ": " + what + " failed on the source " +
                            source_.Describe() + ": " + r.Describe() + "; the run stopped (nothing was judged)",
                        kExitSetup);
  }

  uint64_t Run(const std::string& sql, const std::string& what) {
    auto r = source_.Exec(sql);
    if (!r.ok()) Fail(what, r);
    return r.affected();
  }

  void Commit(const std::string& what) {
    auto before = source_.Exec("SELECT pg_catalog.pg_current_wal_insert_lsn()::text, pg_catalog.pg_current_xact_id()::text");
    if (!before.ok()) Fail("reading the WAL position before COMMIT", before);
    CommittedTransaction t;
    t.lower_lsn = LsnOrFail(before.Value(0, 0), "pg_current_wal_insert_lsn() before COMMIT");
    t.xid = before.Value(0, 1).value_or("0");
    t.xid32 = std::to_string(std::stoull(t.xid) & 0xFFFFFFFFull);
    Run("COMMIT", "COMMIT of the " + what);
    t.committed_at = Clock::now();
    auto after = source_.Exec("SELECT pg_catalog.pg_current_wal_insert_lsn()::text");
    if (!after.ok()) Fail("reading the WAL position after COMMIT", after);
    t.upper_lsn = LsnOrFail(after.Value(0, 0), "pg_current_wal_insert_lsn() after COMMIT");
    t.what = what;
    report_.committed++;
    lag_.Add(std::move(t));
  }

  PgConnection& source_;
  const SoakTable& table_;
  uint64_t rows_;
  LagTracker& lag_;
  soak::Report& report_;
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

void RegisterSoak(CLI::App& app) {
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
