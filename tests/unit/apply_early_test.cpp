// apply_early_test.cpp — the decisions of early apply (trellara/apply/apply_early.h): when an attempt may
// start, which chunk it may stage next, and whether what it staged may commit as the transaction
// the barrier yielded. Each refusal sends the transaction to the one-at-a-time path.
#include <catch2/catch.hpp>

#include "trellara/apply/apply_early.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_apply_early_test {

using namespace trellara;

namespace {

TxIdentity Tx(uint32_t xid, uint64_t commit_lsn) { return TxIdentity{"app", 7, xid, commit_lsn}; }

OpenTransactionInfo Open(const TxIdentity& tx) {
  OpenTransactionInfo info;
  info.tx = tx;
  return info;
}

// A chunked transaction as the barrier yields it: chunk i verified at offsets[i].
ReadyTransaction Ready(const TxIdentity& tx, const std::vector<uint64_t>& offsets) {
  ReadyTransaction ready;
  ready.tx = tx;
  ready.manifest = Manifest{};
  for (size_t i = 0; i < offsets.size(); i++) {
    ChunkLocation chunk;
    chunk.offset = offsets[i];
    chunk.seq = static_cast<uint32_t>(i);
    ready.chunks.push_back(chunk);
  }
  return ready;
}

}  // namespace

TEST_CASE("an_early_attempt_starts_only_at_the_first_chunk_of_the_only_open_transaction", "[early]") {
  const TxIdentity tx = Tx(900, 0x5000);
  EarlyStartFacts facts;
  facts.open = {Open(tx)};
  CHECK_FALSE(EarlyStartRefusal(tx, 0, facts));

  CHECK(EarlyStartRefusal(tx, 1, facts).value().find("not the transaction's first chunk") != std::string::npos);

  EarlyStartFacts off = facts;
  off.enabled = false;
  CHECK(EarlyStartRefusal(tx, 0, off).value().find("early_apply = \"off\"") != std::string::npos);

  EarlyStartFacts hold = facts;
  hold.hold_requested = true;
  CHECK(EarlyStartRefusal(tx, 0, hold).value().find("hold point") != std::string::npos);

  EarlyStartFacts stopping = facts;
  stopping.stopping = true;
  CHECK(EarlyStartRefusal(tx, 0, stopping).value().find("stopping") != std::string::npos);

  // An interleaved transaction: its records would abandon the attempt, and it may commit first.
  EarlyStartFacts two = facts;
  two.open.push_back(Open(Tx(901, 0x6000)));
  CHECK(EarlyStartRefusal(tx, 0, two).value().find("2 transactions are open") != std::string::npos);

  EarlyStartFacts other = facts;
  other.open = {Open(Tx(901, 0x6000))};
  CHECK(EarlyStartRefusal(tx, 0, other).value().find("another transaction") != std::string::npos);

  EarlyStartFacts none = facts;
  none.open.clear();
  CHECK(EarlyStartRefusal(tx, 0, none));
}

TEST_CASE("an_early_attempt_begins_only_for_a_transaction_the_target_never_saw", "[early]") {
  const TxIdentity tx = Tx(900, 0x5000);
  TargetEvidence fresh;
  fresh.checkpoint_lsn = 0x4FFF;
  CHECK_FALSE(EarlyEvidenceRefusal(tx, fresh));

  TargetEvidence duplicate = fresh;
  duplicate.dedup = DedupRow{7, 900, Sha256{}};
  CHECK(EarlyEvidenceRefusal(tx, duplicate).value().find("dedup row") != std::string::npos);

  for (auto state : {QuarantineState::Quarantined, QuarantineState::ReplayReady, QuarantineState::Resolved}) {
    TargetEvidence quarantined = fresh;
    quarantined.quarantine = state;
    CHECK(EarlyEvidenceRefusal(tx, quarantined).value().find(QuarantineStateName(state)) != std::string::npos);
  }

  // At or past the checkpoint without a dedup row: missing evidence, decided at the marker.
  TargetEvidence at = fresh;
  at.checkpoint_lsn = 0x5000;
  CHECK(EarlyEvidenceRefusal(tx, at).value().find("at or past its commit LSN") != std::string::npos);
  TargetEvidence past = fresh;
  past.checkpoint_lsn = 0x9000;
  CHECK(EarlyEvidenceRefusal(tx, past));
}

TEST_CASE("an_early_attempt_stages_each_chunk_once_in_seq_order", "[early]") {
  const TxIdentity tx = Tx(900, 0x5000);
  EarlyAttempt attempt;
  CHECK_FALSE(attempt.active());
  CHECK(attempt.RefuseChunk(tx, 0, 100));
  CHECK_FALSE(attempt.Owns(EarlyRecordKind::Chunk, tx.commit_lsn));

  attempt.Start(tx);
  CHECK(attempt.active());
  CHECK_FALSE(attempt.RefuseChunk(tx, 0, 100));
  attempt.Staged(100);
  // A chunk out of turn (skipped, repeated) or of another transaction is refused.
  CHECK(attempt.RefuseChunk(tx, 2, 300).value().find("not the next chunk") != std::string::npos);
  CHECK(attempt.RefuseChunk(tx, 0, 300).value().find("(1 staged)") != std::string::npos);
  CHECK(attempt.RefuseChunk(Tx(901, 0x6000), 1, 300).value().find("another transaction") != std::string::npos);
  // Same commit LSN, another xid: not the same transaction.
  CHECK(attempt.RefuseChunk(Tx(902, 0x5000), 1, 300));
  CHECK_FALSE(attempt.RefuseChunk(tx, 1, 200));
  attempt.Staged(200);
  CHECK(attempt.staged() == 2);

  // Its chunks, manifest and marker belong to it; nothing else does.
  CHECK(attempt.Owns(EarlyRecordKind::Chunk, 0x5000));
  CHECK(attempt.Owns(EarlyRecordKind::Manifest, 0x5000));
  CHECK(attempt.Owns(EarlyRecordKind::CommitMarker, 0x5000));
  CHECK_FALSE(attempt.Owns(EarlyRecordKind::Other, 0x5000));
  CHECK_FALSE(attempt.Owns(EarlyRecordKind::Chunk, 0x6000));

  attempt.End();
  CHECK_FALSE(attempt.active());
  CHECK(attempt.staged() == 0);
  // A new attempt starts empty.
  attempt.Start(Tx(901, 0x6000));
  CHECK(attempt.staged() == 0);
  CHECK_FALSE(attempt.RefuseChunk(Tx(901, 0x6000), 0, 400));
}

TEST_CASE("an_early_attempt_commits_only_what_the_barrier_verified", "[early]") {
  const TxIdentity tx = Tx(900, 0x5000);
  TargetEvidence fresh;
  EarlyAttempt attempt;
  attempt.Start(tx);
  for (uint64_t offset : {100, 200, 300}) attempt.Staged(offset);

  CHECK_FALSE(attempt.RefuseCommit(Ready(tx, {100, 200, 300}), fresh));

  // The manifest lists a chunk more (one was never staged) or fewer (one staged too many).
  CHECK(attempt.RefuseCommit(Ready(tx, {100, 200, 300, 400}), fresh).value().find("lists 4 chunks, 3 were staged") !=
        std::string::npos);
  CHECK(attempt.RefuseCommit(Ready(tx, {100, 200}), fresh));
  // The barrier verified a chunk at another offset (a re-emitted copy staged instead).
  CHECK(attempt.RefuseCommit(Ready(tx, {100, 250, 300}), fresh).value().find("staged from log offset 200") !=
        std::string::npos);
  // Out of seq order in the ready transaction.
  ReadyTransaction swapped = Ready(tx, {100, 200, 300});
  std::swap(swapped.chunks[0].seq, swapped.chunks[1].seq);
  CHECK(attempt.RefuseCommit(swapped, fresh));
  // Another transaction, or the same one yielded as a whole envelope.
  CHECK(attempt.RefuseCommit(Ready(Tx(901, 0x5000), {100, 200, 300}), fresh).value().find("another transaction") !=
        std::string::npos);
  ReadyTransaction whole = Ready(tx, {100, 200, 300});
  whole.manifest.reset();
  CHECK(attempt.RefuseCommit(whole, fresh).value().find("whole envelope") != std::string::npos);
  // The evidence must still say apply (DecideApply), e.g. not a conflicting dedup row.
  TargetEvidence conflict;
  conflict.dedup = DedupRow{7, 901, Sha256{}};
  CHECK(attempt.RefuseCommit(Ready(tx, {100, 200, 300}), conflict).value().find("not apply") != std::string::npos);

  attempt.End();
  CHECK(attempt.RefuseCommit(Ready(tx, {100, 200, 300}), fresh).value().find("no early attempt") != std::string::npos);
}

}  // namespace unit_apply_early_test
