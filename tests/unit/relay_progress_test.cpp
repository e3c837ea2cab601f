// relay_progress_test.cpp — the source->log acknowledgement rule as a pure decision: the slot is
// confirmed only to the commit LSN of the last transaction whose every frame is durable.
#include <catch2/catch.hpp>

#include "trellara/relay_progress.h"

using namespace trellara;

TEST_CASE("confirm_follows_last_fully_durable_transaction", "[relay]") {
  AckTracker t(0x100);
  t.Appended(0, 1, 0x200);  // envelope tx A
  t.Appended(1, 2, 0x300);  // chunk of tx B
  t.Appended(2, 2, 0x300);  // chunk of tx B
  t.Appended(3, 3, 0x300);  // manifest of tx B
  t.Appended(4, 4, 0x300);  // commit marker of tx B
  CHECK(t.Durable(0) == 0x100);  // nothing durable: the start position, never less
  CHECK(t.Durable(1) == 0x200);  // A is whole
  CHECK(t.Durable(3) == 0x200);  // B's chunks are durable but B is not whole
  CHECK(t.Durable(4) == 0x200);  // manifest durable, marker not
  CHECK_FALSE(t.all_durable());
  CHECK(t.Durable(5) == 0x300);
  CHECK(t.all_durable());
}

TEST_CASE("confirmed_position_never_moves_backwards", "[relay]") {
  AckTracker t(0x500);
  t.Appended(10, 1, 0x400);  // re-decoded transaction below what the log covered
  CHECK(t.Durable(11) == 0x500);
}

TEST_CASE("progress_marker_covers_idle_wal", "[relay]") {
  AckTracker t(0x100);
  t.Appended(0, kProgressRecordType, 0x9000);
  CHECK(t.Durable(1) == 0x9000);
  CHECK(CompletesTransaction(kProgressRecordType));
  CHECK_FALSE(CompletesTransaction(2));
  CHECK_FALSE(CompletesTransaction(3));
}

TEST_CASE("progress_is_written_only_when_idle_and_behind", "[relay]") {
  ProgressPolicy p{1000, 5'000'000};
  CHECK_FALSE(ShouldWriteProgress(p, false, 0, 5000, 10'000'000, 0));  // records pending
  CHECK_FALSE(ShouldWriteProgress(p, true, 5000, 5000, 10'000'000, 0));  // nothing new
  CHECK(ShouldWriteProgress(p, true, 0, 1000, 1, 0));                    // gap reached
  CHECK_FALSE(ShouldWriteProgress(p, true, 0, 10, 1'000'000, 0));        // small gap, too soon
  CHECK(ShouldWriteProgress(p, true, 0, 10, 5'000'000, 0));              // small gap, interval passed
}

TEST_CASE("restart_backoff_doubles_and_is_capped", "[relay]") {
  CHECK(RestartBackoffMs(0) == 0);
  CHECK(RestartBackoffMs(1) == 1000);
  CHECK(RestartBackoffMs(2) == 2000);
  CHECK(RestartBackoffMs(6) == 32000);
  CHECK(RestartBackoffMs(7) == 60000);
  CHECK(RestartBackoffMs(100) == 60000);
}
