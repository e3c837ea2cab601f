// apply_early.cpp — a chunked transaction applied while the relay is still writing it (docs/apply.md
// "Early apply of chunked transactions"; issue 12, "Performance").
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
// kEarlyIdleMax (the relay stopped in the middle of the transaction: its row locks are released).
// It is not started when a hold is requested, another transaction is open in the barrier, the
// target's evidence is anything but "never seen" (a duplicate, a quarantine, a replay), or the
// registry moved (control_check refused the BEGIN). While it runs the applier does no tail work on
// the target (registry poll, status row, consumer offset): the connection is inside the early
// transaction, and none of that may commit or fail with it.
#include <iostream>

#include "applier.h"
#include "trellara/barrier.h"
#include "trellara/fault.h"

namespace trellara::cli::apply {

bool Applier::EarlyFrame(const log::LogRecord& record) const {
  const auto t = static_cast<log::RecordType>(record.type);
  return record.commit_lsn == early_.tx.commit_lsn &&
         (t == log::RecordType::kChunk || t == log::RecordType::kManifest || t == log::RecordType::kCommitMarker);
}

bool Applier::StartEarly(const TxIdentity& tx) {
  if (!registry_.holds().empty() || StopRequested()) return false;
  const auto open = barrier_.OpenTransactions();
  if (open.size() != 1 || !(open.front().tx == tx)) return false;
  // The transactions read before this one are applied first, as at its CommitMarker.
  if (Pump(true) == Outcome::Stopped) return false;
  early_.evidence = session_.ReadEvidence(tx);
  const TargetEvidence& target = early_.evidence.target;
  if (target.dedup || target.quarantine || target.checkpoint_lsn >= tx.commit_lsn) return false;
  ResetAttempt(false);
  if (BeginAttempt(tx)) return false;  // the registry moved: the one-at-a-time path reloads it
  pending_locked_.clear();
  ResetChunked();
  early_.active = true;
  early_.tx = tx;
  early_.offsets.clear();
  early_.last_frame = Clock::now();
  return true;
}

void Applier::EarlyChunk(uint64_t offset, Chunk&& chunk) {
  if (!early_.active && chunk.seq == 0 && StartEarly(chunk.tx)) {
    std::cerr << "apply flow=" << config_.flow_name << " event=early_begin xid=" << chunk.tx.xid
              << " commit_lsn=" << FormatLsn(chunk.tx.commit_lsn) << std::endl;
  }
  if (!early_.active) {
    chunk_cache_.Offer(offset, std::move(chunk));
    return;
  }
  if (!(chunk.tx == early_.tx) || chunk.seq != early_.offsets.size()) {
    AbandonEarly("chunk " + std::to_string(chunk.seq) + " at log offset " + std::to_string(offset) +
                 " is not the next chunk of the transaction");
    chunk_cache_.Offer(offset, std::move(chunk));
    return;
  }
  for (const auto& change : chunk.changes) {
    if (StageChunkedChange(change, chunk.relations, early_.tx)) {
      // The one-at-a-time path applies it again at its CommitMarker and reports the failure.
      AbandonEarly("a change of chunk " + std::to_string(chunk.seq) + " failed");
      return;
    }
  }
  early_.offsets.push_back(offset);
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_early_commit_per_chunk:1:defect):
  // each staged chunk is committed on its own, so a source transaction lands in pieces — a change
  // the target refuses later leaves the chunks before it applied, which the fail-closed scenario
  // of test_apply_early.py must catch.
  if (fault::Hit("defect.apply_early_commit_per_chunk") == fault::Action::Defect) {
    if (FlushChunked(early_.tx) || !conn_->Exec("COMMIT").ok() || BeginAttempt(early_.tx)) {
      AbandonEarly("defect.apply_early_commit_per_chunk could not go on");
      return;
    }
    ResetChunked();
  }
  // Fault point (tests): a chunk of the transaction is staged in the open target transaction,
  // its CommitMarker not read yet. `stall` holds it there (a test kills the applier inside it).
  fault::Hit("apply.early_after_chunk");
}

void Applier::AbandonEarly(const std::string& why) {
  if (!early_.active) return;
  const TxIdentity tx = early_.tx;
  early_.active = false;
  early_.offsets.clear();
  counters_.early_abandoned++;
  ResetChunked();
  session_.DiscardKnown();
  session_.ForgetAcceptedRelations();
  session_.EndFailedTransaction(DescribeTransaction(tx));
  pending_locked_.clear();
  std::cerr << "apply flow=" << config_.flow_name << " event=early_abandoned xid=" << tx.xid
            << " commit_lsn=" << FormatLsn(tx.commit_lsn) << " why=\"" << why << "\""
            << " (applied at its commit marker instead)" << std::endl;
}

bool Applier::FinishEarly(const ReadyTransaction& ready) {
  if (!early_.active) return false;
  bool same = ready.tx == early_.tx && ready.chunked() && ready.chunks.size() == early_.offsets.size();
  for (size_t i = 0; same && i < ready.chunks.size(); i++)
    same = ready.chunks[i].seq == i && ready.chunks[i].offset == early_.offsets[i];
  if (!same) {
    AbandonEarly("the chunks staged are not the chunks its manifest lists");
    return false;
  }
  if (Decide(ready, early_.evidence.target).action != ApplyAction::Apply) {
    AbandonEarly("the target's evidence does not say apply");
    return false;
  }
  const TxIdentity tx = ready.tx;
  std::optional<QuarantineCause> failure = FlushChunked(tx);
  ResetChunked();
  Step(conn_->ExecPrepared("trellara_commit_record", session_.CommitRecordParams(ready)),
       "INSERT of the dedup row with the origin progress", tx, failure);
  early_.active = false;
  early_.offsets.clear();
  const Attempt attempt = EndAttempt(ready, failure, false);
  if (attempt.kind != Attempt::Kind::Committed) {
    counters_.early_abandoned++;
    std::cerr << "apply flow=" << config_.flow_name << " event=early_abandoned xid=" << tx.xid
              << " commit_lsn=" << FormatLsn(tx.commit_lsn) << " why=\"the transaction failed\""
              << " (applied at its commit marker instead)" << std::endl;
    return false;
  }
  counters_.applied++;
  counters_.early_chunked++;
  Retired(tx.commit_lsn, ready.commit_time_us);
  return true;
}

}  // namespace trellara::cli::apply
