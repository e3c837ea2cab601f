// broker_test.cpp — record names in the stream and where the forwarder resumes (broker.h).
#include <catch2/catch.hpp>

#include "trellara/broker/broker.h"

using namespace trellara::broker;

TEST_CASE("a_record_is_named_by_flow_log_identity_and_offset", "[broker]") {
  const std::string identity = LogIdentity(7312345678901234567ull, 0x00000001000000A8ull);
  CHECK(identity == "7312345678901234567-1/A8");
  const RecordName name{"app", identity, 42};
  CHECK(MessageId(name) == "app/7312345678901234567-1/A8/42");
  auto parsed = ParseMessageId(MessageId(name));
  REQUIRE(parsed.ok());
  CHECK(*parsed == name);
  CHECK(FlowSubject("app") == "trellara.app.log");
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
