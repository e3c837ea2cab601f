// broker_test.cpp — record names in the stream and where the forwarder resumes (broker.h).
#include <catch2/catch.hpp>

#include "trellara/broker/broker.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_broker_test {

using namespace trellara::broker;

TEST_CASE("a_record_is_named_by_flow_log_identity_and_offset", "[broker]") {
  const std::string identity = LogIdentity(7312345678901234567ull, 0x00000001000000A8ull);
  CHECK(identity == "7312345678901234567-1/A8");
  const RecordName name{"app", identity, 42};
  CHECK(MessageId(name) == "app/7312345678901234567-1/A8/42");
  auto parsed = ParseMessageId(MessageId(name));
  REQUIRE(parsed.ok());
  CHECK(*parsed == name);
  CHECK(FlowSubject("app") == "trellara.app.log.records");
  CHECK(RefillSubject("app") == "trellara.app.log.refill");
  CHECK(StreamSubjects("app") == "trellara.app.log.*");
  CHECK(RefillMessageId(name, 17) == "app/7312345678901234567-1/A8/42/refill-17");
  REQUIRE(ParseDeliveredId(RefillMessageId(name, 17)).ok());
  CHECK(*ParseDeliveredId(RefillMessageId(name, 17)) == name);
  CHECK(*ParseDeliveredId(MessageId(name)) == name);
  CHECK_FALSE(ParseDeliveredId(MessageId(name) + "/refill-").ok());
  CHECK_FALSE(ParseDeliveredId(MessageId(name) + "/refill-x").ok());
  CHECK_FALSE(ParseMessageId(RefillMessageId(name, 17)).ok());  // the forwarder's resume point is never a refill
  for (const char* bad : {"", "app", "app/1-0/0", "app/1-0/0/", "/1-0/0/5", "app/1-0/0/x5", "app/1-0/0/-1",
                          "app/1-0/0/123456789012345678901"}) {
    INFO(bad);
    CHECK_FALSE(ParseMessageId(bad).ok());
  }
}

TEST_CASE("the_forwarder_resumes_after_the_streams_last_record_and_nothing_else", "[broker]") {
  const std::string id = LogIdentity(1, 0x1000);
  // Empty stream: from the log's first retained offset.
  CHECK(*DecideForwardStart(std::nullopt, "app", id, 0, 10, "S") == 0);
  CHECK(*DecideForwardStart(std::nullopt, "app", id, 5, 10, "S") == 5);
  // After the stream's last record (the forwarder's own progress is not asked).
  CHECK(*DecideForwardStart(RecordName{"app", id, 6}, "app", id, 0, 10, "S") == 7);
  CHECK(*DecideForwardStart(RecordName{"app", id, 9}, "app", id, 0, 10, "S") == 10);  // caught up
  CHECK(*DecideForwardStart(RecordName{"app", id, 4}, "app", id, 5, 10, "S") == 5);   // just retained
  // Refusals, each naming the way out.
  auto other_flow = DecideForwardStart(RecordName{"billing", id, 3}, "app", id, 0, 10, "S");
  REQUIRE_FALSE(other_flow.ok());
  CHECK(other_flow.error().message.find("its own stream") != std::string::npos);
  auto other_log = DecideForwardStart(RecordName{"app", LogIdentity(1, 0x2000), 3}, "app", id, 0, 10, "S");
  REQUIRE_FALSE(other_log.ok());
  CHECK(other_log.error().message.find("another log of flow app") != std::string::npos);
  auto ahead = DecideForwardStart(RecordName{"app", id, 10}, "app", id, 0, 10, "S");
  REQUIRE_FALSE(ahead.ok());
  CHECK(ahead.error().message.find("the local log lost records the broker holds") != std::string::npos);
  auto reclaimed = DecideForwardStart(RecordName{"app", id, 2}, "app", id, 5, 10, "S");
  REQUIRE_FALSE(reclaimed.ok());
  CHECK(reclaimed.error().message.find("offsets 3..4 were reclaimed") != std::string::npos);
}

TEST_CASE("a_remote_applier_appends_only_the_next_offset_and_never_skips_a_hole", "[broker]") {
  const std::string id = LogIdentity(1, 0x1000);
  CHECK(DecideArrival({"app", id, 10}, "app", id, 10, std::nullopt) == Arrival::Next);
  CHECK(DecideArrival({"app", id, 11}, "app", id, 10, std::nullopt) == Arrival::Hole);
  CHECK(DecideArrival({"app", id, 900}, "app", id, 10, std::nullopt) == Arrival::Hole);
  CHECK(DecideArrival({"app", id, 9}, "app", id, 10, true) == Arrival::Duplicate);
  CHECK(DecideArrival({"app", id, 9}, "app", id, 10, false) == Arrival::ConflictingDuplicate);
  CHECK(DecideArrival({"app", id, 9}, "app", id, 10, std::nullopt) == Arrival::UncheckedDuplicate);
  // Another log or flow is never taken for ours, whatever its offset.
  CHECK(DecideArrival({"app", LogIdentity(1, 0x2000), 10}, "app", id, 10, std::nullopt) == Arrival::OtherLog);
  CHECK(DecideArrival({"billing", id, 10}, "app", id, 10, std::nullopt) == Arrival::OtherLog);
  CHECK(std::string(ArrivalName(Arrival::Hole)) == "hole");
}

TEST_CASE("refill_requests_answers_and_positions_are_parsed_strictly", "[broker]") {
  const std::string id = LogIdentity(1, 0x1000);
  auto request = ParseRefillRequest(EncodeRefillRequest({id, 5, 9}));
  REQUIRE(request.ok());
  CHECK(request->log_identity == id);
  CHECK(request->from == 5);
  CHECK(request->to == 9);
  for (const char* bad : {"", "refill", "refill x 5", "refill x 9 5", "refill  x 5 9", "refill x 5 9 1", "fill x 5 9",
                          "refill x -5 9"}) {
    INFO(bad);
    CHECK_FALSE(ParseRefillRequest(bad).ok());
  }
  auto ok = ParseRefillAnswer(EncodeRefillAnswer({RefillAnswer::Kind::Ok, 5, 40, ""}));
  REQUIRE(ok.ok());
  CHECK((ok->kind == RefillAnswer::Kind::Ok && ok->first == 5 && ok->end == 40));
  auto gone = ParseRefillAnswer(EncodeRefillAnswer({RefillAnswer::Kind::Gone, 77, 0, ""}));
  REQUIRE(gone.ok());
  CHECK((gone->kind == RefillAnswer::Kind::Gone && gone->first == 77));
  auto other = ParseRefillAnswer(EncodeRefillAnswer({RefillAnswer::Kind::OtherLog, 0, 0, id}));
  REQUIRE(other.ok());
  CHECK((other->kind == RefillAnswer::Kind::OtherLog && other->detail == id));
  for (const char* bad : {"", "ok 5", "ok 9 5", "gone", "gone x", "maybe 1 2"}) {
    INFO(bad);
    CHECK_FALSE(ParseRefillAnswer(bad).ok());
  }
  auto position = ParsePosition(EncodePosition({"eu", id, 123}));
  REQUIRE(position.ok());
  CHECK((position->applier == "eu" && position->log_identity == id && position->next_offset == 123));
  CHECK_FALSE(ParsePosition("position eu 123").ok());
  CHECK_FALSE(ParsePosition("position eu x y").ok());
  CHECK(RemoteConsumerName("eu") == "remote.eu");
}

}  // namespace unit_broker_test
