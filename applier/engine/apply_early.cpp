// apply_early.cpp — a chunked transaction applied while the relay is still writing it (docs/apply.md
// "Early apply of chunked transactions").
//
// The relay writes a streamed transaction's chunks, then its Manifest and CommitMarker, only after
// the source's COMMIT, and for a large transaction that takes seconds. Instead of waiting for the
// CommitMarker and then applying, the applier opens the target transaction at the transaction's
// first chunk and stages each chunk as the barrier accepts it — the very object the barrier
// verified (record checksum, seq order, the transaction's running checksum), as the chunk cache
// hands it to the one-at-a-time path. It commits only when the barrier yields the transaction (the
// CommitMarker bound a Manifest whose every chunk, count and total checksum holds: the check the
// one-at-a-time path waits for) and the chunks staged are exactly that transaction's chunks, in seq
// order, at the offsets the barrier verified; the dedup row and the origin progress go into the
// same target transaction just before COMMIT.
//
// Everything else abandons the early attempt: ROLLBACK, and the transaction is applied by the
// one-at-a-time path at its CommitMarker exactly as before (its chunks re-read from the log), which
// also decides every failure — quarantine, retry, a hold. The early path can only save time; it
// never quarantines, skips or decides anything. It is abandoned on: a frame of anything else
// (another transaction, a progress marker), a chunk that is not the next one, a change the target
// refused, a barrier failure, a stop, the end of an --until-caught-up run, and no new frame for
// [apply] early_apply_idle (the relay stopped in the middle of the transaction: its row locks are
// released). It is not started when early_apply is off, a hold is requested, another transaction is
// open in the barrier, the target's evidence is anything but "never seen" (a duplicate, a
// quarantine, a replay), or the registry moved (control_check refused the BEGIN). Those decisions
// are core's (trellara/apply/apply_early.h, unit-tested); this file executes them on the target. While it runs the applier does no tail work on
// the target (registry poll, status row, consumer offset): the connection is inside the early
// transaction, and none of that may commit or fail with it.
#include <iostream>

#include "engine/applier.h"
#include "trellara/apply/apply_early.h"
#include "trellara/log/barrier.h"
#include "trellara/base/fault.h"

namespace trellara::cli::apply {

namespace {
EarlyRecordKind KindOf(uint8_t type) {
  switch (static_cast<log::RecordType>(type)) {
    case log::RecordType::Chunk: return EarlyRecordKind::Chunk;
    case log::RecordType::Manifest: return EarlyRecordKind::Manifest;
    case log::RecordType::CommitMarker: return EarlyRecordKind::CommitMarker;
    default: return EarlyRecordKind::Other;
  }
}
}  // namespace

bool Applier::EarlyFrame(const log::LogRecord& record) const {
  return early_.attempt.Owns(KindOf(record.type), record.commit_lsn);
}

bool Applier::StartEarly(const TxIdentity& tx, uint32_t seq) {
  // Core refuses these too (EarlyStartRefusal); checked first so that no facts (a copy of the
  // barrier's open transactions) are built for each later chunk of a transaction not begun early.
  if (seq != 0 || !config_.early_apply) return false;
  const EarlyStartFacts facts{config_.early_apply, !registry_.holds().empty(), StopRequested(),
                              barrier_.OpenTransactions()};
  if (EarlyStartRefusal(tx, seq, facts)) return false;
  // The transactions read before this one are applied first, as at its CommitMarker.
  if (Pump(true) == Outcome::Stopped) return false;
  early_.evidence = session_.ReadEvidence(tx);
  if (EarlyEvidenceRefusal(tx, early_.evidence.target)) return false;
  ResetAttempt(false);
  if (BeginAttempt(tx)) return false;  // the registry moved: the one-at-a-time path reloads it
  ResetChunked();
  early_.attempt.Start(tx);
  early_.last_frame = Clock::now();
  std::cerr << "apply flow=" << config_.flow_name << " event=early_begin xid=" << tx.xid
            << " commit_lsn=" << FormatLsn(tx.commit_lsn) << std::endl;
  return true;
}

void Applier::EarlyChunk(uint64_t offset, Chunk&& chunk) {
  // A partitioned transaction is published from what the partition appliers staged, once they
  // all hold evidence for it (apply_partitioned.cpp): never applied early from the log, and its
  // chunks are not read from the log again (not kept in the chunk cache).
  if (!chunk.positions.empty()) return;
  if (!early_.attempt.active() && !StartEarly(chunk.tx, chunk.seq)) {
    chunk_cache_.Offer(offset, std::move(chunk));
    return;
  }
  if (auto refused = early_.attempt.RefuseChunk(chunk.tx, chunk.seq, offset)) {
    AbandonEarly(*refused);
    chunk_cache_.Offer(offset, std::move(chunk));
    return;
  }
  for (const auto& change : chunk.changes) {
    if (StageChunkedChange(change, chunk.relations, early_.attempt.tx())) {
      // The one-at-a-time path applies it again at its CommitMarker and reports the failure.
      AbandonEarly("a change of chunk " + std::to_string(chunk.seq) + " failed");
      return;
    }
  }
  early_.attempt.Staged(offset);
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_early_commit_per_chunk:1:defect):
  // each staged chunk is committed on its own, so a source transaction lands in pieces — a change
  // the target refuses later leaves the chunks before it applied, which the fail-closed scenario
  // of test_apply_early.py must catch.
  if (fault::Hit("defect.apply_early_commit_per_chunk") == fault::Action::Defect) {
    const TxIdentity& tx = early_.attempt.tx();
    if (FlushChunked(tx) || !conn_->Exec("COMMIT").ok() || BeginAttempt(tx)) {
      AbandonEarly("defect.apply_early_commit_per_chunk could not go on");
      return;
    }
    ResetChunked();
  }
  // Fault point (tests): a chunk of the transaction is staged in the open target transaction,
  // its CommitMarker not read yet. `stall` holds it there (a test kills the applier inside it).
  fault::Hit("apply.early_after_chunk");
}

void Applier::EarlyAbandoned(const TxIdentity& tx, const std::string& why) {
  counters_.early_abandoned++;
  std::cerr << "apply flow=" << config_.flow_name << " event=early_abandoned xid=" << tx.xid
            << " commit_lsn=" << FormatLsn(tx.commit_lsn) << " why=\"" << why << "\""
            << " (applied at its commit marker instead)" << std::endl;
}

void Applier::AbandonEarly(const std::string& why) {
  if (!early_.attempt.active()) return;
  const TxIdentity tx = early_.attempt.tx();
  early_.attempt.End();
  ResetChunked();
  session_.DiscardKnown();
  session_.ForgetAcceptedRelations();
  session_.EndFailedTransaction(DescribeTransaction(tx));
  pending_locked_.clear();
  EarlyAbandoned(tx, why);
}

bool Applier::FinishEarly(const ReadyTransaction& ready) {
  if (!early_.attempt.active()) return false;
  if (auto refused = early_.attempt.RefuseCommit(ready, early_.evidence.target)) {
    AbandonEarly(*refused);
    return false;
  }
  const TxIdentity tx = ready.tx;
  std::optional<QuarantineCause> failure = FlushChunked(tx);
  ResetChunked();
  Step(conn_->ExecPrepared("trellara_commit_record", session_.CommitRecordParams(ready)),
       "INSERT of the dedup row with the origin progress", tx, failure);
  early_.attempt.End();
  const Attempt attempt = EndAttempt(ready, failure, false);
  if (attempt.kind != Attempt::Kind::Committed) {
    EarlyAbandoned(tx, "the transaction failed");
    return false;
  }
  counters_.applied++;
  counters_.early_chunked++;
  Retired(tx.commit_lsn, ready.commit_time_us);
  return true;
}

}  // namespace trellara::cli::apply
