// apply_early.h — the decisions of early apply: a chunked transaction staged in an open target
// transaction while the relay is still writing it, committed at its CommitMarker only when the
// chunks staged are exactly the chunks the barrier verified (docs/apply.md "Early apply of chunked
// transactions").
//
// The early path can only save time. It never quarantines, skips or decides a transaction's fate:
// each refusal below is a reason to leave (or roll back) the early attempt, and the one-at-a-time
// path then applies the transaction at its CommitMarker exactly as without early apply. So every
// function here answers "may the early attempt go on?", and answers no whenever it is not sure.
//
//   EarlyStartRefusal     at a chunk the barrier accepted: may an early attempt start with it?
//   EarlyEvidenceRefusal  once the transactions before it are applied: does the target's evidence
//                         say "never seen"? (Anything else — a dedup row, a quarantine row, a
//                         checkpoint at or past it — is for the one-at-a-time path to decide.)
//   EarlyAttempt          the attempt's state: which chunk it may stage next, which log records
//                         belong to it, and whether what it staged may commit as the transaction
//                         the barrier yielded.
//
// Nothing here talks to the target; the applier (applier/engine/apply_early.cpp) executes the answers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/apply/apply_decision.h"
#include "trellara/log/barrier.h"
#include "trellara/record/envelope.h"

namespace trellara {

// What the applier knows when the barrier accepts a chunk and no early attempt is running.
struct EarlyStartFacts {
  bool enabled = true;          // [apply] early_apply = "on"
  bool hold_requested = false;  // an operator hold point is set (verify, reseed): apply nothing new
  bool stopping = false;        // SIGTERM/SIGINT received
  std::vector<OpenTransactionInfo> open;  // the barrier's open transactions, this one included
};

// nullopt: an early attempt may start with chunk `seq` of `tx`; else why not, in words. It starts
// only at a transaction's first chunk (seq 0) and only when that transaction is the only one open
// in the barrier (an interleaved transaction's records would abandon it at once, and a transaction
// that commits before it must be applied first).
std::optional<std::string> EarlyStartRefusal(const TxIdentity& tx, uint32_t seq, const EarlyStartFacts& facts);

// nullopt: the target has never seen `tx` (no dedup row, no quarantine row, the checkpoint below
// its commit LSN), so the early attempt may begin; else why not.
std::optional<std::string> EarlyEvidenceRefusal(const TxIdentity& tx, const TargetEvidence& target);

// Record types of the log a chunked transaction is made of (log::RecordType values).
enum class EarlyRecordKind : uint8_t { Chunk, Manifest, CommitMarker, Other };

class EarlyAttempt {
 public:
  bool active() const { return active_; }
  const TxIdentity& tx() const { return tx_; }
  size_t staged() const { return offsets_.size(); }
  const std::vector<uint64_t>& offsets() const { return offsets_; }

  void Start(const TxIdentity& tx);
  void End();

  // Whether a log record of `kind` for the transaction committed at `commit_lsn` belongs to the
  // attempt (its chunks, manifest and commit marker). Any other record ends it.
  bool Owns(EarlyRecordKind kind, uint64_t commit_lsn) const;

  // nullopt: chunk `seq` of `tx`, at log offset `offset`, is the next chunk to stage; else why not.
  std::optional<std::string> RefuseChunk(const TxIdentity& tx, uint32_t seq, uint64_t offset) const;
  // The chunk at `offset` was staged into the target transaction.
  void Staged(uint64_t offset) { offsets_.push_back(offset); }

  // nullopt: what was staged may commit as `ready`, the transaction the barrier yielded: the same
  // transaction, chunked, every chunk it lists staged once in seq order at the very log offset
  // the barrier verified, and the target's evidence (read when the attempt began) saying apply.
  // Else why not: the attempt is rolled back and the transaction applied at its marker.
  std::optional<std::string> RefuseCommit(const ReadyTransaction& ready, const TargetEvidence& evidence) const;

 private:
  bool active_ = false;
  TxIdentity tx_;
  std::vector<uint64_t> offsets_;  // chunk i staged from offsets_[i]
};

}  // namespace trellara
