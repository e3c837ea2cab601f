// apply_decision_test.cpp — exactly-once decisions at the decision level: apply once, skip the
// same transaction, quarantine a different one at the same boundary, wait while quarantined,
// missing dedup evidence; quarantine messages; replay-ready only for the exact boundary.
// A tiny in-memory target stands in for Postgres: it commits changes, dedup row and checkpoint
// together, as the libpq applier must. These tests must not need a database.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>

#include "trellara/apply/apply_decision.h"
#include "trellara/base/fault.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_apply_decision_test {

using namespace trellara;

namespace {

Sha256 Sum(uint8_t b) {
  Sha256 s{};
  s.fill(b);
  return s;
}

TxIdentity Tx(uint32_t xid, uint64_t lsn) { return TxIdentity{"app", 42, xid, lsn}; }

// The target as the applier sees it: dedup rows, checkpoint, applied effects, quarantine.
struct FakeTarget {
  std::map<uint64_t, DedupRow> dedup;
  uint64_t checkpoint = 0;
  std::map<uint64_t, int> applied_times;  // commit_lsn -> how often its changes were committed
  std::map<uint64_t, QuarantineState> quarantine;

  TargetEvidence Evidence(const TxIdentity& tx) const {
    TargetEvidence e;
    if (auto it = dedup.find(tx.commit_lsn); it != dedup.end()) e.dedup = it->second;
    e.checkpoint_lsn = checkpoint;
    if (auto it = quarantine.find(tx.commit_lsn); it != quarantine.end()) e.quarantine = it->second;
    return e;
  }
  // One target transaction: changes + dedup row + checkpoint, all or nothing.
  void Commit(const TxIdentity& tx, const Sha256& sum) {
    applied_times[tx.commit_lsn]++;
    dedup[tx.commit_lsn] = DedupRow{tx.origin_sysid, tx.xid, sum};
    checkpoint = CheckpointAfter(checkpoint, tx.commit_lsn);
    if (quarantine.count(tx.commit_lsn)) quarantine[tx.commit_lsn] = QuarantineState::Resolved;
  }
};

struct Counts {
  int applied = 0, skipped = 0, quarantined = 0, waiting = 0;
};

// Drives the decisions over a log the way the applier loop does; halts at a quarantine.
Counts Drive(FakeTarget& target, const std::vector<std::pair<TxIdentity, Sha256>>& log, bool crash_before_commit_at_2 = false) {
  Counts n;
  for (const auto& [tx, sum] : log) {
    ApplyDecision d = DecideApply(tx, sum, target.Evidence(tx));
    switch (d.action) {
      case ApplyAction::Apply:
        if (crash_before_commit_at_2 && tx.xid == 2) {
          crash_before_commit_at_2 = false;  // crash: nothing of the transaction is visible
          return n;
        }
        target.Commit(tx, sum);
        n.applied++;
        break;
      case ApplyAction::SkipDuplicate: n.skipped++; break;
      case ApplyAction::QuarantineConflict:
        target.quarantine[tx.commit_lsn] = QuarantineState::Quarantined;
        n.quarantined++;
        return n;  // halt at that transaction
      case ApplyAction::WaitReplayReady: n.waiting++; return n;
    }
  }
  return n;
}

}  // namespace

TEST_CASE("applies_transaction_once_and_records_checkpoint", "[decision][seed000]") {
  FakeTarget target;
  std::vector<std::pair<TxIdentity, Sha256>> log = {{Tx(1, 0x100), Sum(1)}, {Tx(2, 0x200), Sum(2)}, {Tx(3, 0x300), Sum(3)}};
  // First run crashes before committing transaction 2: 1 applied, checkpoint at 1.
  Counts first = Drive(target, log, /*crash_before_commit_at_2=*/true);
  CHECK(first.applied == 1);
  CHECK(target.checkpoint == 0x100);
  CHECK(target.dedup.size() == 1);
  // Replay from the start of the log (the consumer offset did not move): 1 is skipped, 2 and 3 apply.
  Counts second = Drive(target, log);
  CHECK(second.skipped == 1);
  CHECK(second.applied == 2);
  // And a third replay (ack lost after apply) applies nothing.
  Counts third = Drive(target, log);
  CHECK(third.skipped == 3);
  CHECK(third.applied == 0);
  CHECK(target.checkpoint == 0x300);
  for (const auto& [lsn, times] : target.applied_times) CHECK(times == 1);
  CHECK(target.applied_times.size() == 3);
}

TEST_CASE("conflicting_duplicate_is_quarantined_not_skipped", "[decision]") {
  FakeTarget target;
  target.Commit(Tx(7421, 0x3A1F2B0), Sum(1));
  ApplyDecision d = DecideApply(Tx(7421, 0x3A1F2B0), Sum(2), target.Evidence(Tx(7421, 0x3A1F2B0)));
  CHECK(d.action == ApplyAction::QuarantineConflict);
  CHECK(d.cause.reason == QuarantineReason::ChecksumConflict);
  CHECK_THAT(d.reason, Catch::Contains("checksum 0101") && Catch::Contains("this log: 0202"));
  // Different xid or origin at the same boundary is a conflict too, whatever the checksum.
  CHECK(DecideApply(Tx(7422, 0x3A1F2B0), Sum(1), target.Evidence(Tx(7422, 0x3A1F2B0))).action ==
        ApplyAction::QuarantineConflict);
  TxIdentity other_origin = Tx(7421, 0x3A1F2B0);
  other_origin.origin_sysid = 43;
  ApplyDecision o = DecideApply(other_origin, Sum(1), target.Evidence(other_origin));
  CHECK(o.action == ApplyAction::QuarantineConflict);
  CHECK_THAT(o.reason, Catch::Contains("origin system 42"));

  // Nothing moved: the checkpoint and dedup row are as before, and the loop halts there.
  FakeTarget t2;
  // A first history committed a different transaction 2 at 0/200 ...
  REQUIRE(Drive(t2, {{Tx(1, 0x100), Sum(1)}, {Tx(2, 0x200), Sum(9)}}).applied == 2);
  // ... and this log holds another one at the same boundary.
  std::vector<std::pair<TxIdentity, Sha256>> log = {{Tx(1, 0x100), Sum(1)}, {Tx(2, 0x200), Sum(2)}, {Tx(3, 0x300), Sum(3)}};
  Counts n = Drive(t2, log);
  CHECK(n.skipped == 1);
  CHECK(n.applied == 0);
  CHECK(n.quarantined == 1);
  CHECK(t2.checkpoint == 0x200);  // not moved by the quarantine
  CHECK(t2.dedup.at(0x200).checksum == Sum(9));
  CHECK(t2.applied_times.at(0x200) == 1);
  CHECK(t2.applied_times.count(0x300) == 0);  // nothing after the quarantined transaction
  // While quarantined the applier waits, even for the same checksum replayed.
  CHECK(DecideApply(Tx(2, 0x200), Sum(2), t2.Evidence(Tx(2, 0x200))).action == ApplyAction::WaitReplayReady);
  // Replay-ready does not override a conflict while the conflicting dedup row is still there.
  t2.quarantine[0x200] = QuarantineState::ReplayReady;
  CHECK(DecideApply(Tx(2, 0x200), Sum(2), t2.Evidence(Tx(2, 0x200))).action == ApplyAction::QuarantineConflict);
  // After the operator deletes that row (the documented remedy), replay-ready applies it.
  t2.dedup.erase(0x200);
  CHECK(DecideApply(Tx(2, 0x200), Sum(2), t2.Evidence(Tx(2, 0x200))).action == ApplyAction::Apply);
}

TEST_CASE("quarantined_transaction_waits_then_applies_after_replay_ready", "[decision]") {
  FakeTarget target;
  target.checkpoint = 0x100;
  target.quarantine[0x200] = QuarantineState::Quarantined;
  ApplyDecision wait = DecideApply(Tx(2, 0x200), Sum(2), target.Evidence(Tx(2, 0x200)));
  CHECK(wait.action == ApplyAction::WaitReplayReady);
  CHECK_THAT(wait.reason, Catch::Contains("SELECT trellara.quarantine_replay_ready(2, '0/200')"));
  target.quarantine[0x200] = QuarantineState::ReplayReady;
  ApplyDecision go = DecideApply(Tx(2, 0x200), Sum(2), target.Evidence(Tx(2, 0x200)));
  CHECK(go.action == ApplyAction::Apply);
  target.Commit(Tx(2, 0x200), Sum(2));
  CHECK(target.quarantine[0x200] == QuarantineState::Resolved);
  CHECK(DecideApply(Tx(2, 0x200), Sum(2), target.Evidence(Tx(2, 0x200))).action == ApplyAction::SkipDuplicate);
}

TEST_CASE("commit_at_or_below_checkpoint_without_dedup_row_fails_closed", "[decision]") {
  TargetEvidence e;
  e.checkpoint_lsn = 0x500;
  ApplyDecision d = DecideApply(Tx(3, 0x300), Sum(3), e);
  CHECK(d.action == ApplyAction::QuarantineConflict);
  CHECK(d.cause.reason == QuarantineReason::MissingDedupEvidence);
  CHECK_THAT(d.reason, Catch::Contains("checkpoint 0/500") && Catch::Contains("no dedup row"));
  CHECK(DecideApply(Tx(5, 0x500), Sum(3), e).action == ApplyAction::QuarantineConflict);  // equal counts as applied
  CHECK(DecideApply(Tx(6, 0x501), Sum(3), e).action == ApplyAction::Apply);
  SECTION("rows pruned on purpose below a watermark: the checkpoint is the evidence") {
    e.dedup_pruned_below_lsn = 0x400;
    CHECK(DecideApply(Tx(3, 0x300), Sum(3), e).action == ApplyAction::SkipDuplicate);
    CHECK(DecideApply(Tx(4, 0x450), Sum(3), e).action == ApplyAction::QuarantineConflict);
  }
  SECTION("the operator established it is not applied") {
    e.quarantine = QuarantineState::ReplayReady;
    CHECK(DecideApply(Tx(3, 0x300), Sum(3), e).action == ApplyAction::Apply);
    CHECK(CheckpointAfter(0x500, 0x300) == 0x500);  // and the checkpoint does not move back
  }
}

TEST_CASE("quarantine_messages_name_the_boundary_the_cause_and_the_next_step", "[decision]") {
  QuarantineCause zero;
  zero.reason = QuarantineReason::ZeroRowsMatched;
  zero.operation = "UPDATE";
  zero.relation = "public.orders";
  zero.match = "(id)=(42)";
  QuarantineRecord q = BuildQuarantine(Tx(7421, 0x3A1F2B0), Sum(7), zero, 0);
  CHECK(q.message ==
        "quarantined transaction 7421 (commit 0/3A1F2B0) of flow app: UPDATE on public.orders matched 0 rows for key "
        "(id)=(42); repair the target row, then SELECT trellara.quarantine_replay_ready(7421, '0/3A1F2B0')");
  CHECK(q.attempts == 1);
  CHECK(q.state == QuarantineState::Quarantined);
  CHECK(q.checksum == Sum(7));
  CHECK(std::string(QuarantineReasonName(q.reason)) == "zero_rows_matched");
  CHECK(q.next_step == "repair the target row, then SELECT trellara.quarantine_replay_ready(7421, '0/3A1F2B0')");
  CHECK(BuildQuarantine(Tx(7421, 0x3A1F2B0), Sum(7), zero, 2).attempts == 3);

  QuarantineCause dup;
  dup.reason = QuarantineReason::DuplicateKey;
  dup.operation = "INSERT";
  dup.relation = "public.orders";
  dup.match = "(id)=(42)";
  dup.sqlstate = "23505";
  dup.detail = "duplicate key value violates unique constraint \"orders_pkey\"";
  QuarantineRecord d = BuildQuarantine(Tx(7421, 0x3A1F2B0), Sum(7), dup, 0);
  CHECK_THAT(d.message, Catch::StartsWith("quarantined transaction 7421 (commit 0/3A1F2B0) of flow app: INSERT on "
                                          "public.orders hit an existing row for key (id)=(42) (SQLSTATE 23505); "));
  CHECK(d.sqlstate == "23505");
  CHECK(d.detail == dup.detail);

  QuarantineCause missing;
  missing.reason = QuarantineReason::MissingTable;
  missing.relation = "public.orders";
  missing.sqlstate = "42P01";
  CHECK_THAT(BuildQuarantine(Tx(1, 0x10), Sum(1), missing, 0).message,
             Catch::Contains("table public.orders does not exist on the target (SQLSTATE 42P01); create it"));

  QuarantineCause full;
  full.reason = QuarantineReason::ZeroRowsMatched;
  full.operation = "DELETE";
  full.relation = "public.events";
  full.match = "(at, n)=(x, NULL)";
  full.match_is_key = false;
  CHECK_THAT(BuildQuarantine(Tx(1, 0x10), Sum(1), full, 0).message, Catch::Contains("matched 0 rows for row (at, n)"));

  // Every reason yields a message with the boundary and a next step that names the replay call.
  for (int r = 0; r <= static_cast<int>(kLastQuarantineReason); r++) {
    QuarantineCause c;
    c.reason = static_cast<QuarantineReason>(r);
    c.operation = "DELETE";
    c.relation = "public.t";
    c.column = "c";
    c.detail = std::string(5000, 'd');
    QuarantineRecord rec = BuildQuarantine(Tx(9, 0x90), Sum(1), c, 0);
    INFO(rec.message);
    CHECK_THAT(rec.message, Catch::StartsWith("quarantined transaction 9 (commit 0/90) of flow app: "));
    CHECK_THAT(rec.next_step, Catch::Contains("SELECT trellara.quarantine_replay_ready(9, '0/90')"));
    CHECK(rec.message.size() < 1500);  // long server details are shortened in the message
    CHECK(rec.detail.size() == 5000);  // ...but kept whole in the record
    CHECK(std::string(QuarantineReasonName(c.reason)) != "?");
  }
}

TEST_CASE("quarantine_replay_ready_refuses_unknown_transaction_boundary", "[decision][seed000]") {
  std::vector<QuarantineEntry> q = {{7421, 0x3A1F2B0, QuarantineState::Quarantined, QuarantineReason::ZeroRowsMatched},
                                    {7000, 0x3000000, QuarantineState::Resolved, QuarantineReason::DuplicateKey},
                                    {7500, 0x3B00000, QuarantineState::ReplayReady, QuarantineReason::SqlError}};
  ReplayReadyDecision ok = DecideReplayReady("app", q, 7421, 0x3A1F2B0);
  CHECK(ok.outcome == ReplayReadyOutcome::Mark);
  CHECK_THAT(ok.message, Catch::Contains("transaction 7421 (commit 0/3A1F2B0) of flow app is marked replay-ready"));

  ReplayReadyDecision wrong_xid = DecideReplayReady("app", q, 7422, 0x3A1F2B0);
  CHECK(wrong_xid.outcome == ReplayReadyOutcome::Refuse);
  CHECK_THAT(wrong_xid.message, Catch::Contains("quarantined as transaction 7421, not 7422") &&
                                    Catch::Contains("nothing was marked"));

  ReplayReadyDecision wrong_lsn = DecideReplayReady("app", q, 7421, 0x3A1F2B1);
  CHECK(wrong_lsn.outcome == ReplayReadyOutcome::Refuse);
  CHECK_THAT(wrong_lsn.message, Catch::Contains("quarantined at commit 0/3A1F2B0, not 0/3A1F2B1"));

  ReplayReadyDecision unknown = DecideReplayReady("app", q, 1, 0x10);
  CHECK(unknown.outcome == ReplayReadyOutcome::Refuse);
  CHECK_THAT(unknown.message, Catch::Contains("no quarantined transaction 1 (commit 0/10) of flow app") &&
                                  Catch::Contains("2 quarantined in this flow"));

  ReplayReadyDecision resolved = DecideReplayReady("app", q, 7000, 0x3000000);
  CHECK(resolved.outcome == ReplayReadyOutcome::Refuse);
  CHECK_THAT(resolved.message, Catch::Contains("already resolved"));

  ReplayReadyDecision again = DecideReplayReady("app", q, 7500, 0x3B00000);
  CHECK(again.outcome == ReplayReadyOutcome::AlreadyReplayReady);

  CHECK(DecideReplayReady("app", {}, 7421, 0x3A1F2B0).outcome == ReplayReadyOutcome::Refuse);
}

// Seed row quarantine_replay_ready_requires_exact_boundary, paired defect: with
// defect.replay_ready_xid_only the boundary is matched on the xid alone, and the replay-ready above
// that names the quarantined xid with a mistyped commit LSN (wrong_lsn) is marked instead of refused.
TEST_CASE("quarantine_replay_ready_matched_on_the_xid_alone_negative_control", "[decision][seed000]") {
  std::vector<QuarantineEntry> q = {{7421, 0x3A1F2B0, QuarantineState::Quarantined, QuarantineReason::ZeroRowsMatched},
                                    {7000, 0x3000000, QuarantineState::Resolved, QuarantineReason::DuplicateKey}};
  fault::AllowDefects(true, "unit test");  // defects need the explicit test-only switch (fault.h)
  REQUIRE(fault::Configure("defect.replay_ready_xid_only:1:defect").ok());
  const ReplayReadyDecision exact = DecideReplayReady("app", q, 7421, 0x3A1F2B0);
  const int fired_on_exact = fault::FiredCount("defect.replay_ready_xid_only");
  const ReplayReadyDecision wrong_lsn = DecideReplayReady("app", q, 7421, 0x3A1F2B1);
  const ReplayReadyDecision wrong_xid = DecideReplayReady("app", q, 7422, 0x3A1F2B0);
  const int fired = fault::FiredCount("defect.replay_ready_xid_only");
  fault::Clear();
  fault::AllowDefects(false, "");
  CHECK(exact.outcome == ReplayReadyOutcome::Mark);
  CHECK(fired_on_exact == 0);  // the exact boundary never reaches the defect point
  REQUIRE(fired == 1);          // else the seam was not exercised: a harness failure, not a caught defect
  // The clean test's CHECK(wrong_lsn.outcome == ReplayReadyOutcome::Refuse) fails: the defect is caught.
  CHECK(wrong_lsn.outcome == ReplayReadyOutcome::Mark);
  CHECK(wrong_xid.outcome == ReplayReadyOutcome::Refuse);  // the defect is the LSN half only
}

TEST_CASE("statement_errors_map_to_quarantine_reasons", "[decision]") {
  auto none = CauseFromStatementError("TR001", "the change matched no row on the target", "0");
  CHECK(none.reason == QuarantineReason::ZeroRowsMatched);
  CHECK(none.rows == 0);
  auto many = CauseFromStatementError("TR002", "the change matched 3 rows on the target, expected exactly one", "3");
  CHECK(many.reason == QuarantineReason::ManyRowsMatched);
  CHECK(many.rows == 3);
  auto dup = CauseFromStatementError("23505", "duplicate key value violates unique constraint \"t_pkey\"",
                                     "Key (id)=(1) already exists.");
  CHECK(dup.reason == QuarantineReason::DuplicateKey);
  CHECK(dup.sqlstate == "23505");
  CHECK(dup.detail == "duplicate key value violates unique constraint \"t_pkey\": Key (id)=(1) already exists.");
  // The quarantine message names the SQLSTATE once.
  auto failed = CauseFromStatementError("22P02", "invalid input syntax for type integer: \"x\"", "");
  failed.operation = "UPDATE";
  failed.relation = "public.t";
  const std::string message = BuildQuarantine(TxIdentity{"app", 1, 7, 0x100}, Sha256{}, failed, 0).message;
  CHECK(message.find("SQLSTATE 22P02") != std::string::npos);
  CHECK(message.find("SQLSTATE 22P02") == message.rfind("SQLSTATE 22P02"));
  CHECK(CauseFromStatementError("42P01", "relation \"public.t\" does not exist", "").reason ==
        QuarantineReason::MissingTable);
  auto col = CauseFromStatementError("42703", "column \"note\" of relation \"orders\" does not exist", "");
  CHECK(col.reason == QuarantineReason::MissingColumn);
  CHECK(col.column == "note");
  // PL/pgSQL's own no_data_found from a target trigger is not the applier's row check.
  CHECK(CauseFromStatementError("P0002", "query returned no rows", "").reason == QuarantineReason::SqlError);
  auto other = CauseFromStatementError("22P02", "invalid input syntax for type integer: \"x\"", "");
  CHECK(other.reason == QuarantineReason::SqlError);
  CHECK(other.sqlstate == "22P02");
}

TEST_CASE("consumer_offset_follows_only_what_the_target_flushed", "[decision]") {
  // Records 0..9: transactions at offsets 2 (lsn 100), 5 (lsn 200), 8 (lsn 300); the others carry
  // nothing to apply (progress markers). Done() is reported as the applier finishes each record.
  ApplyOffsetTracker t(0);
  t.Done(1, 0);  // a progress marker before any transaction: nothing to wait for
  CHECK(t.Durable(0) == 1);
  t.Done(3, 100);
  t.Done(4, 0);  // a marker after lsn 100: the offset passing it also passes the transaction
  t.Done(6, 200);
  t.Done(9, 300);
  CHECK(t.waiting() == 4);
  CHECK(t.Durable(99) == 1);    // the first transaction is committed but not flushed yet
  CHECK(t.Durable(100) == 4);   // flushed through lsn 100: past it and the marker after it
  CHECK(t.Durable(250) == 6);
  CHECK(t.Durable(150) == 6);   // never moves back
  CHECK(t.Durable(300) == 9);
  CHECK(t.waiting() == 0);
  t.Done(9, 300);               // already covered: nothing new
  t.Done(5, 0);                 // below the safe offset: ignored
  CHECK(t.waiting() == 0);
  CHECK(t.safe() == 9);
}

TEST_CASE("consumer_offset_never_passes_an_unflushed_transaction_under_random_flushes", "[decision]") {
  // Property: for any interleaving of Done and Durable, the safe offset never exceeds the end of
  // the last transaction whose commit LSN is <= the largest flushed LSN reported so far.
  std::mt19937_64 rng(20261129);
  for (int run = 0; run < 200; run++) {
    ApplyOffsetTracker t(0);
    std::vector<std::pair<uint64_t, uint64_t>> done;  // offset, lsn required
    uint64_t lsn = 0, offset = 0, flushed = 0, max_required = 0;
    for (int step = 0; step < 200; step++) {
      if (rng() % 3 != 0) {
        offset += 1 + rng() % 3;
        const bool tx = rng() % 2;
        if (tx) lsn += 1 + rng() % 100;
        t.Done(offset, tx ? lsn : 0);
        max_required = std::max(max_required, tx ? lsn : uint64_t{0});
        done.emplace_back(offset, max_required);
      } else {
        flushed = std::max(flushed, lsn == 0 ? uint64_t{0} : lsn - rng() % (lsn + 1));
        const uint64_t safe = t.Durable(flushed);
        uint64_t allowed = 0;
        for (const auto& [o, need] : done)
          if (need <= flushed) allowed = std::max(allowed, o);
        REQUIRE(safe <= allowed);
        REQUIRE(safe == allowed);  // and it does advance as far as allowed
      }
    }
  }
}

}  // namespace unit_apply_decision_test
