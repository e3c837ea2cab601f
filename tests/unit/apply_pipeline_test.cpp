// apply_pipeline_test.cpp — the applier's batch pipeline rules (core ApplyPipeline): who joins a
// batch, in-order retirement after a failure, how far the consumer offset may move. Example tests,
// then a seeded randomized simulation of the applier loop against a simulated target (a server
// that skips everything after a failure up to the Sync, flushes its WAL late, and fails
// transactions transiently or until repaired). The simulation prints its seed; rerun one with
// TRELLARA_PIPELINE_SEED=<seed> build/bin/trellara_tests '[pipeline]'.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "samples.h"
#include "trellara/apply/apply_pipeline.h"
#include "trellara/base/assert.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_apply_pipeline_test {

using namespace trellara;

namespace {

ReadyTransaction Ready(uint32_t xid, uint64_t lsn) {
  ReadyTransaction r;
  r.tx = TxIdentity{"app", 42, xid, lsn};
  return r;
}

// A pipeline holding whole transactions with commit LSNs 100, 200, ... at offsets 0, 1, ...
ApplyPipeline Queue(size_t count, PipelineLimits limits = {}) {
  ApplyPipeline p(0, limits);
  for (size_t i = 0; i < count; i++) p.ReadWhole(Ready(static_cast<uint32_t>(700 + i), 100 * (i + 1)), i + 1);
  return p;
}

std::vector<uint64_t> Lsns(const std::vector<PipelineTx>& txs) {
  std::vector<uint64_t> out;
  for (const auto& t : txs) out.push_back(t.ready.tx.commit_lsn);
  return out;
}

}  // namespace

TEST_CASE("batch_admits_duplicates_and_plain_applies_in_order_and_closes_at_the_first_alone", "[pipeline]") {
  ApplyPipeline p = Queue(5);
  REQUIRE(p.Next() == PipelineStep::Form);
  REQUIRE(p.Candidates() == 5);
  CHECK(p.Admit(0, Admission::Duplicate, 0));
  CHECK(p.Admit(1, Admission::Apply, 4));
  CHECK_FALSE(p.Admit(2, Admission::Alone, 0));  // a conflict: the batch ends before it
  CHECK(p.Seal() == 2);
  CHECK(p.BatchSendsStatements());
  CHECK(p.Next() == PipelineStep::Collect);
  auto outcome = p.Collect({false, true});  // the duplicate's answer is ignored
  REQUIRE(outcome);
  CHECK(Lsns(outcome->retired) == std::vector<uint64_t>{100, 200});
  CHECK_FALSE(outcome->failed);
  // The transaction that closed the batch goes alone; the rest wait for the next batch.
  CHECK(p.Next() == PipelineStep::Alone);
  CHECK(p.front().ready.tx.commit_lsn == 300);
  CHECK(p.RetireAlone().ready.tx.commit_lsn == 300);
  CHECK(p.Next() == PipelineStep::Form);
  CHECK(p.size() == 2);
}

TEST_CASE("a_transaction_the_log_holds_twice_never_joins_one_batch_twice", "[pipeline]") {
  // After a relay crash before its acknowledgement the log holds a transaction twice. The second
  // copy closes the batch and starts the next one, where its dedup row makes it a duplicate.
  ApplyPipeline p(0, {});
  p.ReadWhole(Ready(700, 100), 1);
  p.ReadWhole(Ready(701, 200), 2);
  p.ReadWhole(Ready(701, 200), 3);  // the same source transaction again
  p.ReadWhole(Ready(702, 300), 4);
  REQUIRE(p.Candidates() == 4);
  CHECK(p.Admit(0, Admission::Apply, 1));
  CHECK(p.Admit(1, Admission::Apply, 1));
  CHECK_FALSE(p.Admit(2, Admission::Apply, 1));  // closes the batch before the second copy
  CHECK(p.Seal() == 2);
  auto outcome = p.Collect({true, true});
  REQUIRE(outcome);
  CHECK(Lsns(outcome->retired) == std::vector<uint64_t>{100, 200});
  REQUIRE(p.Next() == PipelineStep::Form);
  CHECK(p.Admit(0, Admission::Duplicate, 0));  // the target's dedup row now has it
  CHECK_FALSE(p.Admit(1, Admission::Apply, 1));  // the last candidate: the batch is full
  CHECK(p.Seal() == 2);
}

TEST_CASE("a_commit_answer_commits_its_transaction_or_the_whole_group", "[pipeline]") {
  PipelineLimits grouped_limits;
  grouped_limits.group_transactions = true;
  ApplyPipeline g = Queue(3, grouped_limits);
  CHECK(g.Admit(0, Admission::Apply, 1));
  CHECK(g.Admit(1, Admission::Duplicate, 0));
  CHECK_FALSE(g.Admit(2, Admission::Apply, 1));  // the last candidate
  REQUIRE(g.Seal() == 3);
  REQUIRE(g.grouped());
  std::vector<bool> committed(3, false);
  g.MarkCommitted(2, committed);  // the group's one COMMIT, sent after its last member
  CHECK(committed == std::vector<bool>{true, false, true});  // the duplicate sent nothing

  PipelineLimits single;
  single.group_transactions = false;
  ApplyPipeline p = Queue(2, single);
  CHECK(p.Admit(0, Admission::Apply, 1));
  CHECK_FALSE(p.Admit(1, Admission::Apply, 1));  // the last candidate
  REQUIRE(p.Seal() == 2);
  std::vector<bool> one(2, false);
  p.MarkCommitted(1, one);
  CHECK(one == std::vector<bool>{false, true});
  CHECK_THROWS_AS(p.MarkCommitted(2, one), AssertionFailure);  // not in flight
}

TEST_CASE("rewrites_need_a_group_the_setting_and_the_replica_role_and_the_guard_covers_both", "[pipeline]") {
  for (bool grouped : {false, true})
    for (bool leave : {false, true})
      for (bool merge : {false, true})
        for (bool replica : {false, true}) {
          const GroupRewrites r = PermitGroupRewrites(grouped, leave, merge, replica);
          CHECK(r.leave_out_superseded == (grouped && leave && replica));
          CHECK(r.merge_statements == (grouped && merge && replica));
        }
  CHECK(GuardedRelations({"public.a", "public.c"}, {"public.b", "public.a"}) ==
        std::vector<std::string>{"public.a", "public.b", "public.c"});
  CHECK(GuardedRelations({"public.a"}, {"public.b"}, /*guard_merged=*/false) == std::vector<std::string>{"public.a"});
  CHECK(GuardedRelations({}, {}).empty());
}

TEST_CASE("a_broken_pipeline_rule_is_an_assertion_failure_in_every_build", "[pipeline][assert]") {
  ApplyPipeline p = Queue(2);
  // Admitting out of log order is a bug in the adapter: refused with the rule, never acted on.
  CHECK_THROWS_AS(p.Admit(1, Admission::Apply, 1), AssertionFailure);
  try {
    p.Admit(1, Admission::Apply, 1);
  } catch (const AssertionFailure& e) {
    CHECK(std::string(e.what()).find("candidates are admitted in log order") != std::string::npos);
  }
}

TEST_CASE("batch_bounds_close_it_and_a_transaction_larger_than_a_batch_goes_alone_only_at_the_front",
          "[pipeline]") {
  const PipelineLimits limits{3, 20};
  ApplyPipeline p = Queue(6, limits);
  CHECK(p.Candidates() == 3);  // the transaction bound
  CHECK(p.Admit(0, Admission::Apply, 10));   // 13 statements
  CHECK_FALSE(p.Admit(1, Admission::Apply, 5));  // 13 + 8 > 20: starts the next batch, not alone
  CHECK(p.Seal() == 1);
  CHECK_FALSE(p.alone());
  REQUIRE(p.Collect({true}));
  // 18 + 3 > 20: larger than a whole batch. Behind a duplicate it only closes the batch ...
  CHECK(p.Admit(0, Admission::Duplicate, 0));
  CHECK_FALSE(p.Admit(1, Admission::Apply, 18));
  CHECK(p.Seal() == 1);
  CHECK_FALSE(p.BatchSendsStatements());  // only a duplicate: nothing to send
  REQUIRE(p.Collect({false}));
  // ... and at the front it goes alone.
  CHECK_FALSE(p.Admit(0, Admission::Apply, 18));
  CHECK(p.Seal() == 0);
  CHECK(p.Next() == PipelineStep::Alone);
  CHECK(p.front().ready.tx.commit_lsn == 300);
}

TEST_CASE("failure_in_transaction_k_retires_those_before_it_sends_k_alone_and_requeues_the_rest", "[pipeline]") {
  ApplyPipeline p = Queue(5);
  for (size_t i = 0; i < 5; i++) REQUIRE((p.Admit(i, Admission::Apply, 1) || i == 4));
  REQUIRE(p.Seal() == 5);
  // Transaction 2 failed; the server skipped 3 and 4.
  auto outcome = p.Collect({true, true, false, false, false});
  REQUIRE(outcome);
  CHECK(Lsns(outcome->retired) == std::vector<uint64_t>{100, 200});
  REQUIRE(outcome->failed == std::optional<size_t>(2));
  CHECK(p.Next() == PipelineStep::Alone);
  CHECK(p.front().ready.tx.commit_lsn == 300);
  // The offset passes only what retired, once flushed.
  CHECK(p.DurableOffset(UINT64_MAX) == 2);
  p.RetireAlone();
  CHECK(p.DurableOffset(250) == 2);  // 300 committed alone but not flushed yet
  CHECK(p.DurableOffset(300) == 3);
  CHECK(p.Next() == PipelineStep::Form);
  CHECK(p.size() == 2);  // 400 and 500 re-queued for the next batch
  CHECK(p.at(0).ready.tx.commit_lsn == 400);
}

TEST_CASE("a_grouped_batch_retires_whole_or_not_at_all_and_a_failed_group_goes_again_one_transaction_each",
          "[pipeline]") {
  PipelineLimits limits;
  limits.group_transactions = true;
  ApplyPipeline p = Queue(6, limits);
  for (size_t i = 0; i < 4; i++) REQUIRE(p.Admit(i, i == 1 ? Admission::Duplicate : Admission::Apply, 1));
  CHECK_FALSE(p.Admit(4, Admission::Alone, 0));
  REQUIRE(p.Seal() == 4);
  CHECK(p.grouped());
  // One target transaction: a failure anywhere in it (here the third) and nothing committed.
  auto failed = p.Collect({false, false, false, false});
  REQUIRE(failed);
  CHECK(failed->retired.empty());
  CHECK(failed->failed == std::optional<size_t>(0));
  CHECK(p.Next() == PipelineStep::Form);  // not alone: the same four form per-transaction batches
  CHECK(p.ungrouped_remaining() == 4);
  CHECK(p.DurableOffset(UINT64_MAX) == 0);
  for (size_t i = 0; i < 4; i++) REQUIRE(p.Admit(i, i == 1 ? Admission::Duplicate : Admission::Apply, 1));
  CHECK_FALSE(p.Admit(4, Admission::Alone, 0));
  REQUIRE(p.Seal() == 4);
  CHECK_FALSE(p.grouped());
  auto ungrouped = p.Collect({true, false, false, false});  // the third fails on its own
  REQUIRE(ungrouped);
  CHECK(Lsns(ungrouped->retired) == std::vector<uint64_t>{100, 200});
  CHECK(p.Next() == PipelineStep::Alone);
  CHECK(p.RetireAlone().ready.tx.commit_lsn == 300);
  // The fourth, last of the failed group, still goes ungrouped; grouping resumes after it.
  CHECK(p.Admit(0, Admission::Apply, 1));
  CHECK_FALSE(p.Admit(1, Admission::Alone, 0));
  REQUIRE(p.Seal() == 1);
  CHECK_FALSE(p.grouped());
  REQUIRE(p.Collect({true}));
  CHECK(p.RetireAlone().ready.tx.commit_lsn == 500);
  CHECK(p.ungrouped_remaining() == 0);
  CHECK_FALSE(p.Admit(0, Admission::Apply, 1));  // the last candidate: the batch is full
  REQUIRE(p.Seal() == 1);
  CHECK(p.grouped());
  auto whole = p.Collect({true});
  REQUIRE(whole);
  CHECK(Lsns(whole->retired) == std::vector<uint64_t>{600});
}

// ---- which evidence a batch is formed on (EvidenceFor) ----

namespace {

// A grouped pipeline of whole transactions (each with its envelope) at commit LSNs `lsns`.
ApplyPipeline WholeQueue(const std::vector<uint64_t>& lsns, bool group = true) {
  PipelineLimits limits;
  limits.group_transactions = group;
  ApplyPipeline p(0, limits);
  for (size_t i = 0; i < lsns.size(); i++) {
    ReadyTransaction r = Ready(static_cast<uint32_t>(700 + i), lsns[i]);
    r.envelope = Envelope{};
    p.ReadWhole(std::move(r), i + 1);
  }
  return p;
}

// Forms, seals and collects one batch of every candidate as Apply; returns what retired.
std::vector<uint64_t> ApplyAll(ApplyPipeline& p, bool commit) {
  const size_t n = p.Candidates();
  for (size_t i = 0; i < n; i++) p.Admit(i, Admission::Apply, 1);
  const size_t sent = p.Seal();
  auto outcome = p.Collect(std::vector<bool>(sent, commit));
  REQUIRE(outcome);
  return Lsns(outcome->retired);
}

}  // namespace

TEST_CASE("evidence_is_read_until_the_targets_progress_is_known_then_assumed_only_past_it", "[pipeline][evidence]") {
  ApplyPipeline p = WholeQueue({100, 200});
  // Nothing read yet: the target may hold anything (a rewind after a restart replays duplicates).
  CHECK(p.EvidenceFor() == EvidenceSource::Read);
  p.EvidenceRead(200);  // origin progress 200: both candidates are at or below it
  CHECK(p.known_applied_lsn() == 200);
  CHECK(p.EvidenceFor() == EvidenceSource::Read);
  CHECK(ApplyAll(p, true) == std::vector<uint64_t>{100, 200});  // duplicates, say
  p.ReadWhole([] { ReadyTransaction r = Ready(900, 300); r.envelope = Envelope{}; return r; }(), 3);
  p.ReadWhole([] { ReadyTransaction r = Ready(901, 400); r.envelope = Envelope{}; return r; }(), 4);
  CHECK(p.EvidenceFor() == EvidenceSource::Assumed);
  p.AssumeEvidence();
  CHECK(p.evidence_assumed());
  CHECK(ApplyAll(p, true) == std::vector<uint64_t>{300, 400});
  CHECK_FALSE(p.evidence_assumed());
  // Retiring moves what the target is known to hold: the log repeating 400 is read again.
  CHECK(p.known_applied_lsn() == 400);
  p.ReadWhole([] { ReadyTransaction r = Ready(901, 400); r.envelope = Envelope{}; return r; }(), 5);
  CHECK(p.EvidenceFor() == EvidenceSource::Read);
}

TEST_CASE("evidence_is_read_for_ungrouped_batches_partitioned_transactions_and_lsns_not_increasing",
          "[pipeline][evidence]") {
  {
    ApplyPipeline p = WholeQueue({300, 400}, /*group=*/false);
    p.EvidenceRead(200);
    CHECK(p.EvidenceFor() == EvidenceSource::Read);  // one target transaction each: no single check covers them
  }
  {
    ApplyPipeline p = WholeQueue({300, 400});
    p.EvidenceRead(200);
    ReadyTransaction partitioned = Ready(902, 500);
    partitioned.manifest = Manifest{};
    partitioned.manifest->boundary_mode = BoundaryMode::Partitioned;
    p.ReadWhole(std::move(partitioned), 3);
    CHECK(p.EvidenceFor() == EvidenceSource::Read);  // its staged chunks are read with the evidence
  }
  {
    ApplyPipeline p = WholeQueue({300, 250});
    p.EvidenceRead(200);
    CHECK(p.EvidenceFor() == EvidenceSource::Read);  // not increasing: the log may repeat itself
  }
  {
    ApplyPipeline p(0, [] { PipelineLimits l; l.group_transactions = true; return l; }());
    p.ReadWhole(Ready(700, 300), 1);  // no envelope: a chunked or unmerged partitioned transaction
    p.EvidenceRead(200);
    CHECK(p.EvidenceFor() == EvidenceSource::Read);
  }
}

TEST_CASE("a_refused_assumption_retires_nothing_and_the_same_transactions_go_again_one_each_on_read_evidence",
          "[pipeline][evidence]") {
  ApplyPipeline p = WholeQueue({300, 400, 500});
  p.EvidenceRead(200);
  REQUIRE(p.EvidenceFor() == EvidenceSource::Assumed);
  p.AssumeEvidence();
  // The target's check (TR012) refused the group: nothing committed, nothing retires, the offset stays.
  CHECK(ApplyAll(p, false).empty());
  CHECK(p.DurableOffset(UINT64_MAX) == 0);
  CHECK(p.ungrouped_remaining() == 3);
  CHECK(p.Next() == PipelineStep::Form);
  CHECK(p.EvidenceFor() == EvidenceSource::Read);
  // One target transaction each (the front turns out a duplicate, the rest apply), on read evidence.
  p.EvidenceRead(300);
  CHECK(p.Admit(0, Admission::Duplicate, 0));
  CHECK(p.Admit(1, Admission::Apply, 1));
  CHECK_FALSE(p.Admit(2, Admission::Apply, 1));
  REQUIRE(p.Seal() == 3);
  CHECK_FALSE(p.grouped());
  CHECK_FALSE(p.evidence_assumed());
  auto outcome = p.Collect({false, true, true});
  REQUIRE(outcome);
  CHECK(Lsns(outcome->retired) == std::vector<uint64_t>{300, 400, 500});
  // Assumed again only after a read: the refusal cleared what the pipeline knew was read.
  p.ReadWhole([] { ReadyTransaction r = Ready(903, 600); r.envelope = Envelope{}; return r; }(), 4);
  CHECK(p.EvidenceFor() == EvidenceSource::Assumed);  // the per-transaction batch above read it (EvidenceRead)
}

TEST_CASE("assuming_evidence_where_it_must_be_read_is_an_assertion_failure", "[pipeline][evidence][assert]") {
  ApplyPipeline p = WholeQueue({100, 200});
  CHECK_THROWS_AS(p.AssumeEvidence(), AssertionFailure);  // nothing read yet
  p.EvidenceRead(50);
  p.Admit(0, Admission::Apply, 1);
  CHECK_THROWS_AS(p.EvidenceFor(), AssertionFailure);  // chosen before the first admission only
}

TEST_CASE("a_grouped_batch_reported_partly_committed_is_refused", "[pipeline]") {
  PipelineLimits limits;
  limits.group_transactions = true;
  ApplyPipeline p = Queue(3, limits);
  for (size_t i = 0; i < 3; i++) REQUIRE((p.Admit(i, Admission::Apply, 1) || i == 2));
  REQUIRE(p.Seal() == 3);
  auto outcome = p.Collect({true, false, true});
  REQUIRE_FALSE(outcome);
  CHECK(outcome.error().message.find("one target transaction") != std::string::npos);
}

TEST_CASE("a_commit_reported_after_a_failed_transaction_of_the_batch_is_refused_and_nothing_retires",
          "[pipeline]") {
  ApplyPipeline p = Queue(3);
  for (size_t i = 0; i < 3; i++) p.Admit(i, Admission::Apply, 1);
  REQUIRE(p.Seal() == 3);
  auto outcome = p.Collect({false, true, false});
  REQUIRE_FALSE(outcome);
  CHECK_THAT(outcome.error().message, Catch::Contains("commit 0/C8") && Catch::Contains("commit 0/64") &&
                                          Catch::Contains("nothing of the batch is acknowledged"));
  CHECK(p.DurableOffset(UINT64_MAX) == 0);
  CHECK(p.size() == 3);
}

TEST_CASE("records_after_the_queue_are_finished_only_once_every_transaction_before_them_retired",
          "[pipeline]") {
  ApplyPipeline p(10, {});
  p.ReadNothing(11);  // a progress marker with nothing queued: finished at once
  CHECK(p.DurableOffset(0) == 11);
  p.ReadWhole(Ready(1, 100), 12);
  p.ReadNothing(14);  // markers after it
  CHECK(p.DurableOffset(UINT64_MAX) == 11);
  p.Admit(0, Admission::Apply, 1);
  p.Seal();
  REQUIRE(p.Collect({true}));
  CHECK(p.DurableOffset(99) == 11);
  CHECK(p.DurableOffset(100) == 14);
}

TEST_CASE("offset_never_passes_the_first_frame_of_an_open_chunked_transaction", "[pipeline]") {
  // Chunks of a chunked transaction at offsets 1..3 (open), a whole transaction at 4: its offset
  // is what the barrier retains (1), not 5.
  ApplyPipeline p(0, {});
  p.ReadWhole(Ready(1, 100), 1);  // offset 0
  p.ReadNothing(1);               // chunk at 1 opens it
  p.ReadNothing(1);               // chunk at 2
  p.ReadWhole(Ready(2, 200), 1);  // whole transaction at 4 while the chunked one is open
  p.Admit(0, Admission::Apply, 1);
  p.Admit(1, Admission::Apply, 1);
  p.Seal();
  REQUIRE(p.Collect({true, true}));
  CHECK(p.DurableOffset(UINT64_MAX) == 1);
  // Its marker at 5: applied alone once the queue is empty; then everything below 6 is finished.
  REQUIRE(p.AppliedAlone(6, 300).ok());
  CHECK(p.DurableOffset(299) == 1);
  CHECK(p.DurableOffset(300) == 6);
}

TEST_CASE("a_chunked_transaction_is_refused_while_whole_transactions_are_still_queued", "[pipeline]") {
  ApplyPipeline p = Queue(1);
  auto st = p.AppliedAlone(5, 900);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("drain them first"));
  CHECK(p.DurableOffset(UINT64_MAX) == 0);
}

// ---- the randomized simulation ---------------------------------------------------------------

namespace {

// One transaction of the simulated log, and what the simulated target does with it.
struct SimTx {
  uint64_t lsn = 0;
  uint64_t first_offset = 0;      // its first frame (a chunked transaction's first chunk)
  uint64_t complete_offset = 0;   // the frame that completes it (Envelope, or CommitMarker)
  bool chunked = false;
  bool already_applied = false;   // committed by an earlier run: a duplicate
  bool needs_alone = false;       // a conflict or a quarantine boundary: never batched
  int batch_failures = 0;         // failures in a batch before it commits there
  int alone_failures = 0;         // failures alone (quarantined, then repaired) before it commits
  size_t statements = 0;
};

struct SimRecord {
  enum Kind { Whole, Chunk, Marker, Progress } kind;
  size_t tx = 0;  // index into txs (Whole, Chunk, Marker)
};

struct Sim {
  std::mt19937_64 rng;
  bool defect_retire_failed = false;  // negative control: the adapter retires a failed transaction
  int defect_fired = 0;               // times it retired one that was not on the target
  std::vector<SimTx> txs;
  std::vector<SimRecord> log;
  // The target.
  std::map<uint64_t, int> commits;  // lsn -> how often committed during the run
  std::vector<size_t> commit_order;  // tx index, in commit order
  uint64_t committed_max_lsn = 0;
  uint64_t flushed = 0;
  std::optional<std::string> violation;

  explicit Sim(uint64_t seed) : rng(seed) {}

  uint64_t R(uint64_t n) { return rng() % n; }

  void Generate() {
    const size_t records = 20 + R(400);
    uint64_t lsn = 0;
    std::optional<size_t> open;  // an open chunked transaction
    uint64_t open_chunks = 0;
    for (size_t offset = 0; offset < records; offset++) {
      const uint64_t roll = R(100);
      if (open && (roll < 30 || offset + 1 == records)) {
        if (open_chunks > 0 && R(2)) {  // its marker completes it
          lsn += 1 + R(50);
          txs[*open].lsn = lsn;
          txs[*open].complete_offset = offset;
          log.push_back({SimRecord::Marker, *open});
          open.reset();
        } else {
          log.push_back({SimRecord::Chunk, *open});
          open_chunks++;
        }
        continue;
      }
      if (roll < 8) {
        log.push_back({SimRecord::Progress, 0});
        continue;
      }
      SimTx tx;
      tx.first_offset = offset;
      tx.already_applied = R(10) == 0;
      tx.needs_alone = R(25) == 0;
      tx.batch_failures = R(8) == 0 ? static_cast<int>(1 + R(2)) : 0;
      tx.alone_failures = R(12) == 0 ? static_cast<int>(1 + R(2)) : 0;
      tx.statements = R(30) == 0 ? 900 + R(300) : R(40);
      if (!open && roll < 15) {  // a chunked transaction opens
        tx.chunked = true;
        txs.push_back(tx);
        open = txs.size() - 1;
        open_chunks = 1;
        log.push_back({SimRecord::Chunk, *open});
        continue;
      }
      lsn += 1 + R(50);
      tx.lsn = lsn;
      tx.complete_offset = offset;
      txs.push_back(tx);
      log.push_back({SimRecord::Whole, txs.size() - 1});
    }
    // A chunked transaction still open at the end stays open (the next run applies it).
  }

  void Violation(const std::string& what) {
    if (!violation) violation = what;
  }

  bool OnTarget(const SimTx& tx) const { return tx.already_applied || commits.count(tx.lsn) > 0; }

  void Commit(size_t index) {
    SimTx& tx = txs[index];
    if (++commits[tx.lsn] > 1) Violation("transaction lsn " + std::to_string(tx.lsn) + " committed twice");
    if (!commit_order.empty() && txs[commit_order.back()].first_offset > tx.first_offset && !tx.chunked &&
        !txs[commit_order.back()].chunked)
      Violation("transaction lsn " + std::to_string(tx.lsn) + " committed after a later one");
    commit_order.push_back(index);
    committed_max_lsn = std::max(committed_max_lsn, tx.lsn);
  }

  // The target flushes its WAL late, to some point it has committed.
  void MaybeFlush() {
    if (R(3) == 0 && committed_max_lsn > flushed) flushed += 1 + R(committed_max_lsn - flushed);
  }

  // Every record below the consumer offset must be finished: each transaction that starts below it
  // is durable on the target (committed and flushed, or applied by an earlier run), and no open
  // chunked transaction starts below it.
  void CheckOffset(uint64_t safe, uint64_t flushed_at_ask, size_t read_upto) {
    for (const SimTx& tx : txs) {
      if (tx.first_offset >= safe) continue;
      const bool complete = tx.lsn != 0 && tx.complete_offset < read_upto;
      if (!complete) {
        Violation("consumer offset " + std::to_string(safe) + " passes the first frame " +
                  std::to_string(tx.first_offset) + " of an open chunked transaction");
        return;
      }
      if (tx.already_applied) continue;
      if (commits.count(tx.lsn) == 0 || tx.lsn > flushed_at_ask) {
        Violation("consumer offset " + std::to_string(safe) + " passes transaction lsn " + std::to_string(tx.lsn) +
                  " (first frame " + std::to_string(tx.first_offset) + ") which is not durable on the target");
        return;
      }
    }
  }

  std::map<uint64_t, size_t> by_lsn;

  // The one-at-a-time path: decides, retries (quarantine, repair) until applied.
  void ApplyAlone(size_t index) {
    SimTx& tx = txs[index];
    if (OnTarget(tx)) return;  // SkipDuplicate
    while (tx.alone_failures > 0) tx.alone_failures--;  // quarantined, repaired, replay-ready
    Commit(index);
  }

  // The server executing one pipeline segment: after a failure it skips everything up to the Sync.
  std::vector<bool> Execute(ApplyPipeline& p, size_t count) {
    std::vector<bool> committed(count, false);
    if (p.grouped()) return ExecuteGrouped(p, count);
    bool failed = false;
    for (size_t k = 0; k < count; k++) {
      const PipelineTx& ptx = p.at(k);
      if (ptx.duplicate) continue;
      const size_t index = by_lsn.at(ptx.ready.tx.commit_lsn);
      SimTx& tx = txs[index];
      if (tx.needs_alone) Violation("transaction lsn " + std::to_string(tx.lsn) + " that needs the one-at-a-time path was batched");
      if (failed) continue;  // skipped by the server
      if (OnTarget(tx)) {    // its dedup INSERT fails: the server aborts it
        failed = true;
        continue;
      }
      if (tx.batch_failures > 0) {
        tx.batch_failures--;
        failed = true;
        continue;
      }
      Commit(index);
      committed[k] = true;
    }
    return committed;
  }

  // A grouped batch: one target transaction. A failure anywhere rolls every transaction of it back.
  std::vector<bool> ExecuteGrouped(ApplyPipeline& p, size_t count) {
    std::vector<size_t> members;
    for (size_t k = 0; k < count; k++) {
      const PipelineTx& ptx = p.at(k);
      if (ptx.duplicate) continue;
      const size_t index = by_lsn.at(ptx.ready.tx.commit_lsn);
      SimTx& tx = txs[index];
      if (tx.needs_alone) Violation("transaction lsn " + std::to_string(tx.lsn) + " that needs the one-at-a-time path was batched");
      if (OnTarget(tx)) return std::vector<bool>(count, false);  // its dedup INSERT fails: all roll back
      if (tx.batch_failures > 0) {
        tx.batch_failures--;
        return std::vector<bool>(count, false);
      }
      members.push_back(k);
    }
    std::vector<bool> committed(count, false);
    for (size_t k : members) {
      Commit(by_lsn.at(p.at(k).ready.tx.commit_lsn));
      committed[k] = true;
    }
    grouped_commits++;
    return committed;
  }
  int grouped_commits = 0;

  // Drives the pipeline as the applier's Pump does.
  void Pump(ApplyPipeline& p, bool drain) {
    for (int guard = 0; guard < 100000; guard++) {
      if (p.Next() == PipelineStep::Idle) return;
      if (p.Next() == PipelineStep::Alone) {
        const size_t index = by_lsn.at(p.front().ready.tx.commit_lsn);
        if (!defect_retire_failed)
          ApplyAlone(index);
        else if (!OnTarget(txs[index]))
          defect_fired++;
        p.RetireAlone();
        continue;
      }
      const size_t candidates = p.Candidates();
      for (size_t i = 0; i < candidates; i++) {
        const SimTx& tx = txs[by_lsn.at(p.at(i).ready.tx.commit_lsn)];
        const Admission a = OnTarget(tx) ? Admission::Duplicate
                            : tx.needs_alone ? Admission::Alone
                                             : Admission::Apply;
        if (!p.Admit(i, a, tx.statements)) break;
      }
      const size_t count = p.Seal();
      if (count == 0) continue;
      std::vector<uint64_t> batch;
      for (size_t k = 0; k < count; k++) batch.push_back(p.at(k).ready.tx.commit_lsn);
      const bool grouped = p.grouped();
      const std::vector<bool> committed = Execute(p, count);
      MaybeFlush();
      auto outcome = p.Collect(committed);
      if (!outcome) {
        Violation("Collect refused an honest server's answers: " + outcome.error().message);
        return;
      }
      // Retired: exactly the leading committed-or-duplicate entries, in order.
      for (size_t k = 0; k < outcome->retired.size(); k++)
        if (outcome->retired[k].ready.tx.commit_lsn != batch[k]) Violation("retired out of order");
      if (grouped) {
        // All or nothing: a failed group retires nothing and its transactions go again ungrouped.
        if (outcome->failed && (!outcome->retired.empty() || p.front().ready.tx.commit_lsn != batch[0]))
          Violation("a failed group retired part of itself");
        if (outcome->failed && p.ungrouped_remaining() != count)
          Violation("a failed group's transactions are not formed again one target transaction each");
        if (!outcome->failed && outcome->retired.size() != count) Violation("a committed group did not retire whole");
      } else if (outcome->failed) {
        const size_t k = *outcome->failed;
        if (k != outcome->retired.size()) Violation("the failed transaction is not the first not retired");
        for (size_t j = k; j < count; j++)
          if (committed[j]) Violation("a transaction after a failed one committed in the same batch");
        if (p.front().ready.tx.commit_lsn != batch[k]) Violation("the failed transaction is not next");
      }
      if (!drain && !p.alone()) return;
    }
    Violation("the pipeline made no progress");
  }

  void AskOffset(ApplyPipeline& p, size_t read_upto) {
    MaybeFlush();
    const uint64_t f = flushed;
    CheckOffset(p.DurableOffset(f), f, read_upto);
  }

  // The applier's loop over the log.
  void Run() {
    Generate();
    for (size_t i = 0; i < txs.size(); i++)
      if (txs[i].lsn != 0) by_lsn[txs[i].lsn] = i;
    ApplyPipeline p(0, PipelineLimits{1 + R(20), 30 + R(1000), R(2) == 0});
    std::optional<size_t> open;
    for (size_t offset = 0; offset < log.size() && !violation; offset++) {
      const SimRecord& rec = log[offset];
      if (rec.kind == SimRecord::Chunk && !open) open = rec.tx;
      if (rec.kind == SimRecord::Marker) open.reset();
      // What the barrier retains: the first frame of an open chunked transaction.
      const uint64_t retain = open ? txs[*open].first_offset : offset + 1;
      if (rec.kind == SimRecord::Whole) {
        const SimTx& tx = txs[rec.tx];
        ReadyTransaction r;
        r.tx = TxIdentity{"app", 42, static_cast<uint32_t>(rec.tx), tx.lsn};
        p.ReadWhole(std::move(r), retain);
        if (p.full()) Pump(p, false);
      } else if (rec.kind == SimRecord::Marker) {
        Pump(p, true);
        ApplyAlone(rec.tx);
        if (!p.AppliedAlone(retain, txs[rec.tx].lsn).ok()) Violation("chunked transaction refused after a drain");
      } else {
        p.ReadNothing(retain);
      }
      if (R(4) == 0) AskOffset(p, offset + 1);
    }
    Pump(p, true);
    flushed = committed_max_lsn;
    AskOffset(p, log.size());
    // Exactly once: every complete transaction not applied before is committed once.
    for (const SimTx& tx : txs) {
      if (tx.lsn == 0 || tx.already_applied) continue;
      const auto it = commits.find(tx.lsn);
      if (it == commits.end() || it->second != 1)
        Violation("transaction lsn " + std::to_string(tx.lsn) + " committed " +
                  std::to_string(it == commits.end() ? 0 : it->second) + " times");
    }
  }
};

uint64_t BaseSeed() {
  if (const char* env = std::getenv("TRELLARA_PIPELINE_SEED")) return std::strtoull(env, nullptr, 10);
  return std::random_device{}();
}

}  // namespace

TEST_CASE("a_grouped_batch_counts_begin_registry_check_and_commit_once", "[pipeline]") {
  PipelineLimits limits;
  limits.batch_statements_max = 20;
  // Ungrouped, each transaction of 3 changes costs 3 + 4 statements: two fit in 20.
  ApplyPipeline ungrouped = Queue(6, limits);
  CHECK(ungrouped.Admit(0, Admission::Apply, 3));
  CHECK(ungrouped.Admit(1, Admission::Apply, 3));
  CHECK_FALSE(ungrouped.Admit(2, Admission::Apply, 3));
  CHECK(ungrouped.Seal() == 2);
  // Grouped, the first costs 7 and each further one its 3 changes only (the group's dedup rows are
  // one statement): 7 + 3 + 3 + 3 + 3 = 19.
  limits.group_transactions = true;
  ApplyPipeline grouped = Queue(6, limits);
  for (size_t i = 0; i < 5; i++) CHECK(grouped.Admit(i, Admission::Apply, 3));
  CHECK_FALSE(grouped.Admit(5, Admission::Apply, 3));
  CHECK(grouped.Seal() == 5);
  CHECK(grouped.grouped());
  // A transaction that does not fit a batch on its own still goes alone at the front, grouped or not.
  ApplyPipeline large = Queue(2, limits);
  CHECK_FALSE(large.Admit(0, Admission::Apply, 17));
  CHECK(large.Seal() == 0);
  CHECK(large.Next() == PipelineStep::Alone);
}

namespace {

// Plans of public.orders (id key; note, amount, doc) as the applier makes them.
ChangePlan OrdersPlan(Op op, const std::string& id, const std::string& note, bool doc_unchanged = false,
                      std::optional<std::string> old_id = std::nullopt) {
  Change c;
  c.op = op;
  c.relation_oid = 16384;
  if (op == Op::Delete) {
    c.old_image = OldImage::Key;
    c.old_tuple = {Value::Text(id)};
  } else {
    c.new_tuple = {Value::Text(id), Value::Text(note), Value::Text("1.00"),
                   doc_unchanged ? Value::UnchangedToast() : Value::Text("doc")};
  }
  if (old_id) {
    c.old_image = OldImage::Key;
    c.old_tuple = {Value::Text(*old_id)};
  }
  auto plan = PlanChange(c, {testing::SampleOrders(), testing::SampleLineItems()});
  REQUIRE(plan);
  return *plan;
}

ChangePlan LineItemsInsert(const std::string& order) {
  Change c;
  c.op = Op::Insert;
  c.relation_oid = 16400;
  c.new_tuple = {Value::Text(order), Value::Text("1"), Value::Text("5")};
  auto plan = PlanChange(c, {testing::SampleOrders(), testing::SampleLineItems()});
  REQUIRE(plan);
  return *plan;
}

ChangePlan TruncateLineItems() {
  Change c;
  c.op = Op::Truncate;
  c.truncate = TruncateInfo{{16400}, false, false};
  auto plan = PlanChange(c, {testing::SampleOrders(), testing::SampleLineItems()});
  REQUIRE(plan);
  return *plan;
}

SupersededUpdates Superseded(const std::vector<std::vector<ChangePlan>>& group, const std::set<std::string>& refused = {}) {
  std::vector<const std::vector<ChangePlan>*> pointers;
  for (const auto& tx : group) pointers.push_back(&tx);
  return FindSupersededUpdates(pointers, refused);
}

}  // namespace

TEST_CASE("superseded_updates_a_chain_of_key_preserving_updates_of_one_row_keeps_only_the_last", "[pipeline]") {
  const auto u1a = OrdersPlan(Op::Update, "1", "a");
  CHECK(u1a.row_key == OrdersPlan(Op::Update, "1", "other").row_key);
  CHECK(u1a.row_key != OrdersPlan(Op::Update, "11", "a").row_key);
  CHECK(u1a.target_relation == "\"public\".\"orders\"");
  const auto found = Superseded({{u1a, OrdersPlan(Op::Update, "2", "x")},
                                 {OrdersPlan(Op::Update, "1", "b")},
                                 {},  // a duplicate of the group: nothing planned
                                 {OrdersPlan(Op::Update, "1", "c"), OrdersPlan(Op::Update, "2", "y")}});
  CHECK(found.count == 3);
  CHECK(found.superseded == std::vector<std::vector<bool>>{{true, true}, {true}, {}, {false, false}});
  CHECK(found.relations == std::vector<std::string>{"\"public\".\"orders\""});
  // Writes of another relation in between change nothing for this one; the guard then covers
  // every relation the group writes.
  const auto across = Superseded({{OrdersPlan(Op::Update, "1", "a"), LineItemsInsert("1")}, {OrdersPlan(Op::Update, "1", "b")}});
  CHECK(across.superseded == std::vector<std::vector<bool>>{{true, false}, {false}});
  CHECK(across.relations == std::vector<std::string>{"\"Sales\".\"line \"\"items\"\"\"", "\"public\".\"orders\""});
  // Nothing superseded: no guard, no relations.
  CHECK(Superseded({{OrdersPlan(Op::Update, "1", "a"), LineItemsInsert("1")}}).relations.empty());
}

TEST_CASE("superseded_updates_never_across_a_write_of_a_relation_whose_target_fires_triggers", "[pipeline]") {
  // A trigger of line_items enabled ALWAYS on the target may read orders: the UPDATE of order 1
  // before the line_items INSERT must be on the target when it fires, so it is not left out.
  const std::set<std::string> refused = {"\"Sales\".\"line \"\"items\"\"\""};
  const auto found = Superseded({{OrdersPlan(Op::Update, "1", "a"), LineItemsInsert("1")}, {OrdersPlan(Op::Update, "1", "b")}},
                                refused);
  CHECK(found.count == 0);
  CHECK(found.superseded == std::vector<std::vector<bool>>{{false, false}, {false}});
  // After that write, a chain without one in between is still compacted.
  const auto after = Superseded({{OrdersPlan(Op::Update, "1", "a"), LineItemsInsert("1")},
                                 {OrdersPlan(Op::Update, "1", "b")}, {OrdersPlan(Op::Update, "1", "c")}},
                                refused);
  CHECK(after.superseded == std::vector<std::vector<bool>>{{false, false}, {true}, {false}});
  // The guard names only what lies between a left-out UPDATE and the one that supersedes it: never
  // the refused relation (the same group is not refused again for it).
  CHECK(after.relations == std::vector<std::string>{"\"public\".\"orders\""});
}

TEST_CASE("superseded_updates_guard_only_relations_written_between_a_left_out_update_and_its_successor",
          "[pipeline]") {
  const std::string orders = "\"public\".\"orders\"", items = "\"Sales\".\"line \"\"items\"\"\"";
  // line_items written before the chain and after it: no trigger of it can see the left-out UPDATE.
  const auto outside = Superseded({{LineItemsInsert("1"), OrdersPlan(Op::Update, "1", "a")},
                                   {OrdersPlan(Op::Update, "1", "b"), LineItemsInsert("2")}});
  CHECK(outside.count == 1);
  CHECK(outside.relations == std::vector<std::string>{orders});
  // Written inside the chain (between the superseded UPDATE and its successor): guarded.
  const auto inside = Superseded({{OrdersPlan(Op::Update, "1", "a")}, {LineItemsInsert("2")},
                                  {OrdersPlan(Op::Update, "1", "b")}});
  CHECK(inside.count == 1);
  CHECK(inside.relations == std::vector<std::string>{items, orders});
  // The guard's refusal names positions in that list; learned once, never again.
  std::set<std::string> refused;
  CHECK(LearnRefusedRelations("1", inside.relations, refused) == 1);
  CHECK(refused == std::set<std::string>{items});
  CHECK(LearnRefusedRelations("1", inside.relations, refused) == 0);
  CHECK(LearnRefusedRelations("2,1", inside.relations, refused) == 1);
  CHECK(refused.size() == 2);
  // A DETAIL naming nothing readable refuses every guarded relation.
  std::set<std::string> fallback;
  CHECK(LearnRefusedRelations("", inside.relations, fallback) == 2);
  std::set<std::string> junk;
  CHECK(LearnRefusedRelations("x,0,3,-1, 2", inside.relations, junk) == 2);
}

TEST_CASE("superseded_updates_never_across_another_write_of_the_relation_a_truncate_or_other_columns", "[pipeline]") {
  const std::vector<ChangePlan> barriers = {
      OrdersPlan(Op::Insert, "5", "new"),                           // the set of rows changes
      OrdersPlan(Op::Delete, "7", ""),                              //
      OrdersPlan(Op::Update, "4", "moved", false, std::string("3")),  // a key-changing UPDATE
      TruncateLineItems(),                                          // any TRUNCATE
  };
  CHECK(barriers[2].row_key.empty());
  for (const ChangePlan& barrier : barriers) {
    INFO(barrier.sql);
    const auto found = Superseded({{OrdersPlan(Op::Update, "1", "a")}, {barrier}, {OrdersPlan(Op::Update, "1", "b")}});
    CHECK(found.count == 0);
  }
  // Another SET list (the later one leaves the TOASTed doc unchanged): the earlier one assigned doc.
  CHECK(Superseded({{OrdersPlan(Op::Update, "1", "a")}, {OrdersPlan(Op::Update, "1", "b", true)}}).count == 0);
  // Once the shape matches again, the chain resumes from the last UPDATE.
  const auto resumed = Superseded({{OrdersPlan(Op::Update, "1", "a")}, {OrdersPlan(Op::Update, "1", "b", true)},
                                   {OrdersPlan(Op::Update, "1", "c", true)}});
  CHECK(resumed.superseded == std::vector<std::vector<bool>>{{false}, {true}, {false}});
  // A relation whose target fires triggers for replicated UPDATEs: every UPDATE is sent.
  CHECK(Superseded({{OrdersPlan(Op::Update, "1", "a")}, {OrdersPlan(Op::Update, "1", "b")}},
                   {"\"public\".\"orders\""}).count == 0);
}

TEST_CASE("pipeline_keeps_exactly_once_order_and_offset_rules_under_random_failures_and_late_flushes",
          "[pipeline]") {
  const uint64_t base = BaseSeed();
  const bool single = std::getenv("TRELLARA_PIPELINE_SEED") != nullptr;
  const int runs = single ? 1 : 400;
  WARN("pipeline simulation base seed " << base << " (" << runs << " runs; reproduce one with "
       "TRELLARA_PIPELINE_SEED=<seed> build/bin/trellara_tests '[pipeline]')");
  for (int run = 0; run < runs; run++) {
    const uint64_t seed = base + static_cast<uint64_t>(run);
    Sim sim(seed);
    sim.Run();
    INFO("seed " << seed << ": " << sim.txs.size() << " transactions, " << sim.log.size() << " records");
    REQUIRE(sim.violation.value_or("") == "");
  }
}

TEST_CASE("negative_control_the_simulation_catches_an_adapter_that_retires_a_failed_transaction",
          "[pipeline]") {
  // The same simulation, with the adapter retiring a transaction that failed in its batch without
  // applying it alone: the checks must see a consumer offset past it, or it never committed.
  const uint64_t base = BaseSeed();
  WARN("negative control base seed " << base);
  int caught = 0, fired = 0;
  for (int run = 0; run < 100; run++) {
    Sim sim(base + static_cast<uint64_t>(run));
    sim.defect_retire_failed = true;
    sim.Run();
    if (sim.defect_fired == 0) continue;  // no transaction went alone in this run
    fired++;
    if (sim.violation) caught++;
  }
  INFO(caught << " of " << fired << " runs where the defect fired caught it");
  CHECK(fired > 30);
  CHECK(caught == fired);
}

// ---- merged statements in a grouped batch ----------------------------------------------

namespace {

// The statements MergeGroupStatements sends, as "S1.0" (a single plan: transaction.plan),
// "I[0.0 1.0]" (a merged INSERT) and "U[..]" (a merged UPDATE), in order.
std::string Merged(const std::vector<std::vector<ChangePlan>>& group, const std::set<std::string>& shapes = {},
                   const std::set<std::string>& refused = {}, const std::vector<std::vector<bool>>& superseded = {},
                   MergeLimits limits = {}, GroupStatements* out = nullptr) {
  std::vector<const std::vector<ChangePlan>*> pointers;
  for (const auto& tx : group) pointers.push_back(&tx);
  GroupStatements merged = MergeGroupStatements(pointers, superseded, refused, shapes, limits);
  std::string text;
  size_t sent = 0;
  for (const GroupStatement& statement : merged.statements) {
    if (!text.empty()) text += ' ';
    const auto ref = [](const PlanRef& r) { return std::to_string(r.tx) + "." + std::to_string(r.plan); };
    if (statement.kind == GroupStatementKind::Single) {
      REQUIRE(statement.plans.size() == 1);
      text += "S" + ref(statement.plans[0]);
    } else {
      text += statement.kind == GroupStatementKind::InsertRows ? "I[" : "U[";
      for (size_t i = 0; i < statement.plans.size(); i++) text += (i > 0 ? " " : "") + ref(statement.plans[i]);
      text += "]";
    }
    sent += statement.plans.size();
  }
  // Every plan sent is sent once; merged counts the plans inside merged statements.
  size_t merged_plans = 0;
  for (const GroupStatement& statement : merged.statements)
    if (statement.kind != GroupStatementKind::Single) merged_plans += statement.plans.size();
  CHECK(merged.merged == merged_plans);
  if (out != nullptr) *out = merged;
  return text;
}

const std::string kOrders = "\"public\".\"orders\"";
const std::string kItems = "\"Sales\".\"line \"\"items\"\"\"";

}  // namespace

TEST_CASE("merged_statements_a_relations_inserts_across_transactions_are_one_statement_sent_where_the_run_ends",
          "[pipeline][merge]") {
  const ChangePlan u1 = OrdersPlan(Op::Update, "1", "a"), u2 = OrdersPlan(Op::Update, "2", "b");
  GroupStatements out;
  // line_items INSERTs of three transactions, orders UPDATEs between them: the INSERTs go as one
  // statement at the end of the group; the UPDATEs (their shape not accepted) one by one, in order.
  CHECK(Merged({{LineItemsInsert("1"), u1}, {LineItemsInsert("2"), u2}, {LineItemsInsert("3")}}, {}, {}, {}, {}, &out) ==
        "S0.1 S1.1 I[0.0 1.0 2.0]");
  CHECK(out.merged == 3);
  // The order between the two relations changed: both are guarded.
  CHECK(out.relations == std::vector<std::string>{kItems, kOrders});
  // With the UPDATE shape accepted (and runs of two allowed), the UPDATEs merge too; the runs ending
  // together go in the order of their first members.
  MergeLimits two;
  two.update_rows_min = 2;
  CHECK(Merged({{LineItemsInsert("1"), u1}, {LineItemsInsert("2"), u2}}, {u1.statement_key}, {}, {}, two) ==
        "I[0.0 1.0] U[0.1 1.1]");
  // The default needs 8 UPDATEs for a merged UPDATE: shorter runs stay where they are.
  CHECK(Merged({{LineItemsInsert("1"), u1}, {LineItemsInsert("2"), u2}}, {u1.statement_key}) == "S0.1 S1.1 I[0.0 1.0]");
  // One INSERT alone is not merged, and nothing is reordered, so nothing is guarded.
  CHECK(Merged({{LineItemsInsert("1"), u1}, {u2}}, {}, {}, {}, {}, &out) == "S0.0 S0.1 S1.0");
  CHECK(out.merged == 0);
  CHECK(out.relations.empty());
}

TEST_CASE("merged_statements_keep_each_relations_writes_in_order", "[pipeline][merge]") {
  MergeLimits two;
  two.update_rows_min = 2;
  const ChangePlan u1 = OrdersPlan(Op::Update, "1", "a");
  const std::set<std::string> shapes = {u1.statement_key};
  // An orders write that cannot join the INSERT run (a DELETE) ends it: the run is sent before it.
  CHECK(Merged({{OrdersPlan(Op::Insert, "5", "n"), LineItemsInsert("1")},
                {OrdersPlan(Op::Insert, "6", "n"), OrdersPlan(Op::Delete, "5", ""), LineItemsInsert("2")},
                {OrdersPlan(Op::Insert, "7", "n")}},
               shapes, {}, {}, two) == "I[0.0 1.0] S1.1 S2.0 I[0.1 1.2]");
  // An UPDATE of a row the run already changes starts a new run (a merged UPDATE changes each row
  // once, in no particular order); so does an UPDATE of another shape.
  CHECK(Merged({{u1, OrdersPlan(Op::Update, "2", "b")}, {OrdersPlan(Op::Update, "1", "c"), OrdersPlan(Op::Update, "3", "d")}},
               shapes, {}, {}, two) == "U[0.0 0.1] U[1.0 1.1]");
  CHECK(Merged({{u1, OrdersPlan(Op::Update, "2", "b", true), OrdersPlan(Op::Update, "3", "c")}}, shapes, {}, {}, two) ==
        "S0.0 S0.1 S0.2");
  // INSERTs and UPDATEs of one relation never share a run.
  CHECK(Merged({{OrdersPlan(Op::Insert, "5", "n"), OrdersPlan(Op::Insert, "6", "n"), u1, OrdersPlan(Op::Update, "2", "b")}},
               shapes, {}, {}, two) == "I[0.0 0.1] U[0.2 0.3]");
  // A key-changing UPDATE is no member of an UPDATE run and ends the one before it.
  CHECK(Merged({{u1, OrdersPlan(Op::Update, "2", "b"), OrdersPlan(Op::Update, "4", "m", false, std::string("3")),
                 OrdersPlan(Op::Update, "5", "c")}},
               shapes, {}, {}, two) == "U[0.0 0.1] S0.2 S0.3");
}

TEST_CASE("merged_statements_never_across_a_truncate_or_a_write_of_a_refused_relation", "[pipeline][merge]") {
  // A TRUNCATE (of anything) sends every open run before it.
  GroupStatements out;
  CHECK(Merged({{OrdersPlan(Op::Insert, "5", "n"), LineItemsInsert("1")}, {OrdersPlan(Op::Insert, "6", "n")},
                {TruncateLineItems()}, {OrdersPlan(Op::Insert, "7", "n"), OrdersPlan(Op::Insert, "8", "n")}},
               {}, {}, {}, {}, &out) == "S0.1 I[0.0 1.0] S2.0 I[3.0 3.1]");
  CHECK(out.relations == std::vector<std::string>{kItems, kOrders});
  // line_items' target fires triggers for replicated changes: its INSERTs are sent one by one, in
  // place, and nothing of another relation moves across one of them.
  CHECK(Merged({{OrdersPlan(Op::Insert, "5", "n"), LineItemsInsert("1")}, {OrdersPlan(Op::Insert, "6", "n")},
                {LineItemsInsert("2"), OrdersPlan(Op::Insert, "7", "n")}},
               {}, {kItems}, {}, {}, &out) == "S0.0 S0.1 S1.0 S2.0 S2.1");
  CHECK(out.relations.empty());
  CHECK(Merged({{OrdersPlan(Op::Insert, "5", "n")}, {OrdersPlan(Op::Insert, "6", "n"), LineItemsInsert("1")},
                {OrdersPlan(Op::Insert, "7", "n"), OrdersPlan(Op::Insert, "8", "n")}},
               {}, {kItems}, {}, {}, &out) == "I[0.0 1.0] S1.1 I[2.0 2.1]");
  // The guard never names the refused relation (the same group is not refused again for it).
  CHECK(out.relations == std::vector<std::string>{kOrders});
}

TEST_CASE("merged_statements_leave_out_superseded_plans_and_end_a_full_run_after_its_last_member",
          "[pipeline][merge]") {
  // A superseded UPDATE is not sent at all.
  MergeLimits two;
  two.update_rows_min = 2;
  const ChangePlan u1 = OrdersPlan(Op::Update, "1", "a");
  CHECK(Merged({{u1, OrdersPlan(Op::Update, "2", "b")}, {OrdersPlan(Op::Update, "1", "c")}}, {u1.statement_key}, {},
               {{true, false}, {false}}, two) == "U[0.1 1.0]");
  // rows_max: a full run is sent right after its last member; the next one starts after it.
  MergeLimits small;
  small.rows_max = 2;
  CHECK(Merged({{OrdersPlan(Op::Insert, "5", "n"), OrdersPlan(Op::Insert, "6", "n"), OrdersPlan(Op::Insert, "7", "n"),
                 LineItemsInsert("1")}},
               {}, {}, {}, small) == "I[0.0 0.1] S0.2 S0.3");
  // params_max: a run stops before it would bind more values than one statement may.
  MergeLimits values;
  values.params_max = 9;  // an orders INSERT binds 4
  CHECK(Merged({{OrdersPlan(Op::Insert, "5", "n"), OrdersPlan(Op::Insert, "6", "n"), OrdersPlan(Op::Insert, "7", "n"),
                 OrdersPlan(Op::Insert, "8", "n")}},
               {}, {}, {}, values) == "I[0.0 0.1] I[0.2 0.3]");
  // bytes_max: a run stops before its values would pass it (an orders INSERT of id "5", note "n"
  // binds 1 + 1 + 4 + 3 = 9 bytes), and a plan larger than it alone is sent on its own, in place,
  // after the run before it.
  MergeLimits bytes;
  bytes.bytes_max = 20;
  CHECK(PlanParamBytes(OrdersPlan(Op::Insert, "5", "n")) == 9);
  CHECK(Merged({{OrdersPlan(Op::Insert, "5", "n"), OrdersPlan(Op::Insert, "6", "n"), OrdersPlan(Op::Insert, "7", "n"),
                 OrdersPlan(Op::Insert, "8", "n")}},
               {}, {}, {}, bytes) == "I[0.0 0.1] I[0.2 0.3]");
  CHECK(Merged({{OrdersPlan(Op::Insert, "5", "n"), OrdersPlan(Op::Insert, "6", "n"),
                 OrdersPlan(Op::Insert, "7", std::string(40, 'x')), OrdersPlan(Op::Insert, "8", "n"),
                 OrdersPlan(Op::Insert, "9", "n")}},
               {}, {}, {}, bytes) == "I[0.0 0.1] S0.2 I[0.3 0.4]");
}

TEST_CASE("merge_update_candidates_are_the_shapes_with_enough_sendable_key_preserving_updates",
          "[pipeline][merge]") {
  MergeLimits three;
  three.update_rows_min = 3;
  const std::vector<std::vector<ChangePlan>> group = {
      {OrdersPlan(Op::Update, "1", "a"), OrdersPlan(Op::Update, "2", "b")},
      {OrdersPlan(Op::Update, "3", "c"), OrdersPlan(Op::Update, "4", "d", true)},
      {OrdersPlan(Op::Update, "6", "m", false, std::string("5")), OrdersPlan(Op::Insert, "7", "n")}};
  std::vector<const std::vector<ChangePlan>*> pointers;
  for (const auto& tx : group) pointers.push_back(&tx);
  // Three UPDATEs of one shape: a candidate, described by its first plan. The unchanged-TOAST UPDATE
  // is another shape (one member), the key-changing UPDATE and the INSERT are no members.
  auto candidates = MergeUpdateCandidates(pointers, {}, {}, three);
  REQUIRE(candidates.size() == 1);
  CHECK(candidates[0].first == group[0][0].statement_key);
  CHECK(candidates[0].second == &group[0][0]);
  // A superseded UPDATE is not sent, so it does not count; nor does a refused relation's.
  CHECK(MergeUpdateCandidates(pointers, {{true, false}, {false, false}, {false, false}}, {}, three).empty());
  CHECK(MergeUpdateCandidates(pointers, {}, {group[0][0].target_relation}, three).empty());
  // Nor an UPDATE whose values alone pass bytes_max (it is never merged).
  MergeLimits small = three;
  small.bytes_max = 8;
  CHECK(MergeUpdateCandidates(pointers, {}, {}, small).empty());
}

TEST_CASE("merged_insert_binds_every_rows_values_in_order_and_checks_the_inserted_count", "[pipeline][merge]") {
  const ChangePlan a = OrdersPlan(Op::Insert, "5", "x\"y"), b = OrdersPlan(Op::Insert, "6", "n");
  auto merged = MergedInsertSql({&a, &b});
  REQUIRE(merged);
  CHECK(merged->sql ==
        "WITH trellara_rows AS (INSERT INTO \"public\".\"orders\" (\"id\", \"note\", \"amount\", \"doc\") OVERRIDING "
        "SYSTEM VALUE VALUES ($1, $2, $3, $4), ($5, $6, $7, $8) RETURNING 1) SELECT CASE WHEN count(*) = 2 THEN NULL "
        "ELSE trellara.require_rows(count(*), 2) END FROM trellara_rows");
  REQUIRE(merged->params.size() == 8);
  CHECK(merged->params[0] == std::optional<std::string>("5"));
  CHECK(merged->params[1] == std::optional<std::string>("x\"y"));
  CHECK(merged->params[4] == std::optional<std::string>("6"));
  // Another shape, or not an INSERT: refused, never merged.
  const ChangePlan item = LineItemsInsert("1"), update = OrdersPlan(Op::Update, "1", "a");
  CHECK_FALSE(MergedInsertSql({&a, &item}));
  CHECK_FALSE(MergedInsertSql({&a, &update}));
  CHECK_FALSE(MergedInsertSql({}));
}

}  // namespace unit_apply_pipeline_test
