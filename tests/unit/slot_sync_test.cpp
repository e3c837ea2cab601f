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

using Continuity = TimelineContinuity::Kind;

TEST_CASE("timeline_file_round_trips_and_reads_first_slice_files", "[slot_sync]") {
  LogTimeline branched{.timeline = 2, .parent_timeline = 1, .branch_lsn = 0x3000148};
  CHECK(FormatLogTimeline(branched) == "2\nbranched_from 1 at 0/3000148\n");
  auto parsed = ParseLogTimeline(FormatLogTimeline(branched));
  REQUIRE(parsed.ok());
  CHECK(parsed->timeline == 2);
  CHECK(parsed->parent_timeline == 1);
  CHECK(parsed->branch_lsn == 0x3000148);
  auto first_slice = ParseLogTimeline("1\n");
  REQUIRE(first_slice.ok());
  CHECK(first_slice->timeline == 1);
  CHECK(first_slice->parent_timeline == 0);
  CHECK_FALSE(ParseLogTimeline("").ok());
  CHECK_FALSE(ParseLogTimeline("two\n").ok());
  CHECK_FALSE(ParseLogTimeline("2\nbranched_from 2 at 0/1\n").ok());  // a parent must be earlier
  CHECK_FALSE(ParseLogTimeline("2\nsomething else\n").ok());
}

TEST_CASE("target_following_the_log_timeline_proceeds", "[slot_sync]") {
  LogTimeline log{.timeline = 2, .parent_timeline = 1, .branch_lsn = 0x5000};
  TargetTimelineFacts target{.applied_timeline = 2u, .applied_past_branch = 40, .first_past_branch = 0x5100,
                             .last_past_branch = 0x9000, .max_applied_lsn = 0x9000};
  CHECK(DecideTimelineContinuity(log, target, "app").kind == Continuity::kProceed);
  CHECK(DecideTimelineContinuity(std::nullopt, target, "app").kind == Continuity::kProceed);
}

TEST_CASE("target_within_the_branch_point_records_the_new_timeline", "[slot_sync]") {
  LogTimeline log{.timeline = 2, .parent_timeline = 1, .branch_lsn = 0x5000};
  TargetTimelineFacts target{.applied_timeline = 1u, .max_applied_lsn = 0x4f00};
  auto d = DecideTimelineContinuity(log, target, "app");
  CHECK(d.kind == Continuity::kRecord);
  CHECK(d.reason.find("timeline 2") != std::string::npos);
  TargetTimelineFacts fresh{};  // nothing applied, nothing recorded
  CHECK(DecideTimelineContinuity(log, fresh, "app").kind == Continuity::kRecord);
}

TEST_CASE("target_ahead_of_the_promoted_server_fails_closed_naming_the_range", "[slot_sync]") {
  LogTimeline log{.timeline = 2, .parent_timeline = 1, .branch_lsn = 0x5000};
  TargetTimelineFacts target{.applied_timeline = 1u, .applied_past_branch = 3, .first_past_branch = 0x5010,
                             .last_past_branch = 0x5300, .max_applied_lsn = 0x5300};
  auto d = DecideTimelineContinuity(log, target, "app");
  REQUIRE(d.kind == Continuity::kFailClosed);
  CHECK(d.reason.find("3 transaction(s) with commit LSN 0/5010 .. 0/5300") != std::string::npos);
  CHECK(d.reason.find("past 0/5000") != std::string::npos);
  CHECK(d.next_step.find("repair-plan") != std::string::npos);
  // Not recorded (a target of an older version): the same evidence fails closed the same way.
  target.applied_timeline.reset();
  CHECK(DecideTimelineContinuity(log, target, "app").kind == Continuity::kFailClosed);
}

TEST_CASE("log_of_a_superseded_timeline_is_refused", "[slot_sync]") {
  LogTimeline old_primary{.timeline = 1};
  TargetTimelineFacts target{.applied_timeline = 2u, .max_applied_lsn = 0x9000};
  auto d = DecideTimelineContinuity(old_primary, target, "app");
  REQUIRE(d.kind == Continuity::kFailClosed);
  CHECK(d.reason.find("superseded") != std::string::npos);
}

TEST_CASE("later_timeline_without_branch_point_cannot_be_checked_once_anything_applied", "[slot_sync]") {
  LogTimeline unknown{.timeline = 3};
  CHECK(DecideTimelineContinuity(unknown, TargetTimelineFacts{.max_applied_lsn = 0x10}, "app").kind ==
        Continuity::kFailClosed);
  CHECK(DecideTimelineContinuity(unknown, TargetTimelineFacts{}, "app").kind == Continuity::kRecord);
}

TEST_CASE("applied_offset_is_the_least_downstream_consumer_not_the_forwarder", "[slot_sync]") {
  std::map<std::string, log::ConsumerState> consumers;
  CHECK(AppliedConsumerOffset(consumers) == 0);
  consumers["forwarder"] = {.next_offset = 900};
  CHECK(AppliedConsumerOffset(consumers) == 0);  // a broker is not a target
  consumers["applier"] = {.next_offset = 500};
  consumers["remote.eu"] = {.next_offset = 420};
  consumers["old"] = {.next_offset = 10, .lost = true, .lost_at_offset = 300};
  CHECK(AppliedConsumerOffset(consumers) == 420);
}

}  // namespace unit_slot_sync_test
