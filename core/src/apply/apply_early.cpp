// apply_early.cpp — see apply_early.h.
#include "trellara/apply/apply_early.h"

#include "trellara/record/envelope.h"

namespace trellara {

std::optional<std::string> EarlyStartRefusal(const TxIdentity& tx, uint32_t seq, const EarlyStartFacts& facts) {
  if (!facts.enabled) return "early apply is off ([apply] early_apply = \"off\")";
  if (seq != 0) return "chunk " + std::to_string(seq) + " is not the transaction's first chunk";
  if (facts.stopping) return "the applier is stopping";
  if (facts.hold_requested) return "a hold point is requested";
  if (facts.open.size() != 1)
    return std::to_string(facts.open.size()) + " transactions are open in the barrier, not 1";
  if (!(facts.open.front().tx == tx)) return "another transaction is open in the barrier";
  return std::nullopt;
}

std::optional<std::string> EarlyEvidenceRefusal(const TxIdentity& tx, const TargetEvidence& target) {
  if (target.dedup) return std::string("the target holds a dedup row for its commit LSN");
  if (target.quarantine)
    return std::string("the target holds a ") + QuarantineStateName(*target.quarantine) + " quarantine row for it";
  if (target.checkpoint_lsn >= tx.commit_lsn)
    return "the target's checkpoint " + FormatLsn(target.checkpoint_lsn) + " is at or past its commit LSN";
  return std::nullopt;
}

void EarlyAttempt::Start(const TxIdentity& tx) {
  active_ = true;
  tx_ = tx;
  offsets_.clear();
}

void EarlyAttempt::End() {
  active_ = false;
  offsets_.clear();
}

bool EarlyAttempt::Owns(EarlyRecordKind kind, uint64_t commit_lsn) const {
  return active_ && kind != EarlyRecordKind::Other && commit_lsn == tx_.commit_lsn;
}

std::optional<std::string> EarlyAttempt::RefuseChunk(const TxIdentity& tx, uint32_t seq, uint64_t offset) const {
  if (!active_) return std::string("no early attempt is running");
  if (!(tx == tx_)) return "the chunk at log offset " + std::to_string(offset) + " belongs to another transaction";
  if (seq != offsets_.size())
    return "chunk " + std::to_string(seq) + " at log offset " + std::to_string(offset) +
           " is not the next chunk of the transaction (" + std::to_string(offsets_.size()) + " staged)";
  return std::nullopt;
}

std::optional<std::string> EarlyAttempt::RefuseCommit(const ReadyTransaction& ready,
                                                      const TargetEvidence& evidence) const {
  if (!active_) return std::string("no early attempt is running");
  if (!(ready.tx == tx_)) return std::string("the barrier yielded another transaction");
  if (!ready.chunked()) return std::string("the barrier yielded it as a whole envelope, not as chunks");
  if (ready.chunks.size() != offsets_.size())
    return "its manifest lists " + std::to_string(ready.chunks.size()) + " chunks, " +
           std::to_string(offsets_.size()) + " were staged";
  for (size_t i = 0; i < ready.chunks.size(); i++) {
    if (ready.chunks[i].seq != i || ready.chunks[i].offset != offsets_[i])
      return "chunk " + std::to_string(i) + " was staged from log offset " + std::to_string(offsets_[i]) +
             ", the barrier verified chunk " + std::to_string(ready.chunks[i].seq) + " at log offset " +
             std::to_string(ready.chunks[i].offset);
  }
  const ApplyDecision decision = DecideApply(ready.tx, ready.checksum, evidence);
  if (decision.action != ApplyAction::Apply)
    return std::string("the target's evidence says ") + ApplyActionName(decision.action) + ", not apply";
  return std::nullopt;
}

}  // namespace trellara
