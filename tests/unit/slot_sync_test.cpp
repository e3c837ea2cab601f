// slot_sync_test.cpp — the standby slot sync rule (never ahead of the standby's replay, never
// backwards, a new slot only once the primary's slot passes what the standby can reserve) and the
// post-promotion log rule (a log of an earlier timeline is set aside, never appended to).
#include <catch2/catch.hpp>

#include "trellara/capture/slot_sync.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_slot_sync_test {

using namespace trellara;
using Kind = SlotSyncDecision::Kind;

const PrimarySlot kPrimary{.restart_lsn = 0x1000, .confirmed_flush_lsn = 0x3000, .catalog_xmin = 750};

TEST_CASE("standby_slot_takes_primary_positions_when_replayed_past_them", "[slot_sync]") {
  SlotSyncDecision d = DecideSlotSync(kPrimary, LocalSlot{0x800, 0, 740}, true, 0x5000, "trellara_app");
  REQUIRE(d.kind == Kind::kSet);
  CHECK(d.restart_lsn == 0x1000);
  CHECK(d.catalog_xmin == 750);
  CHECK(d.confirmed_flush_lsn == 0x3000);
}

TEST_CASE("standby_slot_confirmed_is_capped_at_replay_position", "[slot_sync]") {
  SlotSyncDecision d = DecideSlotSync(kPrimary, std::nullopt, false, 0x2000, "trellara_app");
  REQUIRE(d.kind == Kind::kSet);
  CHECK(d.confirmed_flush_lsn == 0x2000);  // not the primary's 0x3000: the standby has not replayed it
  CHECK(d.restart_lsn == 0x1000);
}

TEST_CASE("standby_waits_while_primary_restart_is_beyond_replay", "[slot_sync]") {
  SlotSyncDecision d = DecideSlotSync(kPrimary, std::nullopt, false, 0xFFF, "trellara_app");
  CHECK(d.kind == Kind::kWait);
  CHECK(d.reason.find("0/1000") != std::string::npos);
  CHECK(d.reason.find("0/FFF") != std::string::npos);
}

TEST_CASE("new_standby_slot_waits_until_primary_passes_local_reservation", "[slot_sync]") {
  // WAL before 0x1800 is gone here: the primary's restart 0x1000 cannot be honoured yet.
  CHECK(DecideSlotSync(kPrimary, LocalSlot{0x1800, 0, 740}, true, 0x5000, "s").kind == Kind::kWait);
  // Catalog rows older than xid 760 may be vacuumed here: catalog_xmin 750 cannot be honoured.
  CHECK(DecideSlotSync(kPrimary, LocalSlot{0x800, 0, 760}, true, 0x5000, "s").kind == Kind::kWait);
}

TEST_CASE("existing_standby_slot_never_moves_backwards", "[slot_sync]") {
  LocalSlot local{0x1000, 0x3000, 750};
  PrimarySlot older{.restart_lsn = 0x900, .confirmed_flush_lsn = 0x3000, .catalog_xmin = 750};
  CHECK(DecideSlotSync(older, local, false, 0x5000, "s").kind == Kind::kKeep);
  PrimarySlot older_xmin{.restart_lsn = 0x1000, .confirmed_flush_lsn = 0x3000, .catalog_xmin = 749};
  CHECK(DecideSlotSync(older_xmin, local, false, 0x5000, "s").kind == Kind::kKeep);
  // In step: nothing to write.
  CHECK(DecideSlotSync(kPrimary, local, false, 0x5000, "s").kind == Kind::kKeep);
  // Ahead: set.
  PrimarySlot newer{.restart_lsn = 0x2000, .confirmed_flush_lsn = 0x4000, .catalog_xmin = 800};
  SlotSyncDecision d = DecideSlotSync(newer, local, false, 0x5000, "s");
  REQUIRE(d.kind == Kind::kSet);
  CHECK(d.confirmed_flush_lsn == 0x4000);
}

TEST_CASE("catalog_xmin_compares_across_wraparound", "[slot_sync]") {
  CHECK(XidPrecedes(4'294'967'290u, 5u));
  CHECK_FALSE(XidPrecedes(5u, 4'294'967'290u));
}

TEST_CASE("primary_slot_not_yet_consistent_is_waited_for", "[slot_sync]") {
  PrimarySlot unset{.restart_lsn = 0x1000, .confirmed_flush_lsn = 0, .catalog_xmin = 0};
  CHECK(DecideSlotSync(unset, std::nullopt, false, 0x5000, "s").kind == Kind::kWait);
}

TEST_CASE("log_of_earlier_timeline_is_set_aside_after_promotion", "[slot_sync]") {
  CHECK(DecideLogTimeline(1u, 1u) == LogTimelineDecision::kUse);
  CHECK(DecideLogTimeline(std::nullopt, 2u) == LogTimelineDecision::kRecord);
  CHECK(DecideLogTimeline(1u, 2u) == LogTimelineDecision::kSetAside);
  CHECK(DecideLogTimeline(3u, 2u) == LogTimelineDecision::kRefuse);
  CHECK(SetAsideLogDirectory("/pg/pg_trellara/app/", 1) == "/pg/pg_trellara/app.timeline1");
}

}  // namespace unit_slot_sync_test
