// replica_intake_test.cpp — a remote applier's holes, the forwarder's refill answers, and when a
// replica is caught up (core/include/trellara/broker/replica_intake.h).
#include <catch2/catch.hpp>

#include "trellara/broker/replica_intake.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_replica_intake_test {

using namespace trellara::broker;
using trellara::FormatLogTimeline;
using trellara::LogTimeline;

TEST_CASE("a_hole_is_asked_once_passed_over_asked_again_later_and_closed_only_by_its_own_offset", "[broker]") {
  const std::string id = LogIdentity(1, 0x1000);
  HoleWatch watch;
  CHECK_FALSE(watch.Due(id, 0).has_value());  // nothing missing, nothing asked
  auto first = watch.Seen(id, 10, 14, 0);
  REQUIRE(first.has_value());
  CHECK((first->log_identity == id && first->from == 10 && first->to == 14));
  // What follows the hole while the refill is awaited is passed over, not asked again.
  CHECK_FALSE(watch.Seen(id, 10, 15, 10).has_value());
  CHECK_FALSE(watch.Seen(id, 10, 16, 20).has_value());
  CHECK(watch.asks() == 1);
  // Asked again only after the wait, which doubles up to the cap.
  CHECK_FALSE(watch.Due(id, HoleWatch::kRetryFirstMs - 1).has_value());
  auto again = watch.Due(id, HoleWatch::kRetryFirstMs);
  REQUIRE(again.has_value());
  CHECK((again->from == 10 && again->to == 10));
  CHECK_FALSE(watch.Due(id, HoleWatch::kRetryFirstMs + 2 * HoleWatch::kRetryFirstMs - 1).has_value());
  CHECK(watch.Due(id, 3 * HoleWatch::kRetryFirstMs).has_value());
  int64_t now = 3 * HoleWatch::kRetryFirstMs;
  for (int i = 0; i < 10; ++i) {
    now += HoleWatch::kRetryMaxMs;
    CHECK(watch.Due(id, now).has_value());  // the cap: never waits longer than kRetryMaxMs
  }
  // An append below the hole does not close it; neither does the hole's own offset while records
  // seen after it (passed over) are still missing; holding everything seen does.
  CHECK_FALSE(watch.Appended(9));
  CHECK(watch.missing_from() == 10u);
  CHECK_FALSE(watch.Appended(10));
  CHECK(watch.missing_from() == 11u);
  CHECK(watch.asks() == 13);  // moving is not asking
  CHECK_FALSE(watch.Appended(15));
  CHECK(watch.missing_from() == 16u);
  CHECK(watch.Appended(16));
  CHECK_FALSE(watch.missing_from().has_value());
  CHECK_FALSE(watch.Due(id, now + HoleWatch::kRetryMaxMs).has_value());
  // A later hole is a new one: asked at once, waiting from the first interval again.
  auto next = watch.Seen(id, 20, 21, now);
  REQUIRE(next.has_value());
  CHECK(next->from == 20);
  CHECK(watch.holes() == 2);
  CHECK_FALSE(watch.Due(id, now + HoleWatch::kRetryFirstMs - 1).has_value());
}

TEST_CASE("a_moved_hole_is_a_new_hole", "[broker]") {
  // The replica appended part of the missing range (a refill began) and another offset is missing.
  const std::string id = LogIdentity(1, 0x1000);
  HoleWatch watch;
  REQUIRE(watch.Seen(id, 10, 30, 0).has_value());
  CHECK_FALSE(watch.Appended(9));
  REQUIRE(watch.Seen(id, 12, 30, 5).has_value());
  CHECK(watch.missing_from() == 12u);
}

TEST_CASE("the_forwarder_refills_from_its_own_log_up_to_what_the_broker_acknowledged", "[broker]") {
  const std::string id = LogIdentity(1, 0x1000);
  auto ok = DecideRefill({id, 10, 14}, id, 4, 40);
  CHECK((ok.kind == RefillAnswer::Kind::Ok && ok.first == 10 && ok.end == 40));
  // A hole beyond what was published: nothing to republish; the forwarder's publishing brings it.
  auto ahead = DecideRefill({id, 50, 52}, id, 4, 40);
  CHECK((ahead.kind == RefillAnswer::Kind::Ok && ahead.first == 40 && ahead.end == 40));
  // Reclaimed from the local log: lost on both sides, said so (never skipped).
  auto gone = DecideRefill({id, 3, 14}, id, 4, 40);
  CHECK((gone.kind == RefillAnswer::Kind::Gone && gone.first == 4));
  auto other = DecideRefill({LogIdentity(1, 0x2000), 10, 14}, id, 4, 40);
  CHECK((other.kind == RefillAnswer::Kind::OtherLog && other.detail == id));
  // Every answer survives the wire.
  for (const auto& a : {ok, ahead, gone, other}) CHECK(ParseRefillAnswer(EncodeRefillAnswer(a)).ok());
}

TEST_CASE("a_replica_is_caught_up_only_with_nothing_missing_and_nothing_unread", "[broker]") {
  ReplicaReadFacts idle{false, false, true, 40, 40};
  CHECK(ReplicaMayBeCaughtUp(idle));
  CHECK(ReplicaCaughtUp(idle, false));
  CHECK_FALSE(ReplicaCaughtUp(idle, true));          // the leader holds more (a refill being published)
  CHECK_FALSE(ReplicaCaughtUp(idle, std::nullopt));  // the leader could not be asked
  auto delivered = idle;
  delivered.delivered = true;
  CHECK_FALSE(ReplicaCaughtUp(delivered, false));
  auto hole = idle;
  hole.hole_open = true;
  CHECK_FALSE(ReplicaCaughtUp(hole, false));
  auto behind = idle;
  behind.seen_end = 41;  // an offset was seen that the replica does not hold
  CHECK_FALSE(ReplicaCaughtUp(behind, false));
  auto reconnecting = idle;
  reconnecting.reading = false;
  CHECK_FALSE(ReplicaCaughtUp(reconnecting, false));
}

TEST_CASE("the_forwarder_republishes_a_tail_the_broker_lost", "[broker]") {
  // The stream holds the last record published: nothing to do.
  CHECK_FALSE(DecideTailRepublish(39u, 40, 0).has_value());
  CHECK_FALSE(DecideTailRepublish(std::nullopt, 0, 0).has_value());
  // The broker lost offsets 37..39 (the tail): republished from 37.
  CHECK(DecideTailRepublish(36u, 40, 0) == 37u);
  // It lost everything it held: from the log's first retained offset.
  CHECK(DecideTailRepublish(std::nullopt, 40, 12) == 12u);
  // Only what the local log still holds can go out again.
  CHECK(DecideTailRepublish(5u, 40, 12) == 12u);
  CHECK_FALSE(DecideTailRepublish(5u, 40, 40).has_value());
}


TEST_CASE("a_replica_takes_the_timeline_of_its_log_once_and_refuses_another", "[broker]") {
  using Kind = ReplicaTimelineDecision::Kind;
  const LogTimeline promoted{2, 1, 0x3000148};
  const std::string header = TimelineHeaderValue(promoted);
  REQUIRE(header == "2 branched_from 1 at 0/3000148");  // one line: a NATS header holds no newline

  // No header (an older forwarder, a log without TIMELINE): nothing to write, nothing refused.
  CHECK(DecideReplicaTimeline(std::nullopt, std::nullopt).kind == Kind::Keep);
  CHECK(DecideReplicaTimeline(promoted, std::nullopt).kind == Kind::Keep);

  // A new replica writes it (before appending the message's records), exactly as the relay wrote it.
  auto first = DecideReplicaTimeline(std::nullopt, header);
  REQUIRE(first.kind == Kind::Write);
  CHECK(FormatLogTimeline(first.timeline) == FormatLogTimeline(promoted));
  CHECK(DecideReplicaTimeline(std::nullopt, std::string("1")).timeline.parent_timeline == 0);

  // The same timeline again: kept.
  CHECK(DecideReplicaTimeline(promoted, header).kind == Kind::Keep);

  // Another timeline, or the same number with another branch point: the stream carries another log.
  auto other = DecideReplicaTimeline(promoted, std::string("3 branched_from 2 at 0/5000000"));
  CHECK(other.kind == Kind::Refuse);
  CHECK(other.reason.find("never changes timeline") != std::string::npos);
  CHECK(DecideReplicaTimeline(promoted, std::string("2 branched_from 1 at 0/3000150")).kind == Kind::Refuse);
  CHECK(DecideReplicaTimeline(LogTimeline{1, 0, 0}, header).kind == Kind::Refuse);

  // An unreadable header is refused, never taken for "no timeline".
  auto garbage = DecideReplicaTimeline(std::nullopt, std::string("two"));
  CHECK(garbage.kind == Kind::Refuse);
  CHECK(garbage.reason.find("Trellara-Timeline") != std::string::npos);
}

}  // namespace unit_replica_intake_test
