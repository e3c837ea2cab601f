// broker_pull_credit_test.cpp — a remote applier's pull-consumer credit and what the server's
// pull statuses mean (core/include/trellara/broker/pull_credit.h).
#include <catch2/catch.hpp>

#include "trellara/broker/pull_credit.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_broker_pull_credit_test {

using namespace trellara::broker;
using Kind = PullStatusMeaning::Kind;

constexpr int64_t kBatch = 512;
constexpr int64_t kMaxBytes = 32ll << 20;

PullStatus PullStatusOf(std::string code, std::string description, std::optional<int64_t> messages = std::nullopt,
                  std::optional<int64_t> bytes = std::nullopt) {
  return PullStatus{std::move(code), std::move(description), messages, bytes};
}

TEST_CASE("a_new_reader_asks_at_once_and_again_only_when_half_a_batch_is_left", "[broker]") {
  PullCredit credit(kBatch);
  CHECK(credit.ShouldAsk());  // nothing asked yet
  credit.Asked(1);
  CHECK(credit.credit() == kBatch);
  CHECK_FALSE(credit.ShouldAsk());
  for (int i = 0; i < kBatch / 2 - 1; ++i) credit.Delivered();
  CHECK_FALSE(credit.ShouldAsk());  // 257 may still come
  credit.Delivered();
  CHECK(credit.ShouldAsk());  // 256: the next request goes out while these arrive
  credit.Asked(2);
  CHECK(credit.credit() == kBatch + kBatch / 2);
}

TEST_CASE("messages_served_round_robin_between_two_requests_are_counted_in_total_not_per_request", "[broker]") {
  // nats-server moves a request that still wants messages to the back of its queue after each
  // message: with two open, they alternate. Counting each message against the oldest request
  // (the earlier rule) took the oldest for done while it still had messages to receive.
  PullCredit credit(kBatch);
  credit.Asked(1);
  for (int i = 0; i < kBatch / 2; ++i) credit.Delivered();  // all to request 1
  credit.Asked(2);
  for (int i = 0; i < 200; ++i) credit.Delivered();  // 100 to each
  // Request 1 has 156 left, request 2 has 412: 568 in all, whichever request they answer.
  CHECK(credit.credit() == 568);
  // Request 1 then expires... not here: requests carry no expiry. It ends by its byte budget,
  // saying what it will not send.
  CHECK(credit.Ended(1, 156));
  CHECK(credit.credit() == 412);
  CHECK_FALSE(credit.ShouldAsk());
}

TEST_CASE("a_request_that_got_its_whole_batch_ends_silently_and_the_total_already_says_so", "[broker]") {
  PullCredit credit(kBatch);
  credit.Asked(1);
  for (int i = 0; i < kBatch / 2; ++i) credit.Delivered();
  credit.Asked(2);
  for (int i = 0; i < kBatch + kBatch / 2; ++i) credit.Delivered();  // both served to the end
  CHECK(credit.credit() == 0);
  CHECK(credit.ShouldAsk());
  // A newer server says so anyway (409 Batch Completed, pending 0): nothing changes.
  CHECK(credit.Ended(2, 0));
  CHECK(credit.credit() == 0);
}

TEST_CASE("a_reader_with_messages_waiting_never_holds_credit_the_server_no_longer_has", "[broker]") {
  // The stall of issue 38: 26 messages of a 512 batch delivered, the request then gone at the
  // server. Whatever way it ends, the credit must not claim its 486 remaining messages.
  PullCredit credit(kBatch);
  credit.Asked(1);
  for (int i = 0; i < 26; ++i) credit.Delivered();
  CHECK_FALSE(credit.ShouldAsk());  // 486 may come: nothing to ask
  SECTION("its byte budget ran out") {
    CHECK(credit.Ended(1, kBatch - 26));
  }
  SECTION("the server said nothing of how many") {
    CHECK(credit.Ended(1, std::nullopt));  // counted as nothing delivered: at most the whole credit
  }
  SECTION("the consumer's leader changed") {
    credit.Forget();
  }
  CHECK(credit.credit() == 0);
  CHECK(credit.ShouldAsk());
}

TEST_CASE("a_status_without_its_pending_count_lowers_the_credit_at_least_as_much_as_the_truth", "[broker]") {
  PullCredit credit(kBatch);
  credit.Asked(1);
  for (int i = 0; i < kBatch / 2; ++i) credit.Delivered();
  credit.Asked(2);
  for (int i = 0; i < 100; ++i) credit.Delivered();
  // Truth: 668 open. Request 2 ends without a count: taken as its whole batch (it may have had
  // fewer left), so the credit is below the truth, never above — a request is asked early, never late.
  CHECK(credit.Ended(2, std::nullopt));
  CHECK(credit.credit() == 668 - kBatch);
  CHECK(credit.ShouldAsk());
}

TEST_CASE("statuses_of_requests_that_are_not_this_credits_count_nothing", "[broker]") {
  PullCredit credit(kBatch);
  credit.Asked(1);
  CHECK_FALSE(credit.Ended(0, 10));  // no id
  CHECK_FALSE(credit.Ended(2, 10));  // never asked
  CHECK(credit.credit() == kBatch);
  // Voided requests (a reconnection, a new leader): their late statuses do not lower the credit
  // of the requests asked since, and their late messages only lower it (never below zero).
  credit.Forget();
  credit.Delivered();
  CHECK(credit.credit() == 0);
  credit.Asked(2);
  CHECK_FALSE(credit.Ended(1, 400));
  CHECK(credit.credit() == kBatch);
  // A pending count above a batch is the server's mistake: at most a batch is taken off.
  CHECK(credit.Ended(2, 10 * kBatch));
  CHECK(credit.credit() == 0);
}

TEST_CASE("pull_statuses_end_their_request_with_the_pending_count_the_server_gives", "[broker]") {
  CHECK(InterpretPullStatus(PullStatusOf("100", "Idle Heartbeat"), kBatch, kMaxBytes).kind == Kind::Ignore);
  auto timeout = InterpretPullStatus(PullStatusOf("408", "Request Timeout", 486, kMaxBytes - 1000), kBatch, kMaxBytes);
  CHECK((timeout.kind == Kind::Ended && timeout.pending == 486));
  // Refused outright, with no count: nothing of it was delivered.
  auto no_messages = InterpretPullStatus(PullStatusOf("404", "No Messages"), kBatch, kMaxBytes);
  CHECK((no_messages.kind == Kind::Ended && no_messages.pending == kBatch));
  auto waiting = InterpretPullStatus(PullStatusOf("409", "Exceeded MaxWaiting"), kBatch, kMaxBytes);
  CHECK((waiting.kind == Kind::Ended && waiting.pending == kBatch));
  auto completed = InterpretPullStatus(PullStatusOf("409", "Batch Completed", 0, 5), kBatch, kMaxBytes);
  CHECK((completed.kind == Kind::Ended && completed.pending == 0));
  auto bytes = InterpretPullStatus(PullStatusOf("409", "Message Size Exceeds MaxBytes", 300, 1000), kBatch, kMaxBytes);
  CHECK((bytes.kind == Kind::Ended && bytes.pending == 300));
  CHECK(InterpretPullStatus(PullStatusOf("409", "Leadership Change"), kBatch, kMaxBytes).kind == Kind::AllEnded);
}

TEST_CASE("a_message_larger_than_a_whole_request_budget_and_a_deleted_consumer_stop_reading", "[broker]") {
  // The request's whole budget was left and the next message still did not fit: asking again
  // would loop forever on the same message.
  auto alone = InterpretPullStatus(PullStatusOf("409", "Message Size Exceeds MaxBytes", kBatch, kMaxBytes), kBatch, kMaxBytes);
  CHECK(alone.kind == Kind::Fatal);
  CHECK_THAT(alone.message, Catch::Contains("larger than a pull request's whole byte budget of 33554432 bytes"));
  auto deleted = InterpretPullStatus(PullStatusOf("409", "Consumer Deleted"), kBatch, kMaxBytes);
  CHECK(deleted.kind == Kind::Fatal);
  CHECK(deleted.message == "answered 409 Consumer Deleted");
  // A limit of the consumer's configuration is not the byte budget of one message.
  CHECK(InterpretPullStatus(PullStatusOf("409", "Exceeded MaxRequestMaxBytes of 1024"), kBatch, kMaxBytes).kind == Kind::Fatal);
  CHECK(InterpretPullStatus(PullStatusOf("400", "Bad Request - invalid json"), kBatch, kMaxBytes).kind == Kind::Fatal);
}

}  // namespace unit_broker_pull_credit_test
