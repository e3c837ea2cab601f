// apply_chunked.cpp — a chunked transaction's changes, batched inside its one target transaction
// (docs/apply.md "Chunked transactions"). The one-at-a-time path (apply_transaction.cpp) opens the
// transaction, writes the dedup row, and hands each change of each verified chunk, in order, to
// StageChunkedChange; it calls FlushChunked before COMMIT.
//
//   runs of INSERTs   consecutive INSERTs with one statement_key (one relation, one definition) of
//                     at least kCopyRunRowsMin rows go through one COPY ... FROM STDIN per run (at
//                     most kCopyRowsMax rows each); the rows are the planned INSERTs' own bound
//                     values (core AppendCopyRow). The COPY's affected count must equal its rows.
//   runs of UPDATEs   consecutive UPDATEs with one statement_key, each matched by a key it leaves
//                     unchanged and no key twice (core UpdateBatchable), of at least
//                     kUpdateBatchRowsMin rows, go as one statement per kUpdateBatchRowsMax rows
//                     (core UpdateBatchSql: UPDATE ... FROM unnest(<one array per column>)),
//                     pipelined like any other; each row must be changed exactly once. Only for a
//                     relation the target says may be (trellara.batch_column_types: no trigger or
//                     rule firing for replicated changes, no unique index but the key's), asked
//                     once per statement shape and transaction.
//   other row changes UPDATE, DELETE and short INSERT and UPDATE runs are queued in libpq pipeline mode with
//                     their row-checked prepared statements (RowCheckedSql: the target raises when
//                     a change matched anything but one row), at most
//                     kChunkedPipelineStatementsMax statements or kChunkedPipelineParamBytesMax
//                     bytes of values per segment; the answers are read back in order.
//   the careful path  DDL, TRUNCATE, messages, a change of a table under snapshot, and a change
//                     naming a relation not yet known (first sight, drift) or not yet accepted by
//                     the target catalog check go through ExecuteChange, after everything staged
//                     before them was flushed and its answers read.
//
// It never lets a change run before an earlier one (a COPY starts only after the pipelined segment
// before it was answered; a pipelined statement is queued only after the COPY before it ended),
// never reports a later change's failure when an earlier one failed, and never leaves the
// connection in pipeline or COPY mode when it returns a failure or throws a transient one, so the
// caller's ROLLBACK (or the retry loop) finds a plain session. What it buffers is bounded: the
// short run's rows, the COPY data not yet handed to libpq (flushed at kCopyBufferBytes), and the
// pipelined statements' descriptions (their values are in libpq's output buffer).
#include "engine/applier.h"
#include "trellara/base/fault.h"
#include "trellara/apply/value_types.h"

namespace trellara::cli::apply {
namespace {
constexpr size_t kCopyBufferBytes = 256u << 10;

}  // namespace

// After a failure (or before a new transaction): nothing staged stays on the connection — an open
// COPY is aborted, a pipelined segment is synced and its answers read — and the stage is emptied.
void Applier::ResetChunked() {
  if (conn_ != nullptr && chunked_.copying) {
    (void)conn_->PutCopyEnd("abandoned: an earlier change of the transaction failed");
    (void)conn_->FinishCopy();
  }
  chunked_.copying = false;
  // Only a connection still in pipeline mode has a segment to sync and drain; after a transient
  // failure the recovery may have replaced the connection, or the segment was already synced.
  if (conn_ != nullptr && chunked_.piped && conn_->InPipeline()) {
    const TxIdentity none{};
    (void)FlushPiped(none);
  }
  chunked_ = ChunkedStage{};
}

// One change of a chunked transaction, in order. Returns the cause of the first failure among it
// and everything staged before it.
std::optional<QuarantineCause> Applier::StageChunkedChange(const Change& change,
                                                           const std::vector<RelationInfo>& relations,
                                                           const TxIdentity& tx) {
  const bool row_change = change.op == Op::Insert || change.op == Op::Update || change.op == Op::Delete;
  const RelationInfo* relation = row_change ? RelationOf(relations, change.relation_oid) : nullptr;
  // Anything that may talk to the target on its own (first sight, the catalog check, the snapshot
  // rule's chunk reads, DDL) or is not a plain row change: the careful path, after a flush.
  const bool careful = relation == nullptr || !ShapesKnown(change, relations, FlowKnows()) ||
                       !session_.RelationAccepted(*relation) || UnderSnapshot(change, relations, tx.commit_lsn);
  if (careful) {
    if (auto cause = FlushChunked(tx)) return cause;
    return ExecuteChange(change, relations, tx);
  }
  // Known and accepted: CheckDrift sends nothing here, but stays the authority.
  if (auto cause = CheckDrift(change, relations, tx)) {
    if (auto earlier = FlushChunked(tx)) return earlier;
    return cause;
  }
  // The hot path of a long INSERT run: the row goes into the open COPY without being planned
  // (core AppendCopyRowOf appends exactly the planned INSERT's values, or refuses and the planner
  // names the error below).
  ChunkedStage& s = chunked_;
  if (s.copying && change.op == Op::Insert && change.relation_oid == s.run_oid &&
      relation->fingerprint == s.run_fingerprint && AppendCopyRowOf(change, *relation, s.copy_buffer).ok())
    return CopyRowAppended(tx);
  // accepted: the target was read
  auto plan = PlanChange(change, relations, session_.Partitioned(), session_.AlwaysIdentity());
  if (!plan) {
    if (auto earlier = FlushChunked(tx)) return earlier;
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
  if (plan->kind == PlanKind::Insert && !plan->params.empty()) {
    if (auto cause = EndUpdateRun(tx)) return cause;
    return QueueInsertRow(std::move(plan.value()), *relation, tx);
  }
  if (auto cause = EndInsertRun(tx)) return cause;
  if (UpdateBatchable(*plan)) return QueueUpdateRow(std::move(plan.value()), tx);
  if (auto cause = EndUpdateRun(tx)) return cause;
  return QueuePiped(std::move(plan.value()), tx);
}

// Everything staged is executed and answered: the INSERT or UPDATE run ended, the pipelined
// segment synced.
std::optional<QuarantineCause> Applier::FlushChunked(const TxIdentity& tx) {
  auto cause = EndUpdateRun(tx);
  if (!cause) cause = EndInsertRun(tx);
  auto piped = FlushPiped(tx);  // always: the connection leaves pipeline mode
  return cause ? cause : piped;
}

// One UPDATE of a run (UpdateBatchable): a run of another shape, or one that already changes this
// row, is ended first (a batch changes each row once, in no particular order).
std::optional<QuarantineCause> Applier::QueueUpdateRow(ChangePlan plan, const TxIdentity& tx) {
  ChunkedStage& s = chunked_;
  if (!s.update_key.empty() && (s.update_key != plan.statement_key || s.update_row_keys.contains(plan.row_key)))
    if (auto cause = EndUpdateRun(tx)) return cause;
  if (s.update_key.empty()) {
    std::optional<QuarantineCause> cause;
    const std::vector<std::string>* types = UpdateBatchTypes(plan, tx, cause);
    if (cause) return cause;
    if (types == nullptr) return QueuePiped(std::move(plan), tx);
    s.update_key = plan.statement_key;
  }
  s.update_bytes += PlanParamBytes(plan);
  s.update_row_keys.insert(plan.row_key);
  s.update_rows.push_back(std::move(plan));
  if (s.update_rows.size() >= kUpdateBatchRowsMax || s.update_bytes >= kUpdateBatchBytesMax)
    return SendUpdateBatch(tx);
  return std::nullopt;
}

// Ends the UPDATE run: one batch statement, or the rows one by one when there are too few.
std::optional<QuarantineCause> Applier::EndUpdateRun(const TxIdentity& tx) {
  ChunkedStage& s = chunked_;
  if (s.update_key.empty()) return std::nullopt;
  if (s.update_rows.size() >= kUpdateBatchRowsMin) return SendUpdateBatch(tx);
  std::vector<ChangePlan> rows = std::move(s.update_rows);
  s.update_rows.clear();
  s.update_row_keys.clear();
  s.update_key.clear();
  s.update_bytes = 0;
  for (ChangePlan& row : rows)
    if (auto cause = QueuePiped(std::move(row), tx)) return cause;
  return std::nullopt;
}

// The run's rows as one statement (core UpdateBatchSql), queued in the pipelined segment.
std::optional<QuarantineCause> Applier::SendUpdateBatch(const TxIdentity& tx) {
  ChunkedStage& s = chunked_;
  std::vector<ChangePlan> rows = std::move(s.update_rows);
  const std::vector<std::string>& types = *s.update_types.at(s.update_key);
  s.update_rows.clear();
  s.update_row_keys.clear();
  s.update_key.clear();
  s.update_bytes = 0;
  std::vector<const ChangePlan*> pointers;
  pointers.reserve(rows.size());
  for (const ChangePlan& row : rows) pointers.push_back(&row);
  ChangePlan batch = UpdateBatchPlan(pointers, types);
  std::vector<std::string> matches;
  matches.reserve(rows.size());
  for (ChangePlan& row : rows) matches.push_back(std::move(row.match_description));
  attempt_batched_updates_ += rows.size();
  return QueuePiped(std::move(batch), tx, std::move(matches));
}

ChangePlan Applier::UpdateBatchPlan(const std::vector<const ChangePlan*>& rows, const std::vector<std::string>& types) {
  const ChangePlan& first = *rows.front();
  auto sql = UpdateBatchSql(first, types);
  if (!sql) Fail(sql.error().message);
  ChangePlan batch;
  batch.kind = PlanKind::Update;
  batch.match = MatchMode::Key;
  batch.expect = RowExpectation::Any;  // the statement checks its rows itself
  batch.relation_display = first.relation_display;
  // The cast types are part of the text: a target whose column types changed gets a new statement.
  batch.statement_key = "B|" + first.statement_key;
  for (const auto& type : types) batch.statement_key += "|" + type;
  batch.sql = std::move(*sql);
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_update_batch_unchecked:1:defect): the
  // batch statement without its row check, so a row matched no time is silently left as it was,
  // which the missing-row scenario of test_apply_update_batches.py must catch.
  if (fault::Hit("defect.apply_update_batch_unchecked") == fault::Action::Defect) {
    batch.sql = batch.sql.substr(0, batch.sql.find(" SELECT CASE")) + " SELECT $" + std::to_string(first.params.size() + 1) +
                "::bigint";
    batch.statement_key = "B!" + batch.statement_key;
  }
  const size_t columns = first.params.size();
  batch.params.resize(columns + 1);
  for (size_t i = 0; i < columns; i++) {
    std::string literal = "{";
    for (const ChangePlan* row : rows) AppendArrayElement(row->params[i], literal);
    literal += '}';
    batch.params[i] = std::move(literal);
  }
  batch.params[columns] = std::to_string(rows.size());
  return batch;
}

SqlParams Applier::UpdateBatchTypesParams(const ChangePlan& plan) {
  std::string columns = "{", keys = "{";
  for (size_t i = 0; i < plan.param_columns.size(); i++) {
    AppendArrayElement(plan.param_columns[i], columns);
    if (i >= plan.param_columns.size() - plan.match_params) AppendArrayElement(plan.param_columns[i], keys);
  }
  columns += '}';
  keys += '}';
  return {plan.target_relation, columns, keys};
}

// The types the parameter arrays of one statement merging UPDATEs of `plan`'s shape are cast to:
// the target's facts (trellara.batch_column_types), asked outside pipeline mode, and core's
// decision (BatchCastType); nullopt: the UPDATEs go one at a time (a trigger, another unique
// index, a column the target lacks). A failure names `what`, and
// `consequence` says what it left undone.
std::optional<std::vector<std::string>> Applier::AskUpdateBatchTypes(const ChangePlan& plan, const std::string& what,
                                                                     const std::string& consequence) {
  PgResult r = conn_->ExecParams("SELECT type_name FROM trellara.batch_column_types($1, $2::text[], $3::text[])",
                                 UpdateBatchTypesParams(plan));
  if (!r.ok()) {
    ThrowIfTransient(r, *conn_, what);
    Fail(what + " failed: " + r.Describe() + "; " + consequence + ". The function is created "
         "by trellara apply's bootstrap (sql/trellara_target.sql); rerun trellara apply");
  }
  if (static_cast<size_t>(r.rows()) != plan.params.size()) return std::nullopt;
  std::vector<std::string> types;
  for (int i = 0; i < r.rows(); i++) {
    auto type = BatchCastType(r.Value(i, 0).value_or(""), plan.param_columns[static_cast<size_t>(i)]);
    if (!type.ok()) return std::nullopt;
    types.push_back(std::move(*type));
  }
  return types;
}

// The target's answer for `plan`'s statement shape (trellara.batch_column_types), asked once per
// transaction, outside pipeline mode (the segment before it is flushed; its failure is `cause`).
// nullptr: this relation's UPDATEs go one at a time.
const std::vector<std::string>* Applier::UpdateBatchTypes(const ChangePlan& plan, const TxIdentity& tx,
                                                          std::optional<QuarantineCause>& cause) {
  ChunkedStage& s = chunked_;
  if (auto known = s.update_types.find(plan.statement_key); known != s.update_types.end())
    return known->second ? &*known->second : nullptr;
  cause = FlushPiped(tx);
  if (cause) return nullptr;
  auto types = AskUpdateBatchTypes(plan,
                                   "asking the target whether the UPDATEs of " + plan.relation_display +
                                       " may be batched (trellara.batch_column_types) while applying " + DescribeTransaction(tx),
                                   "nothing of the transaction was committed");
  auto& stored = s.update_types[plan.statement_key] = std::move(types);
  return stored ? &*stored : nullptr;
}

std::optional<QuarantineCause> Applier::QueueInsertRow(ChangePlan plan, const RelationInfo& relation,
                                                       const TxIdentity& tx) {
  ChunkedStage& s = chunked_;
  if (!s.run_key.empty() && s.run_key != plan.statement_key)
    if (auto cause = EndInsertRun(tx)) return cause;
  if (s.run_key.empty()) {
    auto sql = CopyInsertSql(relation);
    if (!sql) return QueuePiped(std::move(plan), tx);  // unreachable for a planned INSERT with columns
    s.run_key = plan.statement_key;
    s.run_oid = relation.oid;
    s.run_fingerprint = relation.fingerprint;
    s.copy_sql = std::move(*sql);
  }
  if (!s.copying) {
    s.run_rows.push_back(std::move(plan));
    if (s.run_rows.size() < kCopyRunRowsMin) return std::nullopt;
    return StartCopy(tx);
  }
  Status row = AppendCopyRow(plan, s.copy_buffer);
  if (!row.ok()) Fail("internal: " + row.error().message);
  return CopyRowAppended(tx);
}

// A row was appended to the open COPY's buffer: handed to libpq when the buffer is full, the COPY
// ended at kCopyRowsMax rows.
std::optional<QuarantineCause> Applier::CopyRowAppended(const TxIdentity& tx) {
  ChunkedStage& s = chunked_;
  s.copy_rows++;
  if (s.copy_buffer.size() >= kCopyBufferBytes) {
    Status put = conn_->PutCopyData(s.copy_buffer.data(), s.copy_buffer.size());
    if (!put.ok()) FailTransient(put.error().message + " (applying " + DescribeTransaction(tx) + ")", "", true);
    s.copy_buffer.clear();
  }
  if (s.copy_rows >= kCopyRowsMax) return FinishCopy(tx);
  return std::nullopt;
}

// The run is long enough for a COPY: the pipelined segment before it is answered first (COPY is not
// allowed in pipeline mode, and it must not run before them), then the buffered rows are sent.
std::optional<QuarantineCause> Applier::StartCopy(const TxIdentity& tx) {
  ChunkedStage& s = chunked_;
  if (auto cause = FlushPiped(tx)) return cause;
  PgResult started = conn_->StartCopy(s.copy_sql);
  counters_.statements++;
  if (!started.ok()) {
    ThrowIfTransient(started, *conn_, "starting a COPY for " + DescribeTransaction(tx));
    s.run_rows.front().match_description.clear();
    QuarantineCause cause = CauseOf(started, s.run_rows.front());
    cause.detail += "; the target refused " + s.copy_sql;
    s.run_rows.clear();
    s.run_key.clear();
    return cause;
  }
  s.copying = true;
  s.copy_rows = 0;
  s.copy_buffer.clear();
  for (const ChangePlan& row : s.run_rows) {
    Status encoded = AppendCopyRow(row, s.copy_buffer);
    if (!encoded.ok()) Fail("internal: " + encoded.error().message);
    s.copy_rows++;
  }
  // What a failure's cause names (relation, kind); the values are in the COPY data now.
  s.copy_plan = std::move(s.run_rows.front());
  s.copy_plan.params.clear();
  s.copy_plan.sql.clear();
  s.run_rows.clear();
  return std::nullopt;
}

std::optional<QuarantineCause> Applier::FinishCopy(const TxIdentity& tx) {
  ChunkedStage& s = chunked_;
  if (!s.copy_buffer.empty()) {
    Status put = conn_->PutCopyData(s.copy_buffer.data(), s.copy_buffer.size());
    if (!put.ok()) FailTransient(put.error().message + " (applying " + DescribeTransaction(tx) + ")", "", true);
    s.copy_buffer.clear();
  }
  Status end = conn_->PutCopyEnd();
  if (!end.ok()) FailTransient(end.error().message + " (applying " + DescribeTransaction(tx) + ")", "", true);
  PgResult result = conn_->FinishCopy();
  const uint64_t rows = s.copy_rows;
  ChangePlan plan = std::move(s.copy_plan);
  plan.match_description.clear();  // the first row's key; the server's DETAIL names the failing one
  s.copying = false;
  s.copy_rows = 0;
  s.run_key.clear();
  s.copy_plan = ChangePlan{};
  if (!result.ok()) {
    ThrowIfTransient(result, *conn_, "a COPY of " + std::to_string(rows) + " rows of " + DescribeTransaction(tx));
    QuarantineCause cause = CauseOf(result, plan);
    const std::optional<uint64_t> line = CopyLineOf(result.context());
    const std::string batch = "in a batch of " + std::to_string(rows) + " INSERT rows into " + plan.relation_display +
                              " sent as one COPY" +
                              (line ? ", at row " + std::to_string(*line) + " of the batch" : std::string());
    cause.detail = result.message() + (result.detail().empty() ? std::string() : " (" + result.detail() + ")") +
                   "; " + batch + (result.context().empty() ? std::string() : " [" + result.context() + "]");
    // The operator's message names the match (DuplicateKey: the server's DETAIL); say where it was.
    if (!cause.match.empty()) cause.match += " (" + batch + ")";
    return cause;
  }
  if (result.affected() != rows) {
    QuarantineCause cause;
    cause.reason = QuarantineReason::SqlError;
    cause.operation = "INSERT";
    cause.relation = plan.relation_display;
    cause.detail = "a COPY of " + std::to_string(rows) + " INSERT rows into " + plan.relation_display +
                   " inserted " + std::to_string(result.affected()) +
                   " (a trigger or rule on the target skipped rows); every captured row must be inserted";
    return cause;
  }
  return std::nullopt;
}

// Ends the current INSERT run: the open COPY is finished, or the short run's rows are pipelined.
std::optional<QuarantineCause> Applier::EndInsertRun(const TxIdentity& tx) {
  ChunkedStage& s = chunked_;
  if (s.copying) return FinishCopy(tx);
  std::vector<ChangePlan> rows = std::move(s.run_rows);
  s.run_rows.clear();
  s.run_key.clear();
  for (ChangePlan& row : rows)
    if (auto cause = QueuePiped(std::move(row), tx)) return cause;
  return std::nullopt;
}

// Queues one row-checked prepared statement in the pipelined segment (sending the segment when it
// reached its bounds).
std::optional<QuarantineCause> Applier::QueuePiped(ChangePlan plan, const TxIdentity& tx,
                                                   std::vector<std::string> batch_matches) {
  ChunkedStage& s = chunked_;
  auto queued = [&](Status st) {
    if (st.ok()) return;
    if (conn_->connection_lost())
      FailTransient(st.error().message + " (applying " + DescribeTransaction(tx) + ", target " + conn_->Describe() + ")",
                    "", true);
    Fail(st.error().message + " (applying " + DescribeTransaction(tx) + ", target " + conn_->Describe() +
         "); rerun trellara apply: the dedup rows make it resume exactly once");
  };
  if (!s.piped) {
    queued(conn_->EnterPipeline());
    s.piped = true;
  }
  const auto [name, must_prepare] = session_.StatementFor(plan);
  if (must_prepare) {
    queued(conn_->SendPrepare(name, RowCheckedSql(plan), static_cast<int>(plan.params.size())));
    ChangePlan described;
    described.statement_key = plan.statement_key;
    s.piped_statements.push_back({std::move(described), true});
  }
  queued(conn_->SendPrepared(name, plan.params));
  counters_.statements++;
  s.piped_rows++;
  s.piped_bytes += PlanParamBytes(plan);
  plan.sql.clear();
  plan.params.clear();
  plan.param_columns.clear();
  s.piped_statements.push_back({std::move(plan), false, std::move(batch_matches)});
  if (s.piped_rows >= kChunkedPipelineStatementsMax || s.piped_bytes >= kChunkedPipelineParamBytesMax)
    return FlushPiped(tx);
  return std::nullopt;
}

// Syncs the pipelined segment and reads every answer in order; the connection leaves pipeline mode.
// The first failed statement is the cause; the server skipped everything after it.
std::optional<QuarantineCause> Applier::FlushPiped(const TxIdentity& tx) {
  ChunkedStage& s = chunked_;
  if (!s.piped) return std::nullopt;
  // The segment is over however this returns, also when a transient failure is thrown from here
  // (the retry must find an empty stage: a stale one would sync a connection that is no longer in
  // pipeline mode, fail transiently again, and retry forever).
  struct SegmentOver {
    ChunkedStage& s;
    ~SegmentOver() {
      s.piped = false;
      s.piped_statements.clear();
      s.piped_rows = 0;
      s.piped_bytes = 0;
    }
  };
  const size_t rows = s.piped_rows;
  // Every transient failure is followed by a new connection (RecoverFrom), so nothing of the
  // segment can be resumed: the stage is emptied on every way out.
  SegmentOver over{s};
  const std::string what = "a pipelined batch of " + std::to_string(s.piped_rows) + " statements of " +
                           DescribeTransaction(tx);
  Status synced = conn_->Sync();
  if (!synced.ok()) FailTransient(synced.error().message + " (" + what + ")", "", conn_->connection_lost());
  std::optional<PgResult> failed;
  const ChunkedStage::Piped* failed_entry = nullptr;
  size_t failed_at = 0, row = 0;
  for (const auto& statement : s.piped_statements) {
    auto next = conn_->NextResult();
    if (next.sync || next.missing)
      FailTransient("the target's answers to " + what + " ended before every queued statement was answered (" +
                        next.result.Describe() + "); rerun trellara apply, the dedup rows make it resume exactly once",
                    next.result.sqlstate(), conn_->connection_lost());
    if (!statement.prepare) row++;
    const bool ok = next.result.ok() && !next.aborted;
    if (statement.prepare && !ok) session_.ForgetStatement(statement.plan.statement_key);
    if (!ok && !next.aborted && !failed) {
      failed = next.result;
      failed_entry = &statement;
      failed_at = statement.prepare ? row + 1 : row;
    }
  }
  auto sync = conn_->NextResult();
  if (!sync.sync)
    FailTransient("the target did not answer the pipeline Sync of " + what + " (" + sync.result.Describe() +
                      "); rerun trellara apply, the dedup rows make it resume exactly once",
                  sync.result.sqlstate(), conn_->connection_lost());
  Status left = conn_->ExitPipeline();
  if (!left.ok()) Fail(left.error().message + " (" + what + "); rerun trellara apply");
  std::optional<QuarantineCause> cause;
  if (failed) {
    ThrowIfTransient(*failed, *conn_, what);
    const ChangePlan& failed_plan = failed_entry->plan;
    if (failed_plan.kind == PlanKind::NotApplied) {
      // A Parse failed: the statement text itself was refused.
      cause = CauseFromStatementError(failed->sqlstate(), failed->message(), failed->detail());
      cause->detail = "preparing a statement failed: " + failed->Describe();
    } else {
      cause = CauseOf(*failed, failed_plan);
      if (cause->detail.empty()) cause->detail = failed->message() + (failed->detail().empty() ? "" : " (" + failed->detail() + ")");
    }
    if (const auto& matches = failed_entry->batch_matches; !matches.empty()) {
      // An UPDATE batch: the row check names the batch row in HINT (trellara.require_each_row_once);
      // another error's DETAIL names the row itself ("Failing row contains ...").
      std::string where = "in a batch of " + std::to_string(matches.size()) + " UPDATEs of " +
                          failed_plan.relation_display + " sent as one statement";
      uint64_t row_no = 0;
      for (char c : failed->hint()) row_no = c >= '0' && c <= '9' && row_no < matches.size() ? row_no * 10 + (c - '0') : 0;
      if (row_no >= 1 && row_no <= matches.size() && (failed->sqlstate() == "TR001" || failed->sqlstate() == "TR002")) {
        where += ", at row " + std::to_string(row_no) + " of the batch";
        // The operator's message names the match; say where it was.
        cause->match = matches[row_no - 1] + " (" + where + ")";
      }
      cause->detail += "; " + where;
    }
    cause->detail += "; statement " + std::to_string(failed_at) + " of a pipelined batch of " + std::to_string(rows) +
                     " statements";
  }
  return cause;
}

}  // namespace trellara::cli::apply
