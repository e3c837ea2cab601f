// apply_session.cpp — the applier's target session (apply_session.h): setup, evidence, status,
// quarantine records, origin progress, relation checks, prepared-statement names. The snapshot
// registry and holds are read and written in apply_session_snapshot.cpp.
#include "engine/apply_session.h"
#include "pg/source_timelines.h"

#include <cstdio>
#include <ctime>
#include <iostream>

#include <nlohmann/json.hpp>

#include "trellara/apply/apply_plan.h"
#include "trellara/apply/apply_retry.h"
#include "trellara/base/fault.h"
#include "pg/target_schema.h"

namespace trellara::cli::apply {
namespace {

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

}  // namespace

ApplySession::ApplySession(const FlowConfig& config)
    : config_(config), origin_name_("trellara_" + config.flow_name) {}

void ThrowIfTransient(const PgResult& result, PgConnection& conn, const std::string& what) {
  if (result.ok()) return;
  const bool lost = conn.connection_lost();
  if (!IsTransientFailure(result.sqlstate(), lost)) return;
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_transient_quarantined:1:defect): a
  // transient failure is treated as the transaction's own, which the deadlock scenario must catch.
  if (fault::Hit("defect.apply_transient_quarantined") == fault::Action::Defect) return;
  FailTransient(what + " failed on the target " + conn.Describe() + ": " + result.Describe() +
                    (lost ? "; the connection was lost" : ""),
                result.sqlstate(), lost);
}

PgResult ApplySession::Must(PgResult result, const std::string& what) {
  ThrowIfTransient(result, *conn_, what);
  if (!result.ok())
    Fail(what + " failed on the target " + conn_->Describe() + ": " + result.Describe() +
         (conn_->connection_lost() ? "; the connection was lost: check the target and rerun trellara apply"
                                   : ""));
  return result;
}

void ApplySession::Disconnect() {
  conn_.reset();
  statements_.clear();
  accepted_relations_.clear();
  known_.clear();
  pending_known_.clear();
}

void ApplySession::Connect(bool reconnecting) {
  Disconnect();
  auto conn = PgConnection::Connect(config_.target_conninfo, "trellara/" + config_.flow_name);
  if (!conn) {
    const std::string message = conn.error().message + " (flow " + config_.flow_name + ", configuration " + config_.path + ")";
    // The first connection fails fast (a wrong conninfo is the likely cause and someone is
    // watching); once the applier has run, a target that cannot be reached is a target restarting.
    if (reconnecting) FailTransient(message, "", true);
    Fail(message);
  }
  conn_ = std::move(conn.value());
  // Text values round-trip exactly only with the settings the plugin pinned while decoding.
  Must(conn_->Exec(kPinnedSessionSettingsSql),
       "pinning the apply session settings");
  Must(conn_->Exec("SET session_replication_role = " + std::string(SettingValue(config_.session_replication_role))),
       "SET session_replication_role = " + std::string(SettingValue(config_.session_replication_role)) +
           " (apply.session_replication_role; 'replica' needs a superuser or a role granted SET on it)");
  Must(conn_->Exec("SET synchronous_commit = " + std::string(SettingValue(config_.synchronous_commit))),
       "SET synchronous_commit = " + std::string(SettingValue(config_.synchronous_commit)) + " (apply.synchronous_commit)");
  // A change addressed by key must reach its row through the key's index whatever the planner's
  // statistics say (as native apply does): on a small table the cheapest-looking path is a
  // sequential scan, and while a report on the target holds back pruning every such scan reads
  // every dead version. With sequential scans disabled the planner still uses one where no index
  // serves the predicate (REPLICA IDENTITY FULL). docs/decisions.md.
  Must(conn_->Exec("SET enable_seqscan = off"), "SET enable_seqscan = off (key lookups through the index)");
  // A plan that must scan (a full-row match, REPLICA IDENTITY FULL) then carries the disabled
  // scan's cost of 1e10, far past jit_above_cost: every such statement was JIT-compiled, about a
  // second each for a wide table (seen: 14 full-row UPDATEs of a 27-row, 92-column table took
  // 14 s). The applier's statements touch a row or a batch; compiling them never pays.
  Must(conn_->Exec("SET jit = off"), "SET jit = off (the applier's statements are too small to compile)");
  // The one join the applier sends is a batch of changes (unnest of the parameter arrays) joined
  // with its table by key: it must reach each row through the key's index, as one change does.
  // With the values cast from text in the join condition the generic plan estimates 100 batch rows
  // and picked a hash join over a whole-index scan (seen: under a long report on the target, the
  // scan counts of test_apply_robustness.py key_addressed_changes_use_the_index_under_a_long_read);
  // on a large table that is a full read per batch.
  Must(conn_->Exec("SET enable_hashjoin = off"), "SET enable_hashjoin = off (batches join their table by key)");
  Must(conn_->Exec("SET enable_mergejoin = off"), "SET enable_mergejoin = off (batches join their table by key)");

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
    // Reconnecting, the holder is almost surely this applier's own previous backend, not yet gone
    // (the log directory's lock keeps every other applier of this log out): wait for it.
    if (reconnecting)
      FailTransient("the flow's advisory lock on the target " + conn_->Describe() + " is still held" +
                        (pids ? " by backend pid " + *pids : std::string()) +
                        " (the previous session of this applier, not gone yet)",
                    "", false);
    Fail("another applier of flow " + config_.flow_name + " is running against the target " + conn_->Describe() +
         " (it holds the flow's advisory lock" + (pids ? ", backend pid " + *pids : std::string()) +
         "); stop it first, or leave it running: only one applier per flow may apply");
  }

  // The schema script runs in one transaction under its own advisory lock: `trellara snapshot`,
  // `reseed` and `verify` run it too, possibly at the same moment.
  Must(conn_->Exec(TargetSchemaScript()), "creating the trellara state schema (sql/trellara_target.sql)");

  auto origin = Must(conn_->ExecParams("SELECT pg_replication_origin_oid($1)", {origin_name_}),
                     "looking up replication origin " + origin_name_);
  if (!origin.Value(0, 0))
    Must(conn_->ExecParams("SELECT pg_replication_origin_create($1)", {origin_name_}),
         "creating replication origin " + origin_name_);
  auto setup = conn_->ExecParams("SELECT pg_replication_origin_session_setup($1)", {origin_name_});
  if (!setup.ok() && reconnecting && setup.sqlstate() == "55006")  // object_in_use: the old backend
    FailTransient("replication origin " + origin_name_ + " is still in use on the target " + conn_->Describe() + ": " +
                      setup.Describe() + " (the previous session of this applier, not gone yet)",
                  setup.sqlstate(), false);
  Must(std::move(setup), "setting up replication origin " + origin_name_ + " for this session");

  // The evidence of a set of commit LSNs in one round trip: a first row with the origin's
  // progress (commit_lsn NULL), then one row per LSN that has a dedup or a quarantine row. Each
  // LSN looks its rows up through the primary key (LATERAL ... LIMIT 1 is never flattened into a
  // join): the generic plan is made while trellara.applied_transactions is small and kept while
  // the applier fills it, and as a join it became a full index scan per batch (measured: 31 ms per
  // batch at 20 000 dedup rows, most of a pgbench catch-up's time; docs/performance.md).
  Must(conn_->Prepare("trellara_evidence",
                      "SELECT NULL::text, NULL::text, NULL::bigint, NULL::text, NULL::text, NULL::integer, "
                      "NULL::bigint, NULL::text, pg_replication_origin_progress($3, false)::text "
                      "UNION ALL "
                      "SELECT l.lsn::text, a.origin_sysid::text, a.xid, encode(a.checksum, 'hex'), q.state, "
                      "q.attempts, q.xid, q.message, NULL "
                      "FROM unnest($2::pg_lsn[]) AS l(lsn) "
                      "LEFT JOIN LATERAL (SELECT origin_sysid, xid, checksum FROM trellara.applied_transactions "
                      "WHERE flow = $1 AND commit_lsn = l.lsn LIMIT 1) a ON true "
                      "LEFT JOIN LATERAL (SELECT state, attempts, xid, message FROM trellara.quarantine "
                      "WHERE flow = $1 AND commit_lsn = l.lsn LIMIT 1) q ON true "
                      "WHERE a.xid IS NOT NULL OR q.state IS NOT NULL",
                      3),
       "preparing the dedup lookup");
  // The dedup row and the origin progress of the transaction, in one statement.
  Must(conn_->Prepare("trellara_commit_record",
                      "INSERT INTO trellara.applied_transactions (flow, commit_lsn, xid, origin_sysid, checksum) "
                      "SELECT $1::text, $2::pg_lsn, $3::bigint, $4::numeric, $5::bytea "
                      "FROM pg_replication_origin_xact_setup($2::pg_lsn, $6::timestamptz)",
                      6),
       "preparing the dedup insert");
  // A grouped batch's dedup rows, one per transaction, in one statement (apply_pipeline.cpp): the
  // arrays hold each transaction's commit LSN, xid, origin system identifier and checksum (hex); the
  // origin progress is set once, to the group's last commit (what the one COMMIT makes durable).
  Must(conn_->Prepare("trellara_commit_records",
                      "INSERT INTO trellara.applied_transactions (flow, commit_lsn, xid, origin_sysid, checksum) "
                      "SELECT $1::text, r.lsn, r.xid, r.sysid, decode(r.checksum, 'hex') "
                      "FROM pg_replication_origin_xact_setup($6::pg_lsn, $7::timestamptz) "
                      "CROSS JOIN unnest($2::pg_lsn[], $3::bigint[], $4::numeric[], $5::text[]) "
                      "AS r(lsn, xid, sysid, checksum)",
                      7),
       "preparing the dedup insert of a group");
  // The evidence of a grouped batch formed without reading it first, checked inside the batch's own
  // transaction (sql/trellara_target.sql trellara.require_unapplied, SQLSTATE TR012).
  Must(conn_->Prepare("trellara_require_unapplied", "SELECT trellara.require_unapplied($1, $2::pg_lsn[], $3)", 3),
       "preparing the in-batch evidence check");
  Must(conn_->Prepare("trellara_flushed_progress", "SELECT pg_replication_origin_progress($1, true)", 1),
       "preparing the flushed-progress lookup");
  // Columns in attribute order; every row also carries the primary key's columns (in key order)
  // and constraint name, NULL when there is none.
  Must(conn_->Prepare("trellara_target_columns",
                      "SELECT c.oid IS NOT NULL, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
                      "a.atthasdef, a.attidentity <> '', a.attgenerated <> '', "
                      "(SELECT array_to_json(array_agg(ka.attname ORDER BY k.ord))::text "
                      "   FROM pg_catalog.pg_constraint pk CROSS JOIN LATERAL unnest(pk.conkey) WITH ORDINALITY AS k(attnum, ord) "
                      "   JOIN pg_catalog.pg_attribute ka ON ka.attrelid = pk.conrelid AND ka.attnum = k.attnum "
                      "  WHERE pk.conrelid = c.oid AND pk.contype = 'p'), "
                      "(SELECT pk.conname FROM pg_catalog.pg_constraint pk WHERE pk.conrelid = c.oid AND pk.contype = 'p'), "
                      "(SELECT r.relkind = 'p' FROM pg_catalog.pg_class r WHERE r.oid = c.oid), "
                      "a.attidentity = 'a' "
                      "FROM (SELECT to_regclass($1) AS oid) AS c "
                      "LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
                      "AND NOT a.attisdropped ORDER BY a.attnum",
                      1),
       "preparing the target schema lookup");
  LoadKnownRelations();
  // The first statement of every applier transaction (docs/snapshot.md "Locks"): waits while a
  // registration holds the control lock, refuses (TR010) when the registry moved.
  Must(conn_->Prepare("trellara_control_check", "SELECT trellara.control_check($1, $2)", 2),
       "preparing the snapshot registry check");
  // Parsed once, not once per pipelined transaction.
  Must(conn_->Prepare("trellara_begin", "BEGIN", 0), "preparing BEGIN");
  Must(conn_->Prepare("trellara_commit", "COMMIT", 0), "preparing COMMIT");
  // The last statement of a grouped batch that left superseded UPDATEs out (apply_pipeline.cpp).
  Must(conn_->Prepare("trellara_update_guard", "SELECT trellara.require_no_replica_triggers($1::text[])", 1),
       "preparing the guard of superseded updates");
}

SqlParams ApplySession::CommitRecordParams(const ReadyTransaction& ready) const {
  const TxIdentity& tx = ready.tx;
  const std::string lsn = FormatLsn(tx.commit_lsn);
  return {tx.flow, lsn, std::to_string(tx.xid), std::to_string(tx.origin_sysid), ChecksumParam(ready.checksum),
          TimestampParam(ready.commit_time_us)};
}
SqlParams ApplySession::CommitRecordsParams(const std::vector<const ReadyTransaction*>& group) const {
  std::string lsns = "{", xids = "{", sysids = "{", checksums = "{";
  for (const ReadyTransaction* ready : group) {
    const char* sep = lsns.size() > 1 ? "," : "";
    // LSNs, integers and hex digits need no quoting in an array literal.
    lsns += sep + FormatLsn(ready->tx.commit_lsn);
    xids += sep + std::to_string(ready->tx.xid);
    sysids += sep + std::to_string(ready->tx.origin_sysid);
    checksums += sep + HexEncode(ready->checksum);
  }
  const ReadyTransaction& last = *group.back();
  return {group.front()->tx.flow, lsns + "}", xids + "}", sysids + "}", checksums + "}",
          FormatLsn(last.tx.commit_lsn), TimestampParam(last.commit_time_us)};
}
SqlParams ApplySession::RequireUnappliedParams(const std::vector<const ReadyTransaction*>& members) const {
  std::string lsns = "{";
  for (const ReadyTransaction* ready : members) lsns += (lsns.size() > 1 ? "," : "") + FormatLsn(ready->tx.commit_lsn);
  return {config_.flow_name, lsns + "}", origin_name_};
}
void ApplySession::WriteStatus(const std::string& state, const std::string& last_error,
                               const StatusFigures& figures) {
  if (!conn_) return;  // between sessions (reconnecting): the state file says it
  // Best effort only where the target itself is the problem; a status write never hides the
  // error that ended the run.
  auto r = conn_->ExecParams(
      "INSERT INTO trellara.apply_status AS s (flow, state, applied_commit_lsn, consumer_offset, "
      "applied_transactions, skipped_duplicates, last_error, updated_at) "
      "VALUES ($1, $2, pg_replication_origin_progress($3, false), $4, $5, $6, $7, now()) "
      "ON CONFLICT (flow) DO UPDATE SET state = EXCLUDED.state, applied_commit_lsn = EXCLUDED.applied_commit_lsn, "
      "consumer_offset = EXCLUDED.consumer_offset, applied_transactions = EXCLUDED.applied_transactions, "
      "skipped_duplicates = EXCLUDED.skipped_duplicates, last_error = EXCLUDED.last_error, updated_at = now()",
      {config_.flow_name, state, origin_name_, std::to_string(figures.consumer_offset), std::to_string(figures.applied),
       std::to_string(figures.skipped_duplicates),
       last_error.empty() ? std::nullopt : std::optional<std::string>(last_error)});
  if (!r.ok())
    std::cerr << "trellara: warning: could not record apply status '" << state << "' of flow " << config_.flow_name
              << " in trellara.apply_status: " << r.Describe() << "\n";
}
// The target's evidence for each of `txs`, in one round trip.
std::vector<Evidence> ApplySession::ReadEvidence(const std::vector<const TxIdentity*>& txs) {
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

void ApplySession::EndFailedTransaction(const std::string& what) {
  // After a failed COMMIT the server has already ended (rolled back) the transaction; after a
  // failed statement it is still open, in the aborted state.
  if (conn_->InTransaction()) {
    auto rollback = conn_->Exec("ROLLBACK");
    // A lost connection here ends the session, and its origin state with it: the apply loop
    // reconnects (transient, never quarantined).
    ThrowIfTransient(rollback, *conn_, "ROLLBACK of " + what);
    if (!rollback.ok())
      Fail("ROLLBACK of " + what + " failed on the target " + conn_->Describe() + ": " + rollback.Describe() +
           "; nothing of it was committed: rerun trellara apply");
  }
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_skip_origin_reset:1:defect): the
  // origin state of the failed transaction stays set, so the quarantine record commits with it and
  // moves origin progress past a transaction that was never applied, which the commit-failure
  // tests must catch.
  if (fault::Hit("defect.apply_skip_origin_reset") == fault::Action::Defect) return;
  Must(conn_->Exec("SELECT pg_replication_origin_xact_reset()"),
       "resetting the replication-origin state of the session after the failure of " + what);
}

// The commit LSN up to which the target has flushed this flow's transactions: origin progress
// read with flush = true (the server flushes WAL up to that progress first).
uint64_t ApplySession::FlushedProgress() {
  auto r = Must(conn_->ExecPrepared("trellara_flushed_progress", {origin_name_}),
                "reading the flushed progress of replication origin " + origin_name_);
  auto value = r.Value(0, 0);
  return value ? ParseLsn(*value).value_or(0) : 0;
}

uint64_t ApplySession::LastDedupLsn() {
  auto r = Must(conn_->ExecParams("SELECT max(commit_lsn) FROM trellara.applied_transactions WHERE flow = $1",
                                  {config_.flow_name}),
                "reading the last dedup row of flow " + config_.flow_name);
  auto value = r.Value(0, 0);
  return value ? ParseLsn(*value).value_or(0) : 0;
}

TargetTimelineFacts ApplySession::ReadTimelineFacts(uint64_t branch_lsn) {
  auto facts = ReadTargetTimelineFacts(*conn_, config_.flow_name, branch_lsn);
  if (!facts) Fail(facts.error().message);
  return *facts;
}

void ApplySession::RecordTimeline(const LogTimeline& timeline) {
  Must(conn_->ExecParams("INSERT INTO trellara.source_timelines (flow, timeline, parent_timeline, branch_lsn) "
                         "VALUES ($1, $2, $3, $4::pg_lsn) ON CONFLICT (flow, timeline) DO NOTHING",
                         {config_.flow_name, std::to_string(timeline.timeline),
                          timeline.parent_timeline != 0 ? std::optional<std::string>(std::to_string(timeline.parent_timeline))
                                                        : std::nullopt,
                          timeline.parent_timeline != 0 ? std::optional<std::string>(FormatLsn(timeline.branch_lsn))
                                                        : std::nullopt}),
       "recording source timeline " + std::to_string(timeline.timeline) + " of flow " + config_.flow_name +
           " in trellara.source_timelines");
}

// Whether the target can take changes of `relation` (core CheckTargetRelation), read from its
// catalog the first time this session meets the relation's fingerprint. Only an accepted
std::optional<QuarantineCause> ApplySession::CheckRelation(const RelationInfo& relation) {
  const std::string key = HexEncode(relation.fingerprint);
  if (accepted_relations_.contains(key)) return std::nullopt;
  if (!QualifiedName(relation)) return std::nullopt;  // the planner reports it as a plan error
  const TargetRelation target = ReadTargetRelation(relation.schema, relation.name);
  partitioned_[relation.oid] = target.partitioned;
  std::set<std::string>& always = always_identity_[relation.oid];
  always.clear();
  for (const TargetColumn& column : target.columns)
    if (column.identity_always) always.insert(column.name);
  auto cause = CheckTargetRelation(relation, target);
  if (!cause) accepted_relations_.insert(key);
  return cause;
}

TargetRelation ApplySession::ReadTargetRelation(const std::string& schema, const std::string& name, bool with_rows) {
  const std::string display = schema + "." + name;
  auto quoted_schema = QuoteIdentifier(schema);
  auto quoted_name = QuoteIdentifier(name);
  if (!quoted_schema || !quoted_name)
    Fail("cannot read the target's definition of " + display + ": the name cannot be quoted as an identifier");
  auto r = Must(conn_->ExecPrepared("trellara_target_columns", {*quoted_schema + "." + *quoted_name}),
                "reading the target's definition of " + display);
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
    column.identity_always = r.Value(i, 10) == std::optional<std::string>("t");
    target.columns.push_back(std::move(column));
  }
  if (target.exists) {
    if (auto key = r.Value(0, 7)) {
      auto parsed = nlohmann::json::parse(*key, nullptr, false);
      if (!parsed.is_array())
        Fail("the target's primary key of " + display + " could not be read (" + *key + ")");
      for (const auto& column : parsed) target.primary_key.push_back(column.get<std::string>());
    }
    target.primary_key_name = r.Value(0, 8).value_or("");
    target.partitioned = r.Value(0, 9) == std::optional<std::string>("t");
    if (with_rows) {
      auto rows = Must(conn_->Exec("SELECT EXISTS (SELECT 1 FROM " + *quoted_schema + "." + *quoted_name + ")"),
                       "reading whether the target's " + display + " holds rows");
      target.has_rows = rows.Value(0, 0) == std::optional<std::string>("t");
    }
  }
  return target;
}

// ---- what the flow knows of each source relation -------------------------------------------

void ApplySession::LoadKnownRelations() {
  known_.clear();
  pending_known_.clear();
  auto r = Must(conn_->ExecParams("SELECT source_oid, schema, name, encode(fingerprint, 'hex') "
                                  "FROM trellara.relation_schemas WHERE flow = $1",
                                  {config_.flow_name}),
                "reading what flow " + config_.flow_name + " knows of its source relations (trellara.relation_schemas)");
  for (int i = 0; i < r.rows(); i++) {
    KnownRelation known;
    known.oid = static_cast<uint32_t>(std::stoul(r.Value(i, 0).value_or("0")));
    known.schema = r.Value(i, 1).value_or("");
    known.name = r.Value(i, 2).value_or("");
    auto fingerprint = ParseChecksumHex(r.Value(i, 3).value_or(""));
    if (!fingerprint)
      Fail("the row of source relation oid " + std::to_string(known.oid) + " (" + known.schema + "." + known.name +
           ") of flow " + config_.flow_name + " in trellara.relation_schemas has a malformed fingerprint; it was "
           "edited by hand: delete that row (the next change of the relation is then checked against the target's "
           "catalog again) and rerun trellara apply");
    known.fingerprint = *fingerprint;
    known_[known.oid] = std::move(known);
  }
}

std::optional<KnownRelation> ApplySession::Known(uint32_t oid) const {
  if (auto pending = pending_known_.find(oid); pending != pending_known_.end()) return pending->second;
  if (auto found = known_.find(oid); found != known_.end()) return found->second;
  return std::nullopt;
}

void ApplySession::RecordKnown(const RelationInfo& relation, const TxIdentity& tx) {
  Must(conn_->ExecParams("INSERT INTO trellara.relation_schemas AS r (flow, source_oid, schema, name, fingerprint, "
                         "updated_commit_lsn, updated_at) VALUES ($1, $2, $3, $4, $5::bytea, $6::pg_lsn, now()) "
                         "ON CONFLICT (flow, source_oid) DO UPDATE SET schema = EXCLUDED.schema, name = EXCLUDED.name, "
                         "fingerprint = EXCLUDED.fingerprint, updated_commit_lsn = EXCLUDED.updated_commit_lsn, "
                         "updated_at = now()",
                         {config_.flow_name, std::to_string(relation.oid), relation.schema, relation.name,
                          ChecksumParam(relation.fingerprint), FormatLsn(tx.commit_lsn)}),
       "recording the definition of " + DisplayName(relation) + " for " + DescribeTransaction(tx) +
           " (trellara.relation_schemas)");
  pending_known_[relation.oid] = KnownRelation{relation.oid, relation.schema, relation.name, relation.fingerprint};
}

void ApplySession::ForgetKnown(uint32_t oid, const TxIdentity& tx) {
  Must(conn_->ExecParams("DELETE FROM trellara.relation_schemas WHERE flow = $1 AND source_oid = $2",
                         {config_.flow_name, std::to_string(oid)}),
       "forgetting source relation oid " + std::to_string(oid) + " for " + DescribeTransaction(tx) +
           " (trellara.relation_schemas)");
  pending_known_[oid] = std::nullopt;
}

void ApplySession::CommitKnown() {
  for (auto& [oid, known] : pending_known_) {
    if (known)
      known_[oid] = std::move(*known);
    else
      known_.erase(oid);
  }
  pending_known_.clear();
}

bool ApplySession::WithholdSnapshotHandoff(const std::string& schema, const std::string& name, const TxIdentity& tx,
                                           const std::string& ddl_description) {
  const std::string& flow = config_.flow_name;
  const std::string display = schema + "." + name;
  const std::string what = "withholding the snapshot handoff of " + display + " after " + ddl_description + " in " +
                           DescribeTransaction(tx);
  // docs/snapshot.md "Locks": a registry change is made under the control lock taken exclusive and
  // bumps the control version. This transaction already holds it shared (control_check); nobody
  // else of this flow applies, so the upgrade waits only for registrations in flight.
  Must(conn_->ExecParams("SELECT pg_advisory_xact_lock(hashtextextended('trellara control ' || $1, 0))", {flow}),
       what + ": taking the control lock");
  const std::string error =
      display + " changed under its snapshot copy: " + ddl_description + " (" + DescribeTransaction(tx) +
      ") was applied to the target before its copy was handed off, so chunks copied before it may hold rows read "
      "with the old definition; copy it again under the new one: trellara snapshot --config " + config_.path + " --table " +
      display + " --force";
  auto r = Must(conn_->ExecParams("UPDATE trellara.snapshot_tables SET state = 'failed_recoverable', run_id = $4, "
                                  "last_error = $5, updated_at = now() WHERE flow = $1 AND schema_name = $2 AND "
                                  "table_name = $3 AND state <> 'handoff_ready'",
                                  {flow, schema, name, "ddl@" + FormatLsn(tx.commit_lsn), error}),
                what);
  if (r.affected() == 0) return false;
  Must(conn_->ExecParams("INSERT INTO trellara.apply_control AS c (flow, version, updated_at) VALUES ($1, 1, now()) "
                         "ON CONFLICT (flow) DO UPDATE SET version = c.version + 1, updated_at = now()",
                         {flow}),
       what + ": bumping the control version (trellara.apply_control)");
  return true;
}

// Every relation a change writes to, checked (CheckRelation).
std::optional<QuarantineCause> ApplySession::CheckRelationsOf(const Change& change, const std::vector<RelationInfo>& relations) {
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
std::pair<std::string, bool> ApplySession::StatementFor(const ChangePlan& plan) {
  auto cached = statements_.find(plan.statement_key);
  if (cached != statements_.end()) return {cached->second, false};
  const std::string name = "trellara_s" + std::to_string(++statement_serial_);
  statements_.emplace(plan.statement_key, name);
  return {name, true};
}

void ApplySession::RecordQuarantine(const QuarantineRecord& q, const TxIdentity& tx) {
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
       "recording the quarantine of " + DescribeTransaction(tx) + " (" + q.message + ")");
}

}  // namespace trellara::cli::apply
