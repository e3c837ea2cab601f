// apply_retry_test.cpp — the transient table, the backoff and the continuity rule.
#include <catch2/catch.hpp>

#include <set>

#include "trellara/apply/apply_retry.h"
#include "trellara/record/envelope.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_apply_retry_test {

using namespace trellara;

TEST_CASE("transient_sqlstates_are_retried_and_everything_else_is_not", "[retry]") {
  for (const char* code : {"40001", "40P01", "55P03", "57014", "57P01", "57P02", "57P03", "53300", "25006", "08000",
                           "08003", "08006", "08001", "08004", "08P01"})
    CHECK(IsTransientFailure(code, false));
  // A lost connection is transient with or without a SQLSTATE.
  CHECK(IsTransientFailure("", true));
  CHECK(IsTransientFailure("23505", true));
  CHECK(TransientName("") == "connection_failure");
  CHECK(TransientName("40P01") == "deadlock_detected");
  CHECK(TransientName("08006") == "connection_exception");
  // The transaction's own failures are quarantined, never retried.
  for (const char* code : {"23505", "23503", "42P01", "42703", "TR001", "TR002", "22P02", "XX000", "53100", "58030",
                           "53200", "40002", "55000", "55006", "57000", "0800", "08"})
    CHECK_FALSE(IsTransientFailure(code, false));
  CHECK(TransientSqlstates().size() == 10);
}

TEST_CASE("backoff_doubles_with_jitter_up_to_the_cap_and_resets", "[retry]") {
  RetryBackoff backoff(BackoffPolicy{200, 30000}, 42);
  uint64_t base = 200;
  for (uint32_t attempt = 1; attempt <= 20; attempt++) {
    const uint64_t wait = backoff.NextDelayMs();
    CHECK(backoff.attempt() == attempt);
    CHECK(wait >= base / 2);
    CHECK(wait <= base);
    CHECK(wait <= 30000);
    base = std::min<uint64_t>(base * 2, 30000);
  }
  backoff.Reset();
  CHECK(backoff.NextDelayMs() <= 200);
  CHECK(backoff.attempt() == 1);
}

TEST_CASE("backoff_jitter_is_reproducible_from_its_seed_and_varies", "[retry]") {
  RetryBackoff a(BackoffPolicy{}, 7), b(BackoffPolicy{}, 7), c(BackoffPolicy{}, 8);
  std::set<uint64_t> seen;
  bool differs = false;
  for (int i = 0; i < 12; i++) {
    const uint64_t x = a.NextDelayMs();
    CHECK(x == b.NextDelayMs());
    differs = differs || x != c.NextDelayMs();
    if (i >= 8) seen.insert(x);  // at the cap: jitter in [15 s, 30 s]
  }
  CHECK(differs);
  CHECK(seen.size() > 1);
}

namespace {
ContinuityFacts Behind() {
  ContinuityFacts f;
  f.flow = "app";
  f.origin_progress_lsn = 0x1000;
  f.consumer_offset = 500;
  f.claimed_lsn = 0x5000;
  f.log_first_offset = 0;
  f.log_first_lsn = 0x100;
  f.first_offset_after_progress = 120;
  return f;
}
}  // namespace

TEST_CASE("target_at_or_past_the_consumer_offset_continues", "[retry][continuity]") {
  ContinuityFacts f = Behind();
  f.origin_progress_lsn = 0x5000;
  CHECK(DecideContinuity(f).action == ContinuityAction::Continue);
  f.origin_progress_lsn = 0x6000;  // ahead: the offset was written before the latest commits
  CHECK(DecideContinuity(f).action == ContinuityAction::Continue);
  f.claimed_lsn.reset();  // nothing below the offset left in the log: nothing to compare
  f.origin_progress_lsn = 0;
  CHECK(DecideContinuity(f).action == ContinuityAction::Continue);
}

TEST_CASE("target_behind_rewinds_when_the_log_holds_the_gap", "[retry][continuity]") {
  ContinuityFacts f = Behind();
  auto d = DecideContinuity(f);
  REQUIRE(d.action == ContinuityAction::Rewind);
  CHECK(d.rewind_to_offset == 120);
  CHECK_THAT(d.message, Catch::Contains("event=rewind") && Catch::Contains("rewind_to_offset=120") &&
                            Catch::Contains("origin_progress=" + FormatLsn(0x1000)) &&
                            Catch::Contains("consumer_offset=500"));
  // Segments reclaimed, but the first retained transaction is at or below the progress.
  f.log_first_offset = 100;
  f.log_first_lsn = 0x1000;
  CHECK(DecideContinuity(f).action == ContinuityAction::Rewind);
  // A target that never applied anything (origin progress none) and a log from offset 0.
  f = Behind();
  f.origin_progress_lsn = 0;
  f.first_offset_after_progress = 0;
  d = DecideContinuity(f);
  CHECK(d.action == ContinuityAction::Rewind);
  CHECK(d.rewind_to_offset == 0);
}

TEST_CASE("target_behind_refuses_with_the_gap_when_the_log_was_reclaimed", "[retry][continuity]") {
  ContinuityFacts f = Behind();
  f.log_first_offset = 300;
  f.log_first_lsn = 0x3000;
  f.first_offset_after_progress = 300;  // the first the log holds, but the gap starts earlier
  auto d = DecideContinuity(f);
  REQUIRE(d.action == ContinuityAction::Refuse);
  CHECK_THAT(d.message, Catch::Contains("is at " + FormatLsn(0x1000)) && Catch::Contains("consumer offset 500") &&
                            Catch::Contains("commit " + FormatLsn(0x5000)) &&
                            Catch::Contains("first offset it holds is 300") &&
                            Catch::Contains("commits at " + FormatLsn(0x3000)) && Catch::Contains("Reseed"));
  // The first retained transaction just past the progress does not prove nothing is missing.
  f.log_first_lsn = 0x1001;
  CHECK(DecideContinuity(f).action == ContinuityAction::Refuse);
}

}  // namespace unit_apply_retry_test
