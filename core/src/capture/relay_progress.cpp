// relay_progress.cpp — acknowledgement bookkeeping for the relay (see relay_progress.h).
#include "trellara/capture/relay_progress.h"

#include "trellara/record/envelope.h"

#include <cstdio>
#include <cstring>

#include "trellara/base/assert.h"
#include "trellara/record/record_type.h"

namespace trellara {

bool CompletesTransaction(uint8_t frame_type) {
  return EndsTransaction(frame_type) || frame_type == kProgressRecordType;
}

std::vector<uint8_t> EncodeProgressMarker(uint64_t lsn, int64_t source_time_us) {
  std::vector<uint8_t> out(16);
  for (int i = 0; i < 8; i++) out[static_cast<size_t>(i)] = static_cast<uint8_t>(lsn >> (8 * i));
  const uint64_t time = static_cast<uint64_t>(source_time_us);
  for (int i = 0; i < 8; i++) out[static_cast<size_t>(8 + i)] = static_cast<uint8_t>(time >> (8 * i));
  return out;
}

std::optional<ProgressMarker> DecodeProgressMarker(const uint8_t* payload, size_t size) {
  if (size != 8 && size != 16) return std::nullopt;
  ProgressMarker marker;
  for (int i = 0; i < 8; i++) marker.lsn |= static_cast<uint64_t>(payload[i]) << (8 * i);
  if (size == 16) {
    uint64_t time = 0;
    for (int i = 0; i < 8; i++) time |= static_cast<uint64_t>(payload[8 + i]) << (8 * i);
    marker.source_time_us = static_cast<int64_t>(time);
  }
  return marker;
}

void AckTracker::Appended(uint64_t offset, uint8_t frame_type, uint64_t commit_lsn) {
  TRELLARA_ASSERT(pending_.empty() || pending_.back().offset < offset,
                  "the relay appended offset " + std::to_string(offset) + " after offset " +
                      std::to_string(pending_.back().offset) + ": log offsets are strictly increasing");
  pending_.push_back(Pending{offset, CompletesTransaction(frame_type), commit_lsn});
}

uint64_t AckTracker::Durable(uint64_t durable_end) {
  while (!pending_.empty() && pending_.front().offset < durable_end) {
    const Pending& p = pending_.front();
    // Confirmed positions never move backwards.
    if (p.completes && p.commit_lsn > confirmable_lsn_) confirmable_lsn_ = p.commit_lsn;
    pending_.pop_front();
  }
  return confirmable_lsn_;
}

bool ShouldWriteProgress(const ProgressPolicy& policy, bool all_durable, uint64_t covered_lsn,
                         uint64_t decoded_end_lsn, uint64_t now_us, uint64_t last_progress_us,
                         uint64_t requested_lsn) {
  if (!all_durable || decoded_end_lsn <= covered_lsn) return false;
  if (decoded_end_lsn - covered_lsn >= policy.min_gap_bytes) return true;
  if (requested_lsn > covered_lsn) return true;
  return now_us - last_progress_us >= policy.interval_us;
}

}  // namespace trellara

namespace trellara {
uint64_t RestartBackoffMs(int consecutive_failures) {
  if (consecutive_failures <= 0) return 0;
  int shift = consecutive_failures - 1 > 6 ? 6 : consecutive_failures - 1;
  uint64_t ms = 1000ull << shift;
  return ms > 60'000 ? 60'000 : ms;
}
}  // namespace trellara

namespace trellara {
namespace {
std::string Lsn(uint64_t lsn) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%X/%X", static_cast<unsigned>(lsn >> 32), static_cast<unsigned>(lsn));
  return buf;
}
}  // namespace

RestartDecision DecideRestart(const std::vector<TailFrame>& newest_first, uint64_t slot_confirmed_lsn,
                              const LogStartRecord& start, const std::string& flow) {
  RestartDecision d;
  const std::string remedy =
      " The log no longer holds every transaction the source was told is safe, so the flow cannot "
      "continue without a hole.";
  d.remedy = "restore the log directory that holds the missing transactions, or recreate the flow (SELECT "
             "trellara.drop_flow('" + flow + "', true); SELECT trellara.create_flow('" + flow +
             "', ...)) and reseed the target (trellara reseed)";
  if (newest_first.empty()) {
    if (start.started_lsn.has_value()) {
      d.kind = RestartDecision::Kind::kRefuse;
      d.reason = "the log of flow \"" + flow + "\" holds no records, but it was started at " +
                 Lsn(*start.started_lsn) + " and the slot is confirmed to " + Lsn(slot_confirmed_lsn) +
                 ": the log directory was deleted or emptied." + remedy;
      return d;
    }
    d.kind = RestartDecision::Kind::kFreshLog;
    d.covered_lsn = 0;
    d.skip_through_lsn = 0;
    return d;
  }
  size_t completing = newest_first.size();
  for (size_t i = 0; i < newest_first.size(); i++) {
    if (CompletesTransaction(newest_first[i].type)) {
      completing = i;
      break;
    }
  }
  if (completing > 0) {
    // Frames after the last completing one: an incomplete (torn) chunked transaction.
    d.torn_commit_lsn = newest_first[0].commit_lsn;
    d.torn_frames = completing;
  }
  if (completing == newest_first.size()) {
    // No completing frame reachable (the log starts inside a chunked transaction, e.g. after
    // retention): nothing the slot confirmed can be at or after these frames' transaction, because
    // confirming needs its commit marker durable. The slot's position is what the log covers.
    if (d.torn_commit_lsn.has_value() && *d.torn_commit_lsn <= slot_confirmed_lsn) {
      d.kind = RestartDecision::Kind::kRefuse;
      d.reason = "the log of flow \"" + flow + "\" ends inside the transaction committed at " +
                 Lsn(*d.torn_commit_lsn) + " (no commit marker), but the slot is confirmed to " +
                 Lsn(slot_confirmed_lsn) + ": acknowledged frames were lost." + remedy;
      return d;
    }
    d.kind = RestartDecision::Kind::kResume;
    d.covered_lsn = slot_confirmed_lsn;
    d.skip_through_lsn = slot_confirmed_lsn;
    return d;
  }
  d.covered_lsn = newest_first[completing].commit_lsn;
  if (d.covered_lsn < slot_confirmed_lsn && !start.started_lsn.has_value()) {
    // This flow never started a log, yet the directory holds one that ends before the slot's
    // position: it was left by an earlier flow (drop_flow keeps the directory) or belongs to
    // another one. Appending to it would put a hole inside one log.
    d.kind = RestartDecision::Kind::kRefuse;
    d.reason = "the log directory of flow \"" + flow + "\" already holds records (through " + Lsn(d.covered_lsn) +
               ", offset " + std::to_string(newest_first[completing].offset) +
               ") that this flow did not write: its slot starts at " + Lsn(slot_confirmed_lsn) +
               ". It is the log of an earlier flow of the same name (drop_flow keeps the directory) or of "
               "another flow.";
    d.remedy = "move that directory away (or SELECT trellara.drop_flow('" + flow +
               "', true) and create the flow again), then SELECT trellara.start_flow('" + flow +
               "'); reseed the target if it followed the old log";
    return d;
  }
  if (d.covered_lsn < slot_confirmed_lsn) {
    d.kind = RestartDecision::Kind::kRefuse;
    d.reason = "the log of flow \"" + flow + "\" covers the source only through " + Lsn(d.covered_lsn) +
               " (offset " + std::to_string(newest_first[completing].offset) + "), but the slot is confirmed to " +
               Lsn(slot_confirmed_lsn) + ": the transactions committed after " + Lsn(d.covered_lsn) +
               " up to " + Lsn(slot_confirmed_lsn) +
               " are missing (log restored from an older copy, or acknowledged frames lost)." + remedy;
    return d;
  }
  d.kind = RestartDecision::Kind::kResume;
  d.skip_through_lsn = d.covered_lsn;
  return d;
}

RelayFailureKind ClassifyRelayFailure(const char* sqlstate, bool in_transaction,
                                      int earlier_failures_same_transaction) {
  if (!in_transaction || sqlstate == nullptr || std::strlen(sqlstate) != 5) return RelayFailureKind::kRetry;
  auto cls = [&](const char* c) { return std::strncmp(sqlstate, c, 2) == 0; };
  if (cls("54") || cls("22") || std::strcmp(sqlstate, "XX001") == 0) return RelayFailureKind::kUncapturable;
  if (cls("53") || cls("57") || cls("58") || cls("08")) return RelayFailureKind::kRetry;
  return earlier_failures_same_transaction + 1 >= kPoisonTransactionFailures ? RelayFailureKind::kUncapturable
                                                                             : RelayFailureKind::kRetry;
}

}  // namespace trellara
