// relay_progress.cpp — acknowledgement bookkeeping for the relay (see relay_progress.h).
#include "trellara/relay_progress.h"

#include <cassert>

namespace trellara {

bool CompletesTransaction(uint8_t frame_type) {
  return frame_type == 1 /* envelope */ || frame_type == 4 /* commit marker */ || frame_type == kProgressRecordType;
}

void AckTracker::Appended(uint64_t offset, uint8_t frame_type, uint64_t commit_lsn) {
  assert(pending_.empty() || pending_.back().offset < offset);
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
                         uint64_t decoded_end_lsn, uint64_t now_us, uint64_t last_progress_us) {
  if (!all_durable || decoded_end_lsn <= covered_lsn) return false;
  if (decoded_end_lsn - covered_lsn >= policy.min_gap_bytes) return true;
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
