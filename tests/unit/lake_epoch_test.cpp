// lake_epoch_test.cpp — fleet fan-in's epoch rules (core/include/trellara/lake/epoch.h): durations,
// the dedup set and its recomputed counts, conflicts, completeness with and without gaps, late
// stores, quarantine, a pending catalog commit and the receipt.
#include <catch2/catch.hpp>

#include "trellara/lake/epoch.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_lake_epoch_test {

using namespace trellara::lake;

namespace {

constexpr uint64_t kHour = 3600 * kMicrosPerSecond;

StoreTransaction Tx(const std::string& store, uint64_t lsn, uint32_t xid, const std::string& checksum,
                    uint64_t changes = 1) {
  return StoreTransaction{store, lsn, xid, kHour / 2, checksum, changes};
}

EpochFacts Fleet(int stores, int complete, uint64_t now_us) {
  EpochFacts f;
  f.index = 0;
  f.now_us = now_us;
  for (int i = 0; i < stores; i++) {
    const std::string name = std::string(i < 9 ? "store-0" : "store-") + std::to_string(i + 1);
    f.stores.push_back(StoreFacts{name, i < complete ? kHour + 1 : kHour / 2, false, false});
  }
  return f;
}

FaninPolicy Policy(GapPolicy gaps = GapPolicy::PublishWithGaps) {
  return FaninPolicy{kHour, gaps, 15 * 60 * kMicrosPerSecond};
}

}  // namespace

TEST_CASE("durations and names", "[lake]") {
  CHECK(ParseDurationMicros("1h").value() == kHour);
  CHECK(ParseDurationMicros("15m").value() == 900 * kMicrosPerSecond);
  CHECK(ParseDurationMicros("2d").value() == 2 * 86400 * kMicrosPerSecond);
  for (const char* bad : {"", "h", "0h", "1", "1.5h", "-1h", "1w", "h1"}) {
    auto parsed = ParseDurationMicros(bad);
    REQUIRE_FALSE(parsed);
    CHECK(parsed.error().message.find("unit") != std::string::npos);
  }
  CHECK(EpochIndexOf(kHour - 1, kHour) == 0);
  CHECK(EpochIndexOf(kHour, kHour) == 1);
  CHECK(EpochName(0x13528f8) == "epoch-00000000013528f8");
  CHECK(ParseGapPolicy("wait").value() == GapPolicy::Wait);
  CHECK_FALSE(ParseGapPolicy("publish"));
}

TEST_CASE("the dedup set: replays change no count, another checksum is a conflict", "[lake]") {
  EpochLedger ledger;
  std::optional<Conflict> conflict;
  CHECK(ledger.Admit(Tx("a", 100, 7, "aa", 3), &conflict) == Admission::Added);
  CHECK(ledger.Admit(Tx("b", 100, 7, "bb", 2), &conflict) == Admission::Added);  // same LSN, other store
  const Counts before = ledger.CountsOf(std::set<std::string>{"a", "b"});
  CHECK(before == Counts{2, 5});
  for (int replay = 0; replay < 3; replay++) CHECK(ledger.Admit(Tx("a", 100, 7, "aa", 3), &conflict) == Admission::Duplicate);
  CHECK(ledger.CountsOf(std::set<std::string>{"a", "b"}) == before);
  CHECK_FALSE(conflict);
  CHECK(ledger.Admit(Tx("a", 100, 7, "cc", 3), &conflict) == Admission::Conflict);
  REQUIRE(conflict);
  CHECK(conflict->held_checksum == "aa");
  CHECK(conflict->arrived_checksum == "cc");
  CHECK(ledger.CountsOf("a") == Counts{1, 3});  // the held one stays
  const std::string text = DescribeConflict(*conflict, EpochName(0));
  CHECK(text.find("store a") != std::string::npos);
  CHECK(text.find("0/64") != std::string::npos);
  CHECK(text.find("aa") != std::string::npos);
  CHECK(text.find("cc") != std::string::npos);
}

TEST_CASE("an epoch with every store complete is published complete", "[lake]") {
  const EpochDecision d = DecideEpoch(Fleet(12, 12, kHour + 1), Policy());
  CHECK(d.action == EpochAction::Publish);
  CHECK(d.state == EpochState::Complete);
  CHECK(d.include.size() == 12);
  CHECK(DescribeCompleteness(d, 12) == "12/12 complete, 0 missing, 0 quarantined");
}

TEST_CASE("missing stores: waiting, then complete_with_gaps after the deadline, never with policy wait", "[lake]") {
  const uint64_t deadline = kHour + Policy().gap_deadline_us;
  EpochDecision d = DecideEpoch(Fleet(12, 9, kHour / 2), Policy());
  CHECK(d.action == EpochAction::Wait);
  CHECK(d.state == EpochState::Open);
  d = DecideEpoch(Fleet(12, 9, deadline - 1), Policy());
  CHECK(d.action == EpochAction::Wait);
  CHECK(d.state == EpochState::Waiting);
  CHECK(d.reason.find("store-10, store-11, store-12") != std::string::npos);
  d = DecideEpoch(Fleet(12, 9, deadline), Policy());
  CHECK(d.action == EpochAction::Publish);
  CHECK(d.state == EpochState::CompleteWithGaps);
  CHECK(d.include.size() == 9);
  CHECK(d.missing == std::vector<std::string>{"store-10", "store-11", "store-12"});
  CHECK(DescribeCompleteness(d, 12) == "9/12 complete, 3 missing, 0 quarantined");
  d = DecideEpoch(Fleet(12, 9, deadline * 10), Policy(GapPolicy::Wait));
  CHECK(d.action == EpochAction::Wait);
  CHECK(d.state == EpochState::Waiting);
}

TEST_CASE("a hole keeps a store incomplete whatever its time", "[lake]") {
  EpochFacts f = Fleet(3, 3, kHour * 2);
  f.stores[1].hole = true;
  const EpochDecision d = DecideEpoch(f, Policy());
  CHECK(d.missing == std::vector<std::string>{"store-02"});
  CHECK(d.state == EpochState::CompleteWithGaps);
}

TEST_CASE("late stores are appended to the published epoch until it is complete", "[lake]") {
  EpochFacts f = Fleet(12, 10, kHour * 3);
  f.published.state = EpochState::CompleteWithGaps;
  for (int i = 0; i < 9; i++) f.published.stores.insert(f.stores[static_cast<size_t>(i)].store);
  EpochDecision d = DecideEpoch(f, Policy());
  CHECK(d.action == EpochAction::Publish);
  CHECK(d.state == EpochState::CompleteWithGaps);  // one store still missing
  CHECK(d.include.size() == 10);
  f.published.stores = d.include;
  d = DecideEpoch(f, Policy());
  CHECK(d.action == EpochAction::Wait);
  CHECK(d.state == EpochState::CompleteWithGaps);
  f.stores[10].contiguous_through_us = f.stores[11].contiguous_through_us = kHour + 5;
  d = DecideEpoch(f, Policy());
  CHECK(d.action == EpochAction::Publish);
  CHECK(d.state == EpochState::Complete);
  CHECK(d.include.size() == 12);
  f.published = PublishedEpoch{EpochState::Complete, d.include};
  CHECK(DecideEpoch(f, Policy()).action == EpochAction::None);
}

TEST_CASE("a conflict quarantines the epoch before anything else, published or not", "[lake]") {
  EpochFacts f = Fleet(12, 9, kHour * 3);
  f.stores[0].conflict = true;
  EpochDecision d = DecideEpoch(f, Policy());
  CHECK(d.action == EpochAction::Quarantine);
  CHECK(d.state == EpochState::Quarantined);
  CHECK(DescribeCompleteness(d, 12) == "8/12 complete, 3 missing, 1 quarantined");
  CHECK(d.include.empty());
  f.stores[0].conflict = false;
  f.quarantined = true;  // recorded: stays until resolved
  f.published.state = EpochState::CompleteWithGaps;
  CHECK(DecideEpoch(f, Policy()).action == EpochAction::Quarantine);
}

TEST_CASE("a commit of unknown outcome is settled by the catalog, never by deleting files", "[lake]") {
  EpochFacts f = Fleet(12, 12, kHour * 3);
  f.commit_pending = true;
  const EpochDecision d = DecideEpoch(f, Policy());
  CHECK(d.action == EpochAction::SettleCommit);
  CHECK(d.state == EpochState::PendingCatalogCommit);
  CHECK(SettlePendingCommit(true) == CommitSettlement::Committed);
  CHECK(SettlePendingCommit(false) == CommitSettlement::CommitAgain);
  CHECK_FALSE(MayDeleteDataFile(false, true));
  CHECK_FALSE(MayDeleteDataFile(true, false));
  CHECK(MayDeleteDataFile(false, false));
}

TEST_CASE("views cover only the first epochs published complete", "[lake]") {
  using S = EpochState;
  CHECK(CompleteHorizon({}) == 0);
  CHECK(CompleteHorizon({S::Complete, S::Complete}) == 2);
  CHECK(CompleteHorizon({S::Complete, S::CompleteWithGaps, S::Complete}) == 1);
  CHECK(CompleteHorizon({S::Quarantined, S::Complete}) == 0);
  CHECK(CompleteHorizon({S::Complete, S::PendingCatalogCommit}) == 1);
}

TEST_CASE("a publication's receipt is canonical", "[lake]") {
  const std::string a = PublicationReceipt(1, {"s1", "s2"}, {"f2", "f1"});
  CHECK(a == PublicationReceipt(1, {"s2", "s1"}, {"f1", "f2"}));
  CHECK(a != PublicationReceipt(2, {"s1", "s2"}, {"f1", "f2"}));
  CHECK(a != PublicationReceipt(1, {"s1"}, {"f1", "f2"}));
  CHECK(a != PublicationReceipt(1, {"s1", "s2"}, {"f1"}));
  CHECK(a.size() == 64);
}

}  // namespace unit_lake_epoch_test

#include "trellara/lake/lake_metrics.h"

namespace unit_lake_epoch_test {

TEST_CASE("the fan-in's metrics and readiness", "[lake]") {
  trellara::lake::LakeFigures f;
  f.lake = "fleet";
  f.epochs_by_state = {{"complete", 3}, {"complete_with_gaps", 1}};
  f.transactions_admitted = 12;
  f.changes_admitted = 30;
  f.stores = {{"store-01", 42, 1.5}};
  auto text = trellara::metrics::RenderExposition(trellara::lake::LakeFamilies(f));
  REQUIRE(text);
  CHECK(text->find("trellara_lake_epochs{lake=\"fleet\",state=\"complete\"} 3") != std::string::npos);
  CHECK(text->find("trellara_lake_epochs{lake=\"fleet\",state=\"quarantined\"} 0") != std::string::npos);
  CHECK(text->find("trellara_lake_store_next_offset{lake=\"fleet\",store=\"store-01\"} 42") != std::string::npos);
  CHECK(text->find("trellara_lake_store_progress_lag_seconds{lake=\"fleet\",store=\"store-01\"} 1.5") != std::string::npos);
  CHECK(trellara::lake::LakeReadiness(f).ready);
  f.epochs_by_state["quarantined"] = 1;
  CHECK(trellara::lake::LakeReadiness(f).reason == "lake_epoch_quarantined");
  f.catalog_reachable = false;
  CHECK(trellara::lake::LakeReadiness(f).reason == "lake_catalog_unreachable");
}

}  // namespace unit_lake_epoch_test
