// relay_progress_test.cpp — the source->log acknowledgement rule as a pure decision: the slot is
// confirmed only to the commit LSN of the last transaction whose every frame is durable.
#include <catch2/catch.hpp>

#include "trellara/capture/relay_progress.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_relay_progress_test {

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

TEST_CASE("a_requested_progress_marker_is_written_at_once_until_the_log_covers_it", "[relay]") {
  ProgressPolicy p{1000, 5'000'000};
  // A verify asked for coverage through 500: the next pass that decoded past what the log covers
  // writes a marker at once, however soon after the last one.
  CHECK(ShouldWriteProgress(p, true, 100, 200, 1, 0, 500));   // decoded 200: marker at 200, log still short of 500
  CHECK(ShouldWriteProgress(p, true, 200, 600, 2, 1, 500));   // decoded 600: marker at 600 covers it
  CHECK_FALSE(ShouldWriteProgress(p, true, 600, 700, 3, 2, 500));  // covered: back to the interval
  CHECK_FALSE(ShouldWriteProgress(p, false, 100, 600, 1, 0, 500));  // records pending: they cover it first
  CHECK_FALSE(ShouldWriteProgress(p, true, 100, 100, 1, 0, 500));   // nothing decoded past the log yet
}

TEST_CASE("restart_backoff_doubles_and_is_capped", "[relay]") {
  CHECK(RestartBackoffMs(0) == 0);
  CHECK(RestartBackoffMs(1) == 1000);
  CHECK(RestartBackoffMs(2) == 2000);
  CHECK(RestartBackoffMs(6) == 32000);
  CHECK(RestartBackoffMs(7) == 60000);
  CHECK(RestartBackoffMs(100) == 60000);
}

// --- the restart rule ---------------------------------------------------------------------------
namespace {
constexpr uint8_t kEnvelope = 1, kChunk = 2, kManifest = 3, kMarker = 4;
}

TEST_CASE("restart_resumes_after_last_completing_frame", "[relay][restart]") {
  std::vector<TailFrame> tail = {{41, kEnvelope, 0x5000}};
  RestartDecision d = DecideRestart(tail, 0x4000, LogStartRecord{0x100}, "app");
  CHECK(d.kind == RestartDecision::Kind::kResume);
  CHECK(d.covered_lsn == 0x5000);  // crash between fsync and confirm: the log is ahead of the slot
  CHECK(d.skip_through_lsn == 0x5000);
  CHECK_FALSE(d.torn_commit_lsn.has_value());
}

TEST_CASE("torn_chunked_tail_is_redecoded_not_skipped", "[relay][restart]") {
  // Tail: chunks and the manifest of the transaction committed at 0x9000, no commit marker; before
  // them the commit marker of 0x7000. DurableTail.commit_lsn would say 0x9000: skipping through it
  // would lose that transaction. The rule skips only through 0x7000.
  std::vector<TailFrame> tail = {{20, kManifest, 0x9000}, {19, kChunk, 0x9000}, {18, kChunk, 0x9000},
                                 {17, kMarker, 0x7000}};
  RestartDecision d = DecideRestart(tail, 0x7000, LogStartRecord{0x100}, "app");
  CHECK(d.kind == RestartDecision::Kind::kResume);
  CHECK(d.covered_lsn == 0x7000);
  CHECK(d.skip_through_lsn == 0x7000);
  REQUIRE(d.torn_commit_lsn.has_value());
  CHECK(*d.torn_commit_lsn == 0x9000);
  CHECK(d.torn_frames == 3);
}

TEST_CASE("torn_tail_without_any_completing_frame_skips_only_what_the_slot_confirmed", "[relay][restart]") {
  std::vector<TailFrame> tail = {{3, kChunk, 0x9000}, {2, kChunk, 0x9000}};
  RestartDecision d = DecideRestart(tail, 0x8000, LogStartRecord{}, "app");
  CHECK(d.kind == RestartDecision::Kind::kResume);
  CHECK(d.skip_through_lsn == 0x8000);
  // The same tail when the slot was confirmed to the torn transaction: its marker was lost.
  RestartDecision lost = DecideRestart(tail, 0x9000, LogStartRecord{}, "app");
  CHECK(lost.kind == RestartDecision::Kind::kRefuse);
  CHECK(lost.reason.find("acknowledged frames were lost") != std::string::npos);
}

TEST_CASE("fresh_log_of_a_new_flow_starts", "[relay][restart]") {
  RestartDecision d = DecideRestart({}, 0x3000, LogStartRecord{}, "app");
  CHECK(d.kind == RestartDecision::Kind::kFreshLog);
  CHECK(d.skip_through_lsn == 0);
}

TEST_CASE("continuity_refuses_an_emptied_log_directory", "[relay][restart][continuity]") {
  RestartDecision d = DecideRestart({}, 0x3000, LogStartRecord{0x1000}, "app");
  CHECK(d.kind == RestartDecision::Kind::kRefuse);
  CHECK(d.reason.find("holds no records") != std::string::npos);
  CHECK(d.reason.find("0/1000") != std::string::npos);
  CHECK(d.reason.find("0/3000") != std::string::npos);
  CHECK(d.remedy.find("reseed") != std::string::npos);
  CHECK(d.remedy.find("drop_flow('app', true)") != std::string::npos);
}

TEST_CASE("continuity_refuses_a_log_behind_the_slot", "[relay][restart][continuity]") {
  // An older copy restored, or acknowledged frames truncated: the log ends at 0x5000 while the
  // slot was confirmed to 0x6000 because the log once held more.
  std::vector<TailFrame> tail = {{9, kEnvelope, 0x5000}};
  RestartDecision d = DecideRestart(tail, 0x6000, LogStartRecord{0x1000}, "app");
  CHECK(d.kind == RestartDecision::Kind::kRefuse);
  CHECK(d.reason.find("covers the source only through 0/5000 (offset 9)") != std::string::npos);
  CHECK(d.reason.find("confirmed to 0/6000") != std::string::npos);
  // Equal is fine: the log covers exactly what was confirmed.
  CHECK(DecideRestart(tail, 0x5000, LogStartRecord{0x1000}, "app").kind == RestartDecision::Kind::kResume);
  // A torn tail does not count as coverage: chunks of 0x6000 without their marker.
  std::vector<TailFrame> torn = {{10, kChunk, 0x6000}, {9, kEnvelope, 0x5000}};
  CHECK(DecideRestart(torn, 0x6000, LogStartRecord{0x1000}, "app").kind == RestartDecision::Kind::kRefuse);
}

TEST_CASE("progress_marker_counts_as_coverage", "[relay][restart]") {
  std::vector<TailFrame> tail = {{0, kProgressRecordType, 0x2000}};
  RestartDecision d = DecideRestart(tail, 0x2000, LogStartRecord{0x2000}, "app");
  CHECK(d.kind == RestartDecision::Kind::kResume);
  CHECK(d.skip_through_lsn == 0x2000);
}

TEST_CASE("relay_failures_are_classified_retry_or_uncapturable", "[relay][restart]") {
  using K = RelayFailureKind;
  CHECK(ClassifyRelayFailure("54000", true, 0) == K::kUncapturable);  // record or buffer too large
  CHECK(ClassifyRelayFailure("22021", true, 0) == K::kUncapturable);
  CHECK(ClassifyRelayFailure("XX001", true, 0) == K::kUncapturable);
  CHECK(ClassifyRelayFailure("54000", false, 0) == K::kRetry);  // not about a transaction
  CHECK(ClassifyRelayFailure("58030", true, 10) == K::kRetry);   // I/O (disk full): retried forever
  CHECK(ClassifyRelayFailure("53200", true, 10) == K::kRetry);
  // An unknown error on the same transaction: retried, then uncapturable (never a restart loop).
  CHECK(ClassifyRelayFailure("XX000", true, 0) == K::kRetry);
  CHECK(ClassifyRelayFailure("XX000", true, kPoisonTransactionFailures - 2) == K::kRetry);
  CHECK(ClassifyRelayFailure("XX000", true, kPoisonTransactionFailures - 1) == K::kUncapturable);
}

TEST_CASE("continuity_refuses_a_left_over_log_of_an_earlier_flow", "[relay][restart][continuity]") {
  // A new flow (no log started) whose directory holds an old log ending before its slot.
  std::vector<TailFrame> tail = {{30, kEnvelope, 0x5000}};
  RestartDecision d = DecideRestart(tail, 0x9000, LogStartRecord{}, "app");
  CHECK(d.kind == RestartDecision::Kind::kRefuse);
  CHECK(d.reason.find("that this flow did not write") != std::string::npos);
  CHECK(d.remedy.find("drop_flow('app', true)") != std::string::npos);
  // A log from before log_started_lsn existed, ahead of the slot: resumed as before.
  CHECK(DecideRestart(tail, 0x4000, LogStartRecord{}, "app").kind == RestartDecision::Kind::kResume);
}

}  // namespace unit_relay_progress_test
