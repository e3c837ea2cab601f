// apply_decision.cpp — exactly-once apply decisions, quarantine records and replay-ready rules
// (apply_decision.h). Pure functions: they must never read or write target state themselves,
// never call a different checksum a duplicate, and never let a quarantine move the checkpoint.
#include "trellara/apply/apply_decision.h"

#include <algorithm>
#include <cstdlib>

#include "trellara/log/barrier.h"
#include "trellara/base/fault.h"

namespace trellara {

namespace {

constexpr size_t kMessageDetailBytes = 600;

std::string Shorten(const std::string& s) {
  if (s.size() <= kMessageDetailBytes) return s;
  size_t cut = kMessageDetailBytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) cut--;
  return s.substr(0, cut) + "... (" + std::to_string(s.size()) + " bytes; full text in the quarantine detail)";
}

std::string Boundary(uint32_t xid, uint64_t commit_lsn) {
  return "transaction " + std::to_string(xid) + " (commit " + FormatLsn(commit_lsn) + ")";
}

}  // namespace

const char* QuarantineStateName(QuarantineState state) {
  switch (state) {
    case QuarantineState::Quarantined: return "quarantined";
    case QuarantineState::ReplayReady: return "replay_ready";
    case QuarantineState::Resolved: return "resolved";
  }
  return "?";
}

const char* ApplyActionName(ApplyAction action) {
  switch (action) {
    case ApplyAction::Apply: return "apply";
    case ApplyAction::SkipDuplicate: return "skip_duplicate";
    case ApplyAction::QuarantineConflict: return "quarantine_conflict";
    case ApplyAction::WaitReplayReady: return "wait_replay_ready";
  }
  return "?";
}

const char* QuarantineReasonName(QuarantineReason reason) {
  switch (reason) {
    case QuarantineReason::ZeroRowsMatched: return "zero_rows_matched";
    case QuarantineReason::ManyRowsMatched: return "many_rows_matched";
    case QuarantineReason::DuplicateKey: return "duplicate_key";
    case QuarantineReason::MissingTable: return "missing_table";
    case QuarantineReason::MissingColumn: return "missing_column";
    case QuarantineReason::SchemaMismatch: return "schema_mismatch";
    case QuarantineReason::SqlError: return "sql_error";
    case QuarantineReason::ChecksumConflict: return "checksum_conflict";
    case QuarantineReason::MissingDedupEvidence: return "missing_dedup_evidence";
    case QuarantineReason::PlanError: return "plan_error";
    case QuarantineReason::BarrierFailure: return "barrier_failure";
    case QuarantineReason::SnapshotPartialUpdate: return "snapshot_partial_update";
    case QuarantineReason::DdlUnsupported: return "ddl_unsupported";
    case QuarantineReason::DdlPolicyHalt: return "ddl_policy_halt";
    case QuarantineReason::SchemaDrift: return "schema_drift";
  }
  return "?";
}

ApplyDecision DecideApply(const TxIdentity& tx, const Sha256& checksum, const TargetEvidence& target) {
  ApplyDecision d;
  // 1. The dedup row is the authority: the same transaction was committed with its changes.
  if (target.dedup && target.dedup->checksum == checksum && target.dedup->xid == tx.xid &&
      target.dedup->origin_sysid == tx.origin_sysid) {
    d.action = ApplyAction::SkipDuplicate;
    d.reason = DescribeTransaction(tx) + " is already applied (dedup row with the same checksum)";
    return d;
  }
  // 2. Quarantined and not yet released by the operator: halt here, apply nothing after it.
  if (target.quarantine == QuarantineState::Quarantined) {
    d.action = ApplyAction::WaitReplayReady;
    d.reason = DescribeTransaction(tx) + " is quarantined; waiting for " + ReplayReadyCall(tx.xid, tx.commit_lsn);
    return d;
  }
  // 3. Same boundary, different transaction: a conflict, never a duplicate.
  if (target.dedup) {
    std::string what;
    if (target.dedup->origin_sysid != tx.origin_sysid)
      what = "origin system " + std::to_string(target.dedup->origin_sysid) + " (this log: " +
             std::to_string(tx.origin_sysid) + ")";
    else if (target.dedup->xid != tx.xid)
      what = "xid " + std::to_string(target.dedup->xid) + " (this log: " + std::to_string(tx.xid) + ")";
    else
      what = "checksum " + HexEncode(target.dedup->checksum) + " (this log: " + HexEncode(checksum) + ")";
    d.action = ApplyAction::QuarantineConflict;
    d.reason = "the target recorded commit " + FormatLsn(tx.commit_lsn) + " of flow " + tx.flow + " with " + what;
    d.cause.reason = QuarantineReason::ChecksumConflict;
    d.cause.detail = d.reason;
    return d;
  }
  // 4. At or below the checkpoint without a dedup row. Dedup rows commit in the same transaction
  //    as the checkpoint and are kept, so this cannot happen unless rows were pruned on purpose
  //    (then the checkpoint is the evidence) or the target state was altered (restore, manual
  //    delete): fail closed and let the operator decide; replay-ready means "it is not applied".
  if (target.checkpoint_lsn != 0 && tx.commit_lsn <= target.checkpoint_lsn) {
    if (tx.commit_lsn < target.dedup_pruned_below_lsn) {
      d.action = ApplyAction::SkipDuplicate;
      d.reason = DescribeTransaction(tx) + " is at or below the checkpoint " + FormatLsn(target.checkpoint_lsn) +
                 " and its dedup row was pruned (rows below " + FormatLsn(target.dedup_pruned_below_lsn) +
                 "); already applied, checksum not comparable";
      return d;
    }
    if (target.quarantine == QuarantineState::ReplayReady) {
      d.action = ApplyAction::Apply;
      d.reason = DescribeTransaction(tx) + " is below the checkpoint without a dedup row and was marked replay-ready";
      return d;
    }
    d.action = ApplyAction::QuarantineConflict;
    d.reason = "the target's checkpoint " + FormatLsn(target.checkpoint_lsn) + " is at or past commit " +
               FormatLsn(tx.commit_lsn) + " but the target holds no dedup row for it (the checkpoint is the "
               "server's replication origin: a database restored from a dump, or copied, keeps it while its dedup "
               "rows end earlier); if this database does not hold the transaction, mark it replay-ready and it is "
               "applied, else fix the dedup rows first";
    d.cause.reason = QuarantineReason::MissingDedupEvidence;
    d.cause.detail = d.reason;
    return d;
  }
  d.action = ApplyAction::Apply;
  if (target.quarantine == QuarantineState::ReplayReady)
    d.reason = DescribeTransaction(tx) + " was marked replay-ready; retrying";
  return d;
}

uint64_t CheckpointAfter(uint64_t checkpoint_lsn, uint64_t commit_lsn) { return std::max(checkpoint_lsn, commit_lsn); }

std::string ReplayReadyCall(uint32_t xid, uint64_t commit_lsn) {
  return "SELECT trellara.quarantine_replay_ready(" + std::to_string(xid) + ", '" + FormatLsn(commit_lsn) + "')";
}

QuarantineRecord BuildQuarantine(const TxIdentity& tx, const Sha256& checksum, const QuarantineCause& cause,
                                 uint32_t previous_attempts) {
  QuarantineRecord q;
  q.flow = tx.flow;
  q.origin_sysid = tx.origin_sysid;
  q.xid = tx.xid;
  q.commit_lsn = tx.commit_lsn;
  q.reason = cause.reason;
  q.sqlstate = cause.sqlstate;
  q.detail = cause.detail;
  q.checksum = checksum;
  q.attempts = previous_attempts + 1;
  q.state = QuarantineState::Quarantined;

  const std::string call = ReplayReadyCall(tx.xid, tx.commit_lsn);
  const std::string op = cause.operation.empty() ? std::string("the apply transaction") : cause.operation;
  const std::string on = cause.relation.empty() ? std::string() : " on " + cause.relation;
  const std::string state = cause.sqlstate.empty() ? std::string() : " (SQLSTATE " + cause.sqlstate + ")";
  const std::string match = cause.match.empty() ? std::string()
                                                : std::string(cause.match_is_key ? " for key " : " for row ") + cause.match;
  std::string what;
  switch (cause.reason) {
    case QuarantineReason::ZeroRowsMatched:
      what = op + on + " matched 0 rows" + match;
      q.next_step = "repair the target row, then " + call;
      break;
    case QuarantineReason::ManyRowsMatched:
      what = op + on + " matched " + std::to_string(cause.rows) + " rows" + match +
             "; the target table does not enforce the source's key";
      q.next_step = "remove the duplicate target rows and make the key unique (add the primary key), then " + call;
      break;
    case QuarantineReason::DuplicateKey:
      what = op + on + " hit an existing row" + match + state;
      q.next_step = "remove or reconcile the existing target row, then " + call;
      break;
    case QuarantineReason::MissingTable:
      what = "table " + cause.relation + " does not exist on the target" + state;
      q.next_step = "create it on the target with the source's definition (trellara repair-plan --config <flow.toml> "
                    "prints the steps), then " + call;
      break;
    case QuarantineReason::MissingColumn:
      what = "column " + cause.column + " of " + cause.relation + " does not exist on the target" + state;
      q.next_step = "add the column on the target with the source's type (trellara repair-plan --config <flow.toml> "
                    "prints the steps), then " + call;
      break;
    case QuarantineReason::SchemaMismatch:
      what = "the target's " + cause.relation + " cannot accept the source schema: " + Shorten(cause.detail);
      q.next_step = "alter the target table to match the source (trellara repair-plan --config <flow.toml> prints the "
                    "steps), then " + call;
      break;
    case QuarantineReason::SqlError:
      what = op + on + " failed" + state + ": " + Shorten(cause.detail);
      q.next_step = "fix the cause on the target, then " + call;
      break;
    case QuarantineReason::ChecksumConflict:
      what = "the target already holds a different transaction at this boundary: " + Shorten(cause.detail);
      q.next_step = "compare both with trellara inspect-transaction; replaying cannot resolve a conflict: only if "
                    "the target must take this version, delete the flow's row for commit " +
                    FormatLsn(tx.commit_lsn) + " from trellara.applied_transactions, repair the target, then " + call;
      break;
    case QuarantineReason::MissingDedupEvidence:
      what = Shorten(cause.detail) + " (was the target restored from a backup, or were dedup rows deleted?)";
      q.next_step = "check whether the target holds this transaction's changes; only if it does not, " + call;
      break;
    case QuarantineReason::PlanError:
      what = "it cannot be expressed as SQL: " + Shorten(cause.detail);
      q.next_step = "it cannot be applied as captured; fix the cause named above, reseed the affected tables "
                    "(trellara reseed), then record the decision with " + call;
      break;
    case QuarantineReason::BarrierFailure:
      what = "the log holds no complete verified copy of it: " + Shorten(cause.detail);
      q.next_step = "it cannot be applied from this log; reseed the affected tables (trellara reseed), then "
                    "record the decision with " + call;
      break;
    case QuarantineReason::SnapshotPartialUpdate:
      what = op + on + " cannot be applied under the snapshot handoff (snapshot_partial_update): " +
             Shorten(cause.detail);
      q.next_step = "reseed the table (trellara reseed --table " + (cause.relation.empty() ? std::string("T") : cause.relation) +
                    ") or insert the row's current source values on the target, then " + call;
      break;
    case QuarantineReason::DdlUnsupported:
      what = "its DDL on " + cause.relation + " cannot be reproduced exactly on the target (ddl_unsupported): " +
             Shorten(cause.detail);
      q.next_step = "follow trellara repair-plan --config <flow.toml> (change the target by hand or re-snapshot the "
                    "table), then " + call;
      break;
    case QuarantineReason::DdlPolicyHalt:
      what = "it holds DDL on " + cause.relation + " and [apply] ddl = \"halt\" (ddl_policy_halt): " +
             Shorten(cause.detail);
      q.next_step = "apply the change to the target yourself (trellara repair-plan --config <flow.toml> prints the "
                    "steps), then " + call;
      break;
    case QuarantineReason::SchemaDrift:
      what = "the definition of " + cause.relation + " changed with no DDL record that explains it (schema_drift): " +
             Shorten(cause.detail);
      q.next_step = "follow trellara repair-plan --config <flow.toml> (make the target match, run trellara "
                    "contract-test), then " + call;
      break;
  }
  q.message = "quarantined " + Boundary(tx.xid, tx.commit_lsn) + " of flow " + tx.flow + ": " + what + "; " +
              q.next_step;
  return q;
}

ReplayReadyDecision DecideReplayReady(const std::string& flow, const std::vector<QuarantineEntry>& quarantine,
                                      uint32_t xid, uint64_t commit_lsn) {
  ReplayReadyDecision d;
  const std::string asked = Boundary(xid, commit_lsn) + " of flow " + flow;
  for (const auto& e : quarantine) {
    if (e.xid != xid) continue;
    // Negative control (tests only, TRELLARA_FAULTS=defect.replay_ready_xid_only:1:defect; seed row
    // quarantine_replay_ready_requires_exact_boundary, caught by the ctest
    // quarantine_replay_ready_matched_on_the_xid_alone_negative_control): the boundary is matched on
    // the xid alone, so a replay-ready naming the right xid with a mistyped commit LSN marks it.
    if (e.commit_lsn != commit_lsn && fault::Hit("defect.replay_ready_xid_only") != fault::Action::Defect) continue;
    switch (e.state) {
      case QuarantineState::Quarantined:
        d.outcome = ReplayReadyOutcome::Mark;
        d.message = asked + " is marked replay-ready; the applier retries it next";
        return d;
      case QuarantineState::ReplayReady:
        d.outcome = ReplayReadyOutcome::AlreadyReplayReady;
        d.message = asked + " is already replay-ready; nothing changed";
        return d;
      case QuarantineState::Resolved:
        d.outcome = ReplayReadyOutcome::Refuse;
        d.message = "refused: " + asked + " was already resolved (applied after an earlier replay); nothing to replay";
        return d;
    }
  }
  d.outcome = ReplayReadyOutcome::Refuse;
  for (const auto& e : quarantine) {
    if (e.state == QuarantineState::Resolved) continue;
    if (e.commit_lsn == commit_lsn) {
      d.message = "refused: commit " + FormatLsn(commit_lsn) + " of flow " + flow + " is quarantined as transaction " +
                  std::to_string(e.xid) + ", not " + std::to_string(xid) + "; nothing was marked. Use " +
                  ReplayReadyCall(e.xid, e.commit_lsn) + " if that is the one you repaired";
      return d;
    }
    if (e.xid == xid) {
      d.message = "refused: transaction " + std::to_string(xid) + " of flow " + flow + " is quarantined at commit " +
                  FormatLsn(e.commit_lsn) + ", not " + FormatLsn(commit_lsn) + "; nothing was marked. Use " +
                  ReplayReadyCall(e.xid, e.commit_lsn) + " if that is the one you repaired";
      return d;
    }
  }
  size_t open = 0;
  for (const auto& e : quarantine)
    if (e.state != QuarantineState::Resolved) open++;
  d.message = "refused: no quarantined " + asked + "; nothing was marked (" + std::to_string(open) +
              " quarantined in this flow: trellara quarantine list shows their exact boundaries)";
  return d;
}

QuarantineCause CauseFromStatementError(const std::string& sqlstate, const std::string& message,
                                        const std::string& detail) {
  QuarantineCause cause;
  cause.sqlstate = sqlstate;
  cause.detail = message;  // the SQLSTATE is its own field; the quarantine message shows it once
  // The row-count check's DETAIL is the bare count, already said by the message.
  if (!detail.empty() && sqlstate != "TR001" && sqlstate != "TR002") cause.detail += ": " + detail;
  if (sqlstate == "TR001") {
    cause.reason = QuarantineReason::ZeroRowsMatched;
    cause.rows = 0;
  } else if (sqlstate == "TR002") {
    cause.reason = QuarantineReason::ManyRowsMatched;
    cause.rows = std::strtoull(detail.c_str(), nullptr, 10);
  } else if (sqlstate == "23505") {
    cause.reason = QuarantineReason::DuplicateKey;
  } else if (sqlstate == "42P01") {
    cause.reason = QuarantineReason::MissingTable;
  } else if (sqlstate == "42703") {
    cause.reason = QuarantineReason::MissingColumn;
    // column "x" of relation "t" does not exist
    const auto open = message.find('"');
    const auto close = open == std::string::npos ? open : message.find('"', open + 1);
    if (close != std::string::npos) cause.column = message.substr(open + 1, close - open - 1);
  } else {
    cause.reason = QuarantineReason::SqlError;
  }
  return cause;
}

void ApplyOffsetTracker::Done(uint64_t offset, uint64_t required_lsn) {
  max_required_ = std::max(max_required_, required_lsn);
  if (offset <= safe_) return;
  if (head_ < pending_.size() && pending_.back().offset >= offset) return;  // already covered
  pending_.push_back(Mark{offset, max_required_});
}

uint64_t ApplyOffsetTracker::Durable(uint64_t flushed_lsn) {
  while (head_ < pending_.size() && pending_[head_].required_lsn <= flushed_lsn) {
    safe_ = std::max(safe_, pending_[head_].offset);
    head_++;
  }
  if (head_ == pending_.size()) {
    pending_.clear();
    head_ = 0;
  } else if (head_ > 4096) {
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
  return safe_;
}

}  // namespace trellara
