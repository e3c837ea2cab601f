// apply_command.cpp — `trellara apply --config F [--until-caught-up]`: applies the flow's durable
// log to the target, one target transaction per source transaction, exactly once (DESIGN §2, §6).
//
// Per ready transaction (core's TransactionBarrier decides when it is whole and verified): read
// the target's evidence (dedup row, quarantine row, origin progress), let core's DecideApply
// choose, and on Apply run BEGIN, the dedup row together with
// pg_replication_origin_xact_setup(commit_lsn, commit_time), every change as planned by core's
// PlanChange (prepared per statement key, text parameters, the target itself checking that each
// change touched exactly one row), COMMIT. Any failure rolls back, records the quarantine
// (BuildQuarantine) in its own transaction and halts at that transaction.
//
// Throughput (docs/performance.md): consecutive whole transactions are applied as a batch — one
// round trip reads the evidence of the whole batch, then every transaction of it, each still its
// own BEGIN .. COMMIT, is queued in one libpq pipeline segment and the results are read back in
// order. An error in transaction k makes the server skip everything queued after it up to the
// Sync (later transactions included), so nothing after a failed transaction is ever committed;
// the applier then retries transaction k alone, on the one-statement-at-a-time path, which
// quarantines it with the exact cause if it fails again. Chunked transactions, transactions being
// replayed after a quarantine, and retries always take that path.
//
// Durability of the consumer offset: the offset only passes transactions that the target reports
// as flushed (pg_replication_origin_progress(origin, true), core ApplyOffsetTracker), so the
// session may commit with synchronous_commit = off (the default, as native logical replication's
// apply worker does) and a target crash still loses nothing the log no longer holds.
//
// It never applies a transaction the barrier did not yield, never applies anything after a
// quarantined transaction, never advances the consumer offset past a transaction that is not
// durable on the target (nor past the first frame of an open chunked transaction), and never
// decides on its own what is a duplicate or a conflict: core does.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <deque>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <unistd.h>

#include "commands.h"
#include "config.h"
#include "pg_connection.h"
#include "trellara/apply_decision.h"
#include "trellara/apply_plan.h"
#include "trellara/apply_schema.h"
#include "trellara/barrier.h"
#include "trellara/fault.h"
#include "trellara/log/consumer_lock.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/retention.h"
#include "trellara/log/reader.h"
#include "trellara/log/scan.h"
#include "trellara/log/uring_device.h"
#include "trellara_target_sql.h"

namespace trellara::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The applier's registered consumer in the log directory (consumers/applier).
constexpr const char* kConsumerName = "applier";
// The consumer offset is written (fdatasync + rename) at most this often while applying, and
// always when the applier reaches the end of the log, halts or stops. Re-reading transactions
// committed after the last write is safe: their dedup rows make them SkipDuplicate.
constexpr uint64_t kOffsetWriteEveryTransactions = 512;
constexpr auto kOffsetWriteInterval = std::chrono::seconds(1);
constexpr auto kTailPollInterval = std::chrono::milliseconds(200);
constexpr auto kReplayReadyPollInterval = std::chrono::seconds(1);
constexpr auto kProgressInterval = std::chrono::seconds(5);
// A batch ends at this many transactions or queued statements, whichever comes first, or when the
// log has nothing more to read. The bounds keep what a batch holds in memory small: the decoded
// transactions and their plans, and the server's answers (about 100 bytes per statement) that
// libpq buffers while the applier is still queueing (libpq reads input whenever a send would
// block, so a full socket cannot deadlock the pipeline).
constexpr size_t kBatchMaxTransactions = 256;
constexpr size_t kBatchMaxStatements = 1024;

volatile std::sig_atomic_t g_stop_requested = 0;
extern "C" void OnStopSignal(int) { g_stop_requested = 1; }

void InstallStopHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool StopRequested() { return g_stop_requested != 0; }

std::string ChecksumParam(const Sha256& checksum) { return "\\x" + HexEncode(checksum); }

// "2026-11-29 20:31:00.123456+00" from Unix microseconds (the plugin records commit times so).
std::string TimestampParam(int64_t unix_us) {
  int64_t seconds = unix_us / 1000000;
  int64_t micros = unix_us % 1000000;
  if (micros < 0) {
    micros += 1000000;
    seconds -= 1;
  }
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02d %02d:%02d:%02d.%06lld+00", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(micros));
  return buffer;
}

std::optional<Sha256> ParseChecksumHex(const std::string& hex) {
  if (hex.size() != 64) return std::nullopt;
  Sha256 out{};
  for (size_t i = 0; i < out.size(); i++) {
    unsigned value = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &value) != 1) return std::nullopt;
    out[i] = static_cast<uint8_t>(value);
  }
  return out;
}

std::optional<QuarantineState> ParseQuarantineState(const std::string& text) {
  if (text == "quarantined") return QuarantineState::Quarantined;
  if (text == "replay_ready") return QuarantineState::ReplayReady;
  if (text == "resolved") return QuarantineState::Resolved;
  return std::nullopt;
}

struct Evidence {
  TargetEvidence target;
  uint32_t previous_attempts = 0;
  std::string quarantine_message;  // the stored operator message, when quarantined
};

enum class Outcome { Applied, SkippedDuplicate, Stopped };

// A whole (unchunked) transaction read from the log and waiting for its batch.
struct PendingTx {
  ReadyTransaction ready;
  uint64_t offset_after = 0;  // the consumer offset that is safe once it is applied
  std::vector<ChangePlan> plans;  // filled while the batch is built
  bool skip = false;              // the batch found it already applied (a duplicate)
};

// What each message queued in a batch answers, in order.
enum class What { Begin, Record, Prepare, Statement, Commit };
struct Expect {
  size_t index;  // the transaction, in pending_
  What what;
  std::string statement_key;  // Prepare: forgotten again if the Parse failed or was skipped
};

struct Counters {
  uint64_t applied = 0;
  uint64_t skipped_duplicates = 0;
  uint64_t not_applied_changes = 0;  // messages and DDL: recorded in the log, not applied
  uint64_t statements = 0;
};

// Thrown out of the apply loop to end the command; main() prints it.
[[noreturn]] void Fail(const std::string& message, int code = 1) { throw CommandFailed(message, code); }

class Applier {
 public:
  Applier(FlowConfig config, bool until_caught_up)
      : config_(std::move(config)), until_caught_up_(until_caught_up), origin_name_("trellara_" + config_.flow_name) {}

  void Run() {
    auto device = log::OpenUringDevice();
    if (!device) Fail("cannot open the log device for " + config_.log_directory + ": " + device.error().message);
    device_ = std::move(device.value());
    // One applier per flow: first the lock in the log directory (it also stops two appliers of
    // one log that point at different targets), then the target's advisory lock.
    auto lock = log::ConsumerLock::Acquire(config_.log_directory, kConsumerName);
    if (!lock)
      Fail("another applier of flow " + config_.flow_name + " is running on this log: " + lock.error().message +
           "; stop it first, or leave it running: only one applier per flow may apply");
    log_lock_ = std::move(lock.value());
    ConnectTarget();
    OpenLog();
    WriteStatus("running", "");
    Loop();
  }

 private:
  // ---- target session ------------------------------------------------------------------

  PgResult Must(PgResult result, const std::string& what) {
    if (!result.ok())
      Fail(what + " failed on the target " + conn_->Describe() + ": " + result.Describe() +
           (conn_->connection_lost() ? "; the connection was lost: check the target and rerun trellara apply"
                                     : ""));
    return result;
  }

  void ConnectTarget() {
    auto conn = PgConnection::Connect(config_.target_conninfo, "trellara/" + config_.flow_name);
    if (!conn) Fail(conn.error().message + " (flow " + config_.flow_name + ", configuration " + config_.path + ")");
    conn_ = std::move(conn.value());
    // Text values round-trip exactly only with the settings the plugin pinned while decoding.
    Must(conn_->Exec(kPinnedSessionSettingsSql),
         "pinning the apply session settings");
    Must(conn_->Exec("SET session_replication_role = " + config_.session_replication_role),
         "SET session_replication_role = " + config_.session_replication_role +
             " (apply.session_replication_role; 'replica' needs a superuser or a role granted SET on it)");
    Must(conn_->Exec("SET synchronous_commit = " + config_.synchronous_commit),
         "SET synchronous_commit = " + config_.synchronous_commit + " (apply.synchronous_commit)");

    // One applier per flow: a session-level advisory lock, released when this session ends.
    auto lock = Must(conn_->ExecParams("SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                                       {"trellara apply " + config_.flow_name}),
                     "taking the applier lock of flow " + config_.flow_name);
    if (lock.Value(0, 0) != std::optional<std::string>("t")) {
      auto holder = conn_->ExecParams(
          "SELECT string_agg(pid::text, ', ') FROM pg_stat_activity WHERE application_name = $1 AND pid <> "
          "pg_backend_pid()",
          {"trellara/" + config_.flow_name});
      const auto pids = holder.ok() ? holder.Value(0, 0) : std::nullopt;
      Fail("another applier of flow " + config_.flow_name + " is running against the target " + conn_->Describe() +
           " (it holds the flow's advisory lock" + (pids ? ", backend pid " + *pids : std::string()) +
           "); stop it first, or leave it running: only one applier per flow may apply");
    }

    Must(conn_->Exec(kTargetSchemaSql), "creating the trellara state schema (sql/trellara_target.sql)");

    auto origin = Must(conn_->ExecParams("SELECT pg_replication_origin_oid($1)", {origin_name_}),
                       "looking up replication origin " + origin_name_);
    if (!origin.Value(0, 0))
      Must(conn_->ExecParams("SELECT pg_replication_origin_create($1)", {origin_name_}),
           "creating replication origin " + origin_name_);
    Must(conn_->ExecParams("SELECT pg_replication_origin_session_setup($1)", {origin_name_}),
         "setting up replication origin " + origin_name_ + " for this session");

    // The evidence of a set of commit LSNs in one round trip: a first row with the origin's
    // progress (commit_lsn NULL), then one row per LSN that has a dedup or a quarantine row.
    Must(conn_->Prepare("trellara_evidence",
                        "SELECT NULL::text, NULL::text, NULL::bigint, NULL::text, NULL::text, NULL::integer, "
                        "NULL::bigint, NULL::text, pg_replication_origin_progress($3, false)::text "
                        "UNION ALL "
                        "SELECT l.lsn::text, a.origin_sysid::text, a.xid, encode(a.checksum, 'hex'), q.state, "
                        "q.attempts, q.xid, q.message, NULL "
                        "FROM unnest($2::pg_lsn[]) AS l(lsn) "
                        "LEFT JOIN trellara.applied_transactions a ON a.flow = $1 AND a.commit_lsn = l.lsn "
                        "LEFT JOIN trellara.quarantine q ON q.flow = $1 AND q.commit_lsn = l.lsn "
                        "WHERE a.flow IS NOT NULL OR q.flow IS NOT NULL",
                        3),
         "preparing the dedup lookup");
    // The dedup row and the origin progress of the transaction, in one statement.
    Must(conn_->Prepare("trellara_commit_record",
                        "INSERT INTO trellara.applied_transactions (flow, commit_lsn, xid, origin_sysid, checksum) "
                        "SELECT $1::text, $2::pg_lsn, $3::bigint, $4::numeric, $5::bytea "
                        "FROM pg_replication_origin_xact_setup($2::pg_lsn, $6::timestamptz)",
                        6),
         "preparing the dedup insert");
    Must(conn_->Prepare("trellara_flushed_progress", "SELECT pg_replication_origin_progress($1, true)", 1),
         "preparing the flushed-progress lookup");
    Must(conn_->Prepare("trellara_target_columns",
                        "SELECT c.oid IS NOT NULL, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
                        "a.atthasdef, a.attidentity <> '', a.attgenerated <> '' "
                        "FROM (SELECT to_regclass($1) AS oid) AS c "
                        "LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
                        "AND NOT a.attisdropped",
                        1),
         "preparing the target schema lookup");
    // Parsed once, not once per pipelined transaction.
    Must(conn_->Prepare("trellara_begin", "BEGIN", 0), "preparing BEGIN");
    Must(conn_->Prepare("trellara_commit", "COMMIT", 0), "preparing COMMIT");
  }

  SqlParams CommitRecordParams(const ReadyTransaction& ready) const {
    const TxIdentity& tx = ready.tx;
    const std::string lsn = FormatLsn(tx.commit_lsn);
    return {tx.flow, lsn, std::to_string(tx.xid), std::to_string(tx.origin_sysid), ChecksumParam(ready.checksum),
            TimestampParam(ready.commit_time_us)};
  }

  void WriteStatus(const std::string& state, const std::string& last_error) {
    // Best effort only where the target itself is the problem; a status write never hides the
    // error that ended the run.
    auto r = conn_->ExecParams(
        "INSERT INTO trellara.apply_status AS s (flow, state, applied_commit_lsn, consumer_offset, "
        "applied_transactions, skipped_duplicates, last_error, updated_at) "
        "VALUES ($1, $2, pg_replication_origin_progress($3, false), $4, $5, $6, $7, now()) "
        "ON CONFLICT (flow) DO UPDATE SET state = EXCLUDED.state, applied_commit_lsn = EXCLUDED.applied_commit_lsn, "
        "consumer_offset = EXCLUDED.consumer_offset, applied_transactions = EXCLUDED.applied_transactions, "
        "skipped_duplicates = EXCLUDED.skipped_duplicates, last_error = EXCLUDED.last_error, updated_at = now()",
        {config_.flow_name, state, origin_name_, std::to_string(written_offset_), std::to_string(counters_.applied),
         std::to_string(counters_.skipped_duplicates),
         last_error.empty() ? std::nullopt : std::optional<std::string>(last_error)});
    if (!r.ok())
      std::cerr << "trellara: warning: could not record apply status '" << state << "' of flow " << config_.flow_name
                << " in trellara.apply_status: " << r.Describe() << "\n";
  }

  // The target's evidence for each of `txs`, in one round trip.
  std::vector<Evidence> ReadEvidence(const std::vector<const TxIdentity*>& txs) {
    std::string lsns = "{";
    for (const TxIdentity* tx : txs) lsns += (lsns.size() > 1 ? "," : "") + FormatLsn(tx->commit_lsn);
    lsns += "}";
    const TxIdentity& first = *txs.front();
    auto r = Must(conn_->ExecPrepared("trellara_evidence", {config_.flow_name, lsns, origin_name_}),
                  "reading the dedup evidence of " + DescribeTransaction(first) +
                      (txs.size() > 1 ? " and " + std::to_string(txs.size() - 1) + " later transactions" : ""));
    uint64_t checkpoint = 0;
    std::unordered_map<uint64_t, int> rows;  // commit LSN -> row
    for (int i = 0; i < r.rows(); i++) {
      if (auto lsn = r.Value(i, 0)) {
        if (auto parsed = ParseLsn(*lsn)) rows[*parsed] = i;
      } else if (auto progress = r.Value(i, 8)) {
        checkpoint = ParseLsn(*progress).value_or(0);
      }
    }
    std::vector<Evidence> out(txs.size());
    for (size_t k = 0; k < txs.size(); k++) {
      const TxIdentity& tx = *txs[k];
      Evidence& e = out[k];
      e.target.checkpoint_lsn = checkpoint;
      auto found = rows.find(tx.commit_lsn);
      if (found == rows.end()) continue;
      const int row_index = found->second;
      if (auto sysid = r.Value(row_index, 1)) {
        DedupRow row;
        row.origin_sysid = std::stoull(*sysid);
        row.xid = static_cast<uint32_t>(std::stoull(*r.Value(row_index, 2)));
        auto checksum = ParseChecksumHex(r.Value(row_index, 3).value_or(""));
        if (!checksum)
          Fail("the dedup row of " + DescribeTransaction(tx) + " in trellara.applied_transactions has a malformed "
               "checksum; the target's state was edited by hand: restore it or delete that row after checking the "
               "data");
        row.checksum = *checksum;
        e.target.dedup = row;
      }
      if (auto state = r.Value(row_index, 4);
          state && r.Value(row_index, 6) == std::optional<std::string>(std::to_string(tx.xid))) {
        e.target.quarantine = ParseQuarantineState(*state);
        e.previous_attempts = static_cast<uint32_t>(std::stoul(r.Value(row_index, 5).value_or("0")));
        e.quarantine_message = r.Value(row_index, 7).value_or("");
      }
    }
    return out;
  }

  Evidence ReadEvidence(const TxIdentity& tx) { return ReadEvidence(std::vector<const TxIdentity*>{&tx}).front(); }

  // pg_replication_origin_xact_setup sets the origin LSN for the session until it is set again: a
  // rolled-back transaction leaves it behind, and the next transaction of the session (the
  // quarantine record) would otherwise commit with it and move origin progress past a transaction
  // that was never applied. Called after every rollback.
  void ForgetOriginProgress() {
    Must(conn_->Exec("SELECT pg_replication_origin_xact_reset()"),
         "resetting the origin progress of the session after a rollback");
  }

  // The commit LSN up to which the target has flushed this flow's transactions: origin progress
  // read with flush = true (the server flushes WAL up to that progress first).
  uint64_t FlushedProgress() {
    auto r = Must(conn_->ExecPrepared("trellara_flushed_progress", {origin_name_}),
                  "reading the flushed progress of replication origin " + origin_name_);
    auto value = r.Value(0, 0);
    return value ? ParseLsn(*value).value_or(0) : 0;
  }

  // Whether the target can take changes of `relation` (core CheckTargetRelation), read from its
  // catalog the first time this session meets the relation's fingerprint. Only an accepted
  // definition is remembered, so a repaired target is re-read on the retry.
  std::optional<QuarantineCause> CheckRelation(const RelationInfo& relation) {
    const std::string key = HexEncode(relation.fingerprint);
    if (accepted_relations_.contains(key)) return std::nullopt;
    auto qualified = QualifiedName(relation);
    if (!qualified) return std::nullopt;  // the planner reports it as a plan error
    auto r = Must(conn_->ExecPrepared("trellara_target_columns", {*qualified}),
                  "reading the target's definition of " + DisplayName(relation));
    TargetRelation target;
    target.exists = r.Value(0, 0) == std::optional<std::string>("t");
    for (int i = 0; target.exists && i < r.rows(); i++) {
      if (!r.Value(i, 1)) continue;  // a table without columns
      TargetColumn column;
      column.name = *r.Value(i, 1);
      column.type_name = r.Value(i, 2).value_or("");
      column.not_null = r.Value(i, 3) == std::optional<std::string>("t");
      column.has_default = r.Value(i, 4) == std::optional<std::string>("t");
      column.identity = r.Value(i, 5) == std::optional<std::string>("t");
      column.generated = r.Value(i, 6) == std::optional<std::string>("t");
      target.columns.push_back(std::move(column));
    }
    auto cause = CheckTargetRelation(relation, target);
    if (!cause) accepted_relations_.insert(key);
    return cause;
  }

  // Every relation a change writes to, checked (CheckRelation).
  std::optional<QuarantineCause> CheckRelationsOf(const Change& change, const std::vector<RelationInfo>& relations) {
    std::vector<uint32_t> oids;
    if (change.op == Op::Truncate)
      oids = change.truncate.relation_oids;
    else if (change.op == Op::Insert || change.op == Op::Update || change.op == Op::Delete)
      oids = {change.relation_oid};
    for (uint32_t oid : oids) {
      for (const auto& relation : relations) {
        if (relation.oid != oid) continue;
        if (auto cause = CheckRelation(relation)) {
          cause->operation = OpName(change.op);
          return cause;
        }
      }
    }
    return std::nullopt;
  }

  // The prepared statement of `plan`, queued or run: its name, and whether it must be prepared.
  std::pair<std::string, bool> StatementFor(const ChangePlan& plan) {
    auto cached = statements_.find(plan.statement_key);
    if (cached != statements_.end()) return {cached->second, false};
    const std::string name = "trellara_s" + std::to_string(++statement_serial_);
    statements_.emplace(plan.statement_key, name);
    return {name, true};
  }

  // A statement's failure as a quarantine cause, with what the plan knows about the change.
  static QuarantineCause CauseOf(const PgResult& result, const ChangePlan& plan) {
    QuarantineCause cause = CauseFromStatementError(result.sqlstate(), result.message(), result.detail());
    cause.operation = PlanKindName(plan.kind);
    cause.relation = plan.relation_display;
    cause.match = plan.match_description;
    cause.match_is_key = plan.match != MatchMode::FullRow;
    if (cause.reason == QuarantineReason::DuplicateKey && cause.match.empty()) cause.match = result.detail();
    return cause;
  }

  // Core's DecideApply. Negative control (tests only,
  // TRELLARA_FAULTS=defect.apply_ignore_dedup:1:defect): a duplicate is applied again, which the
  // re-read tests must catch.
  static ApplyDecision Decide(const ReadyTransaction& ready, const TargetEvidence& target) {
    ApplyDecision decision = DecideApply(ready.tx, ready.checksum, target);
    if (decision.action == ApplyAction::SkipDuplicate &&
        fault::Hit("defect.apply_ignore_dedup") == fault::Action::Defect)
      decision = ApplyDecision{};
    return decision;
  }

  // ---- one transaction -----------------------------------------------------------------

  // Runs one planned change inside the open transaction. Returns the cause when the target
  // refused it; a lost connection ends the command (nothing of the transaction committed).
  std::optional<QuarantineCause> ExecuteChange(const Change& change, const std::vector<RelationInfo>& relations,
                                               const TxIdentity& tx) {
    auto plan = PlanChange(change, relations);
    if (!plan) {
      QuarantineCause cause;
      cause.reason = QuarantineReason::PlanError;
      cause.operation = OpName(change.op);
      cause.detail = plan.error().message;
      return cause;
    }
    if (plan->kind == PlanKind::NotApplied) {
      counters_.not_applied_changes++;
      return std::nullopt;
    }
    if (auto cause = CheckRelationsOf(change, relations)) return cause;
    // The row count is checked by the target itself (RowCheckedSql): a wrong match is an error.
    const auto [name, must_prepare] = StatementFor(*plan);
    PgResult result;
    if (must_prepare) {
      result = conn_->Prepare(name, RowCheckedSql(*plan), static_cast<int>(plan->params.size()));
      if (!result.ok()) statements_.erase(plan->statement_key);
    }
    if (!must_prepare || result.ok()) result = conn_->ExecPrepared(name, plan->params);
    counters_.statements++;
    if (!result.ok()) {
      if (conn_->connection_lost())
        Fail("lost the connection to the target " + conn_->Describe() + " while applying " + DescribeTransaction(tx) +
             " (" + result.Describe() + "); nothing of it was committed: rerun trellara apply, it resumes exactly once");
      return CauseOf(result, *plan);
    }
    return std::nullopt;
  }

  Result<std::vector<uint8_t>> ReadChunkFrame(uint64_t offset) {
    if (!chunk_reader_) {
      auto reader = log::LogReader::Open(*device_, config_.log_directory);
      if (!reader) return reader.error();
      chunk_reader_ = std::move(reader.value());
    }
    TRELLARA_TRY(chunk_reader_->Seek(offset));
    auto record = chunk_reader_->Next();
    if (!record) return record.error();
    if (!*record || (*record)->offset != offset)
      return MakeError("log offset " + std::to_string(offset) + " of " + config_.log_directory +
                       " is no longer readable");
    return std::move((*record)->payload);
  }

  // BEGIN .. COMMIT of one verified transaction. Returns nullopt once COMMIT returned, or the
  // cause after ROLLBACK.
  std::optional<QuarantineCause> ApplyInTransaction(const ReadyTransaction& ready, bool resolves_quarantine) {
    const TxIdentity& tx = ready.tx;
    Must(conn_->Exec("BEGIN"), "BEGIN for " + DescribeTransaction(tx));
    std::optional<QuarantineCause> failure;
    auto step = [&](PgResult r, const char* what) {
      if (r.ok() || failure) return;
      if (conn_->connection_lost())
        Fail(std::string("lost the connection to the target during ") + what + " of " + DescribeTransaction(tx) +
             " (" + r.Describe() + "); rerun trellara apply: the dedup row decides whether it committed");
      QuarantineCause cause;
      cause.reason = QuarantineReason::SqlError;
      cause.operation = what;
      cause.sqlstate = r.sqlstate();
      cause.detail = r.message() + (r.detail().empty() ? std::string() : ": " + r.detail());
      failure = cause;
    };
    step(conn_->ExecPrepared("trellara_commit_record", CommitRecordParams(ready)),
         "INSERT of the dedup row with the origin progress");
    if (!failure && ready.envelope) {
      for (const auto& change : ready.envelope->changes) {
        failure = ExecuteChange(change, ready.envelope->relations, tx);
        if (failure) break;
      }
    } else if (!failure) {
      Status walked = ForEachVerifiedChunk(
          ready, [&](uint64_t offset) { return ReadChunkFrame(offset); },
          [&](const Chunk& chunk) -> Status {
            for (const auto& change : chunk.changes) {
              failure = ExecuteChange(change, chunk.relations, tx);
              if (failure) return MakeError("stopped at a failed change");
            }
            return Status::Ok();
          });
      if (!walked.ok() && !failure) {
        QuarantineCause cause;
        cause.reason = QuarantineReason::BarrierFailure;
        cause.detail = walked.error().message;
        failure = cause;
      }
    }
    if (!failure) {
      if (resolves_quarantine)
        step(conn_->ExecParams("UPDATE trellara.quarantine SET state = 'resolved', resolved_at = now() "
                               "WHERE flow = $1 AND commit_lsn = $2::pg_lsn",
                               {tx.flow, FormatLsn(tx.commit_lsn)}),
             "marking the quarantine row resolved");
      if (!failure) {
        auto commit = conn_->Exec("COMMIT");
        step(commit, "COMMIT");
        // COMMIT of a failed transaction reports ROLLBACK without an error.
        if (!failure) return std::nullopt;
        return failure;
      }
    }
    auto rollback = conn_->Exec("ROLLBACK");
    if (!rollback.ok())
      Fail("ROLLBACK of " + DescribeTransaction(tx) + " failed on the target " + conn_->Describe() + ": " +
           rollback.Describe() + "; nothing of it was committed: rerun trellara apply");
    ForgetOriginProgress();
    return failure;
  }

  void Quarantine(const ReadyTransaction& ready, const QuarantineCause& cause, uint32_t previous_attempts) {
    const QuarantineRecord q = BuildQuarantine(ready.tx, ready.checksum, cause, previous_attempts);
    Must(conn_->ExecParams(
             "INSERT INTO trellara.quarantine AS q (flow, commit_lsn, xid, origin_sysid, reason, sqlstate, detail, "
             "checksum, attempts, state, message, next_step) "
             "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
             "ON CONFLICT (flow, commit_lsn) DO UPDATE SET xid = EXCLUDED.xid, origin_sysid = EXCLUDED.origin_sysid, "
             "reason = EXCLUDED.reason, sqlstate = EXCLUDED.sqlstate, detail = EXCLUDED.detail, "
             "checksum = EXCLUDED.checksum, attempts = EXCLUDED.attempts, state = EXCLUDED.state, "
             "message = EXCLUDED.message, next_step = EXCLUDED.next_step, last_failed_at = now(), "
             "replay_ready_at = NULL",
             {q.flow, FormatLsn(q.commit_lsn), std::to_string(q.xid), std::to_string(q.origin_sysid),
              QuarantineReasonName(q.reason), q.sqlstate.empty() ? std::nullopt : std::optional<std::string>(q.sqlstate),
              q.detail, ChecksumParam(q.checksum), std::to_string(q.attempts), QuarantineStateName(q.state), q.message,
              q.next_step}),
         "recording the quarantine of " + DescribeTransaction(ready.tx) + " (" + q.message + ")");
    // With --until-caught-up the command ends with this message (main prints it once).
    if (!until_caught_up_) std::cerr << "trellara: " << q.message << "\n";
  }

  // Blocked at a quarantined transaction: with --until-caught-up the command ends; otherwise it
  // waits for the operator's replay-ready (or a stop signal).
  bool WaitWhileBlocked(const std::string& message) {
    WriteOffset(true);
    WriteStatus("blocked", message);
    if (until_caught_up_) Fail(message, kExitFlowBlocked);
    const auto until = Clock::now() + kReplayReadyPollInterval;
    while (Clock::now() < until) {
      if (StopRequested()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
  }

  Outcome Process(const ReadyTransaction& ready) {
    for (;;) {
      Evidence evidence = ReadEvidence(ready.tx);
      const ApplyDecision decision = Decide(ready, evidence.target);
      switch (decision.action) {
        case ApplyAction::SkipDuplicate:
          counters_.skipped_duplicates++;
          return Outcome::SkippedDuplicate;
        case ApplyAction::WaitReplayReady: {
          const std::string message =
              evidence.quarantine_message.empty()
                  ? DescribeTransaction(ready.tx) + " is quarantined; " + ReplayReadyCall(ready.tx.xid, ready.tx.commit_lsn)
                  : evidence.quarantine_message;
          if (!WaitWhileBlocked("halted at a transaction quarantined earlier: " + message))
            return Outcome::Stopped;
          continue;
        }
        case ApplyAction::QuarantineConflict:
          Quarantine(ready, decision.cause, evidence.previous_attempts);
          if (!WaitWhileBlocked(BuildQuarantine(ready.tx, ready.checksum, decision.cause, evidence.previous_attempts).message))
            return Outcome::Stopped;
          continue;
        case ApplyAction::Apply: {
          const bool resolves = evidence.target.quarantine == QuarantineState::ReplayReady;
          auto failure = ApplyInTransaction(ready, resolves);
          if (!failure) {
            counters_.applied++;
            return Outcome::Applied;
          }
          Quarantine(ready, *failure, evidence.previous_attempts);
          // Negative control (tests only, TRELLARA_FAULTS=defect.apply_skip_quarantined:1:defect):
          // move past the quarantined transaction instead of halting there, which the fail-closed
          // tests must catch.
          if (fault::Hit("defect.apply_skip_quarantined") == fault::Action::Defect) return Outcome::SkippedDuplicate;
          if (!WaitWhileBlocked(BuildQuarantine(ready.tx, ready.checksum, *failure, evidence.previous_attempts).message))
            return Outcome::Stopped;
          continue;
        }
      }
    }
  }

  // ---- batches of whole transactions ----------------------------------------------------

  // The batch pipeline. pending_ holds whole transactions in log order; its first inflight_
  // entries have been queued to the target (one pipeline segment, each its own BEGIN .. COMMIT,
  // ended by a Sync) and their results are read later by CollectBatch, so the target executes a
  // batch while the applier reads and decodes the next one from the log. At most one batch is in
  // flight: the next batch's evidence is read only after the previous batch's results.

  // Queues the leading transactions of pending_ that can go through the pipeline: duplicates are
  // marked to skip, plain Apply decisions are queued. Sets one_at_a_time_ when the transaction
  // after them needs the one-at-a-time path rather than the next batch.
  void SendBatch() {
    std::vector<const TxIdentity*> ids;
    for (size_t i = 0; i < pending_.size() && i < kBatchMaxTransactions; i++) ids.push_back(&pending_[i].ready.tx);
    const std::vector<Evidence> evidence = ReadEvidence(ids);

    size_t statements = 0;
    size_t count = 0;
    for (size_t i = 0; i < ids.size(); i++) {
      PendingTx& p = pending_[i];
      const Evidence& e = evidence[i];
      const ApplyDecision decision = Decide(p.ready, e.target);
      if (decision.action == ApplyAction::SkipDuplicate) {
        p.skip = true;
        count++;
        continue;
      }
      // Anything but a plain first apply (a conflict, a quarantined or replay-ready boundary)
      // takes the one-at-a-time path, which re-reads the evidence and acts on it.
      if (decision.action != ApplyAction::Apply || e.target.quarantine) {
        one_at_a_time_ = true;
        break;
      }
      p.skip = false;
      p.plans.clear();
      bool planned = true;
      for (const auto& change : p.ready.envelope->changes) {
        auto plan = PlanChange(change, p.ready.envelope->relations);
        if (!plan) {
          planned = false;  // the one-at-a-time path quarantines it as plan_error
          break;
        }
        if (plan->kind == PlanKind::NotApplied) continue;
        if (CheckRelationsOf(change, p.ready.envelope->relations)) {
          planned = false;  // the one-at-a-time path quarantines it with the cause
          break;
        }
        p.plans.push_back(std::move(plan.value()));
      }
      if (!planned) {
        one_at_a_time_ = true;
        break;
      }
      // A transaction larger than a whole batch (trellara.chunk_changes raised above the bound,
      // up to 1M changes per envelope) goes alone through the one-at-a-time path, which reads
      // each answer as it comes instead of buffering them all.
      if (p.plans.size() + 3 > kBatchMaxStatements) {
        if (count == 0) one_at_a_time_ = true;
        break;
      }
      if (statements + p.plans.size() + 3 > kBatchMaxStatements) break;
      statements += p.plans.size() + 3;
      count++;
    }
    inflight_ = count;
    expects_.clear();
    if (std::none_of(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(count),
                     [](const PendingTx& p) { return !p.skip; }))
      return;  // only duplicates: nothing to send

    auto queued = [&](Status st) {
      if (!st.ok())
        Fail(st.error().message + " (flow " + config_.flow_name + ", target " + conn_->Describe() +
             "); rerun trellara apply: the dedup rows make it resume exactly once");
    };
    queued(conn_->EnterPipeline());
    for (size_t k = 0; k < count; k++) {
      const PendingTx& p = pending_[k];
      if (p.skip) continue;
      queued(conn_->SendPrepared("trellara_begin", {}));
      expects_.push_back({k, What::Begin, {}});
      queued(conn_->SendPrepared("trellara_commit_record", CommitRecordParams(p.ready)));
      expects_.push_back({k, What::Record, {}});
      for (const ChangePlan& plan : p.plans) {
        const auto [name, must_prepare] = StatementFor(plan);
        if (must_prepare) {
          queued(conn_->SendPrepare(name, RowCheckedSql(plan), static_cast<int>(plan.params.size())));
          expects_.push_back({k, What::Prepare, plan.statement_key});
        }
        queued(conn_->SendPrepared(name, plan.params));
        expects_.push_back({k, What::Statement, {}});
        counters_.statements++;
      }
      queued(conn_->SendPrepared("trellara_commit", {}));
      expects_.push_back({k, What::Commit, {}});
      // Let the target start on this transaction while the rest of the batch is queued.
      queued(conn_->Flush());
    }
    queued(conn_->Sync());
    batches_++;
    // Negative control (tests only, TRELLARA_FAULTS=defect.apply_ack_before_commit:1:defect): the
    // consumer offset is recorded past every transaction read so far — the batch just sent and
    // those still waiting for the next one — before the target has committed any of them:
    // acknowledging on read instead of after COMMIT. A kill then loses them for good, which the
    // kill -9 scenario must catch. (Only past the sent batch would hardly ever lose anything: the
    // target still commits what was sent before the applier died.)
    if (fault::Hit("defect.apply_ack_before_commit") == fault::Action::Defect) {
      for (const PendingTx& p : pending_) offsets_.Done(p.offset_after, 0);
      const uint64_t early = offsets_.Durable(UINT64_MAX);
      if (early != written_offset_ &&
          log::WriteConsumerOffset(*device_, config_.log_directory, kConsumerName, early).ok())
        written_offset_ = early;
    }
  }

  // Reads the in-flight batch's results and retires, in order, every transaction that committed
  // (or was a duplicate). After a failure the failed transaction and everything after it stay in
  // pending_ (the target skipped them) and one_at_a_time_ is set for the failed one.
  void CollectBatch() {
    if (inflight_ == 0) return;
    std::vector<bool> committed(inflight_, false);
    if (!expects_.empty()) {
      std::optional<std::string> failed;
      for (const Expect& expect : expects_) {
        auto next = conn_->NextResult();
        if (!next.result.ok() && !next.aborted && conn_->connection_lost())
          Fail("lost the connection to the target " + conn_->Describe() + " while applying a batch starting at " +
               DescribeTransaction(pending_.front().ready.tx) + " (" + next.result.Describe() +
               "); transactions of it may or may not have committed: rerun trellara apply, the dedup rows "
               "make it resume exactly once");
        if (next.sync || next.missing)
          Fail("the target's answers to the batch starting at " + DescribeTransaction(pending_.front().ready.tx) +
               " ended before every queued statement was answered (flow " + config_.flow_name + ", " +
               next.result.Describe() + "); rerun trellara apply, the dedup rows make it resume exactly once");
        const bool ok = next.result.ok() && !next.aborted;
        if (expect.what == What::Prepare && !ok) statements_.erase(expect.statement_key);  // not prepared
        if (!ok && !next.aborted && !failed)
          failed = DescribeTransaction(pending_[expect.index].ready.tx) + ": " + next.result.Describe();
        if (expect.what == What::Commit && ok) committed[expect.index] = true;
      }
      auto sync = conn_->NextResult();
      if (!sync.sync)
        Fail("the target did not answer the pipeline Sync of the batch (flow " + config_.flow_name + ", " +
             sync.result.Describe() + "); rerun trellara apply, the dedup rows make it resume exactly once");
      Status left = conn_->ExitPipeline();
      if (!left.ok()) Fail(left.error().message + "; rerun trellara apply");
      if (conn_->InTransaction()) Must(conn_->Exec("ROLLBACK"), "ROLLBACK after a failed transaction of the batch");
      if (failed) {
        ForgetOriginProgress();
        if (!until_caught_up_) std::cerr << "trellara: retrying alone after a failure in a batch: " << *failed << "\n";
      }
      expects_.clear();
    }
    const size_t count = inflight_;
    inflight_ = 0;
    for (size_t k = 0; k < count; k++) {
      PendingTx& p = pending_.front();
      if (!p.skip && !committed[k]) {
        one_at_a_time_ = true;  // the failed transaction: retried alone
        return;
      }
      if (p.skip) {
        counters_.skipped_duplicates++;
      } else {
        counters_.applied++;
        counters_.not_applied_changes += p.ready.envelope->changes.size() - p.plans.size();
      }
      Retire();
    }
  }

  // pending_.front() is done (committed, skipped or handled alone): the consumer offset may pass
  // it once the target has flushed it.
  void Retire() {
    const PendingTx& p = pending_.front();
    offsets_.Done(p.offset_after, p.ready.tx.commit_lsn);
    unwritten_transactions_++;
    pending_.pop_front();
    if (pending_.empty() && offset_after_pending_) {
      offsets_.Done(*offset_after_pending_, 0);
      offset_after_pending_.reset();
    }
  }

  // Moves the batch pipeline forward. With `drain`, returns only once pending_ is empty (every
  // transaction applied, skipped, or the applier stopped); otherwise it sends the next batch and
  // returns while the target executes it.
  Outcome Pump(bool drain) {
    for (;;) {
      CollectBatch();
      if (pending_.empty()) return Outcome::Applied;
      if (StopRequested()) return Outcome::Stopped;
      if (one_at_a_time_) {
        one_at_a_time_ = false;
        // A failure in the batch, a duplicate conflict, a quarantine, a plan error: it decides,
        // retries or halts there (Process counts it).
        if (Process(pending_.front().ready) == Outcome::Stopped) return Outcome::Stopped;
        Retire();
        continue;
      }
      SendBatch();
      if (!drain && !one_at_a_time_) return Outcome::Applied;
    }
  }

  // ---- the log -------------------------------------------------------------------------

  void OpenLog() {
    // Registers consumer "applier" (so the relay retains from here on); refuses one marked lost.
    if (Status registered = log::RegisterConsumer(*device_, config_.log_directory, kConsumerName); !registered.ok())
      Fail(registered.error().message);
    auto reader = log::LogReader::Open(*device_, config_.log_directory);
    if (!reader)
      Fail("cannot open the log of flow " + config_.flow_name + " at " + config_.log_directory + " (flow.log_directory): " +
           reader.error().message);
    reader_ = std::move(reader.value());
    auto offsets = log::ReadConsumerOffsets(*device_, config_.log_directory);
    if (!offsets) Fail("cannot read the consumer offsets of " + config_.log_directory + ": " + offsets.error().message);
    if (auto it = offsets->find(kConsumerName); it != offsets->end()) {
      Status seek = reader_->Seek(it->second);
      if (!seek.ok())
        Fail("cannot resume flow " + config_.flow_name + " at its consumer offset " + std::to_string(it->second) +
             " (" + config_.log_directory + "/consumers/" + kConsumerName + "): " + seek.error().message);
    }
    written_offset_ = reader_->next_offset();
    start_offset_ = written_offset_;
    offsets_ = ApplyOffsetTracker(start_offset_);
    if (until_caught_up_) {
      // --until-caught-up applies what is durable now, not what the source writes meanwhile: a
      // source faster than the applier must not keep the command from ending.
      auto end = log::PublishedEndOffset(*device_, config_.log_directory);
      if (!end)
        Fail("cannot read the end of the log of flow " + config_.flow_name + " at " + config_.log_directory + ": " +
             end.error().message);
      stop_offset_ = *end;
    }
    // Fault point (tests): `stall` here lets the source write past the end the run will stop at.
    fault::Hit("apply.after_log_opened");
  }

  // Records the consumer offset: as far as the target has durably committed (core
  // ApplyOffsetTracker over the origin's flushed progress). Not forced, at most every
  // kOffsetWriteInterval or kOffsetWriteEveryTransactions.
  void WriteOffset(bool force) {
    if (!force && unwritten_transactions_ < kOffsetWriteEveryTransactions &&
        Clock::now() - last_offset_write_ < kOffsetWriteInterval)
      return;
    CollectBatch();  // the session must be out of pipeline mode to ask for the flushed progress
    if (offsets_.waiting() == 0 && offsets_.safe() == written_offset_) return;
    // Negative control (tests only, TRELLARA_FAULTS=defect.apply_offset_ignores_flush:1:defect): the
    // offset follows what committed instead of what the target flushed, which the target-crash
    // scenario must catch.
    const bool defect = fault::Hit("defect.apply_offset_ignores_flush") == fault::Action::Defect;
    const uint64_t safe = offsets_.waiting() == 0 ? offsets_.safe()
                          : defect               ? offsets_.Durable(UINT64_MAX)
                                                 : offsets_.Durable(FlushedProgress());
    unwritten_transactions_ = 0;
    last_offset_write_ = Clock::now();
    if (safe == written_offset_) return;
    // Fault point (tests): the target has committed, the consumer offset is not written yet.
    // `crash` dies here; `error` fails the write as a full or read-only disk would.
    Status written = fault::Hit("apply.after_commit_before_offset") == fault::Action::Error
                         ? Status(MakeError("injected fault apply.after_commit_before_offset"))
                         : log::WriteConsumerOffset(*device_, config_.log_directory, kConsumerName, safe);
    if (!written.ok())
      Fail("cannot record consumer offset " + std::to_string(safe) + " of flow " + config_.flow_name + " in " +
           config_.log_directory + "/consumers/" + kConsumerName + ": " + written.error().message +
           "; everything up to it is committed on the target, rerun trellara apply once the directory is writable");
    written_offset_ = safe;
  }

  [[noreturn]] void BarrierFailed(const BarrierFailure& failure) {
    std::string message = "the log of flow " + config_.flow_name + " cannot be applied past offset " +
                          std::to_string(failure.offset) + ": " + failure.reason;
    if (failure.tx) {
      ReadyTransaction ready;
      ready.tx = *failure.tx;
      QuarantineCause cause;
      cause.reason = QuarantineReason::BarrierFailure;
      cause.detail = failure.reason;
      const Evidence evidence = ReadEvidence(ready.tx);
      Quarantine(ready, cause, evidence.previous_attempts);
      message = BuildQuarantine(ready.tx, ready.checksum, cause, evidence.previous_attempts).message;
    }
    WriteOffset(true);
    WriteStatus("blocked", message);
    Fail(message, kExitFlowBlocked);
  }

  void PrintProgress(const char* state) {
    if (progress_line_open_) {
      std::printf("\n");
      progress_line_open_ = false;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    std::printf("apply flow=%s state=%s applied=%llu skipped_duplicates=%llu not_applied_changes=%llu "
                "statements=%llu batches=%llu start_offset=%llu consumer_offset=%llu next_log_offset=%llu seconds=%.1f "
                "tx_per_s=%.0f\n",
                config_.flow_name.c_str(), state, static_cast<unsigned long long>(counters_.applied),
                static_cast<unsigned long long>(counters_.skipped_duplicates),
                static_cast<unsigned long long>(counters_.not_applied_changes),
                static_cast<unsigned long long>(counters_.statements), static_cast<unsigned long long>(batches_),
                static_cast<unsigned long long>(start_offset_),
                static_cast<unsigned long long>(written_offset_), static_cast<unsigned long long>(reader_->next_offset()),
                seconds, seconds > 0 ? static_cast<double>(counters_.applied) / seconds : 0.0);
    std::fflush(stdout);
  }

  // On a terminal: one line redrawn every second (applied, rate, lag); otherwise a structured line
  // every kProgressInterval while transactions flow.
  void ShowProgress() {
    const auto now = Clock::now();
    if (!tty_) {
      if (now - last_progress_ < kProgressInterval) return;
      last_progress_ = now;
      PrintProgress("running");
      return;
    }
    if (now - last_progress_ < std::chrono::seconds(1)) return;
    const double seconds = std::chrono::duration<double>(now - last_progress_).count();
    const uint64_t applied_since = counters_.applied - applied_at_last_progress_;
    last_progress_ = now;
    applied_at_last_progress_ = counters_.applied;
    auto end = log::PublishedEndOffset(*device_, config_.log_directory);
    const uint64_t log_end = end ? std::max(*end, reader_->next_offset()) : reader_->next_offset();
    // Not yet applied: records not read yet, plus transactions read and waiting for their batch.
    const uint64_t lag = log_end - reader_->next_offset() + pending_.size();
    std::printf("\r\033[Kapply %s: applied %llu (%.0f tx/s), skipped %llu duplicates | lag %llu log records | "
                "consumer offset %llu of %llu",
                config_.flow_name.c_str(), static_cast<unsigned long long>(counters_.applied),
                seconds > 0 ? static_cast<double>(applied_since) / seconds : 0.0,
                static_cast<unsigned long long>(counters_.skipped_duplicates),
                static_cast<unsigned long long>(lag),
                static_cast<unsigned long long>(written_offset_), static_cast<unsigned long long>(log_end));
    std::fflush(stdout);
    progress_line_open_ = true;
  }

  void Loop() {
    started_ = Clock::now();
    last_offset_write_ = started_;
    // On a terminal the first line is drawn at once, so even a short run shows where it stands.
    last_progress_ = tty_ ? started_ - std::chrono::seconds(1) : started_;
    bool at_tail_reported = false;
    for (;;) {
      if (StopRequested()) break;
      if (reader_->next_offset() >= stop_offset_) {  // --until-caught-up: the end present at start
        if (Pump(true) == Outcome::Stopped) break;
        WriteOffset(true);
        break;
      }
      auto next = reader_->Next();
      if (!next)
        Fail("reading the log of flow " + config_.flow_name + " at offset " + std::to_string(reader_->next_offset()) +
             " failed: " + next.error().message + "; nothing past the last committed transaction was applied");
      if (!*next) {
        if (Pump(true) == Outcome::Stopped) break;
        WriteOffset(true);
        if (until_caught_up_) break;
        if (!at_tail_reported) {
          WriteStatus("caught_up", "");
          at_tail_reported = true;
        }
        if (tty_) ShowProgress();
        std::this_thread::sleep_for(kTailPollInterval);
        continue;
      }
      at_tail_reported = false;
      const log::LogRecord& record = **next;
      LogFrame frame{record.offset, record.type, record.commit_lsn,
                     std::span<const uint8_t>(record.payload.data(), record.payload.size())};
      auto fed = barrier_.Feed(frame);
      if (!fed) {
        if (Pump(true) == Outcome::Stopped) break;  // everything before the failure is applied first
        BarrierFailed(barrier_.failure().value_or(BarrierFailure{std::nullopt, record.offset, fed.error().message}));
      }
      // Everything below `retain` is finished with once what it holds is applied.
      const uint64_t retain = barrier_.RetainFromOffset().value_or(record.offset + 1);
      if (*fed && (*fed)->envelope) {
        pending_.push_back(PendingTx{std::move(**fed), retain, {}, false});
        offset_after_pending_.reset();  // the new transaction's offset covers those records
        if (pending_.size() - inflight_ >= kBatchMaxTransactions && Pump(false) == Outcome::Stopped) break;
      } else if (*fed) {
        // A chunked transaction: applied alone, streaming its chunks back from the log.
        if (Pump(true) == Outcome::Stopped) break;
        if (Process(**fed) == Outcome::Stopped) break;
        offsets_.Done(retain, (*fed)->tx.commit_lsn);
        unwritten_transactions_++;
      } else if (pending_.empty()) {
        offsets_.Done(retain, 0);
      } else {
        offset_after_pending_ = retain;
      }
      WriteOffset(false);
      ShowProgress();
    }
    WriteOffset(true);
    const bool stopped = StopRequested();
    for (const auto& open : barrier_.OpenTransactions())
      std::cerr << "trellara: " << DescribeTransaction(open.tx) << " is still being written to the log (first offset "
                << open.first_offset << ", " << open.chunks_received << " chunks so far); it is applied by the next run\n";
    WriteStatus(stopped ? "stopped" : "caught_up", "");
    PrintProgress(stopped ? "stopped" : "caught_up");
  }

  FlowConfig config_;
  bool until_caught_up_;
  std::string origin_name_;
  std::unique_ptr<log::LogDevice> device_;
  std::unique_ptr<log::ConsumerLock> log_lock_;
  std::unique_ptr<PgConnection> conn_;
  std::unique_ptr<log::LogReader> reader_;
  std::unique_ptr<log::LogReader> chunk_reader_;
  TransactionBarrier barrier_;
  std::unordered_map<std::string, std::string> statements_;  // statement_key -> prepared name
  std::unordered_set<std::string> accepted_relations_;       // fingerprints the target can take
  uint64_t statement_serial_ = 0;  // names prepared statements; never reused
  Counters counters_;
  uint64_t batches_ = 0;  // pipeline segments sent (shown as batches=)
  std::deque<PendingTx> pending_;  // whole transactions read, not yet applied, in log order
  size_t inflight_ = 0;             // leading entries of pending_ queued to the target
  std::vector<Expect> expects_;     // the answers the in-flight batch owes
  bool one_at_a_time_ = false;      // pending_.front() needs the one-at-a-time path
  std::optional<uint64_t> offset_after_pending_;  // records read after the last pending transaction
  ApplyOffsetTracker offsets_{0};
  uint64_t start_offset_ = 0;
  uint64_t stop_offset_ = UINT64_MAX;  // --until-caught-up: the log's published end at start
  uint64_t written_offset_ = 0;  // what consumers/applier holds
  uint64_t unwritten_transactions_ = 0;
  Clock::time_point started_;
  Clock::time_point last_progress_;
  uint64_t applied_at_last_progress_ = 0;
  const bool tty_ = ::isatty(STDOUT_FILENO) == 1;
  bool progress_line_open_ = false;
  Clock::time_point last_offset_write_;
};

}  // namespace

void RegisterApply(CLI::App& app) {
  auto* cmd = app.add_subcommand("apply", "apply the flow's durable log to the target, exactly once (--config F)");
  auto config_path = std::make_shared<std::string>();
  auto until_caught_up = std::make_shared<bool>(false);
  cmd->add_option("--config", *config_path, "the flow's TOML configuration file")->required();
  cmd->add_flag("--until-caught-up", *until_caught_up,
                "apply every durable record present at start, then exit 0 (non-zero if blocked by a quarantine)");
  cmd->callback([config_path, until_caught_up] {
    auto config = LoadFlowConfig(*config_path);
    if (!config) throw CommandFailed(config.error().message, 2);
    InstallStopHandlers();
    Applier applier(std::move(config.value()), *until_caught_up);
    applier.Run();
  });
}

}  // namespace trellara::cli
