// relay_progress.h — the relay's acknowledgement decisions: how far the slot may be confirmed.
//
// DESIGN §2, source -> log: the slot's confirmed_flush advances only to the commit LSN of the last
// transaction whose every frame is durable. The relay reports each appended frame here; AckTracker
// answers, for a given durable end offset, the highest source LSN that is safe to confirm.
// Progress markers (kProgressRecordType frames carrying an LSN) let an idle or filtered flow
// confirm past WAL that produced no records, while the log still states how far it covers the
// source: the covered LSN of a log is the commit LSN of its last durable completing frame.
// Nothing here touches Postgres or the disk.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

namespace trellara {

// Frame types of a flow log (the log treats them as opaque bytes): 1..4 are the Record bodies
// (envelope, chunk, manifest, commit marker); 5 is a relay progress marker.
inline constexpr uint8_t kProgressRecordType = 5;

// True for frames after which the log is complete up to the frame's commit LSN: an Envelope,
// a CommitMarker, or a progress marker. Chunks and Manifests are not: their transaction is whole
// only with its CommitMarker.
bool CompletesTransaction(uint8_t frame_type);

class AckTracker {
 public:
  // `covered_lsn`: what the log already covers when the relay starts (see CoveredLsnOfLog).
  explicit AckTracker(uint64_t covered_lsn) : confirmable_lsn_(covered_lsn) {}

  // A frame was appended at `offset`; `commit_lsn` is its transaction's commit LSN (or the
  // progress marker's LSN). Offsets must increase.
  void Appended(uint64_t offset, uint8_t frame_type, uint64_t commit_lsn);
  // Every offset below `durable_end` is durable: returns the LSN that may now be confirmed.
  uint64_t Durable(uint64_t durable_end);

  uint64_t confirmable_lsn() const { return confirmable_lsn_; }
  bool all_durable() const { return pending_.empty(); }
  size_t pending_frames() const { return pending_.size(); }

 private:
  struct Pending {
    uint64_t offset;
    bool completes;
    uint64_t commit_lsn;
  };
  std::deque<Pending> pending_;
  uint64_t confirmable_lsn_;
};

// Whether to write a progress marker: nothing is pending, the decoder has moved past what the log
// covers, and either the gap is large (WAL retention) or time has passed since the last marker.
struct ProgressPolicy {
  uint64_t min_gap_bytes = 16ull << 20;  // always mark once the decoder is this far ahead
  uint64_t interval_us = 10'000'000;     // otherwise mark at most this often
};
bool ShouldWriteProgress(const ProgressPolicy& policy, bool all_durable, uint64_t covered_lsn,
                         uint64_t decoded_end_lsn, uint64_t now_us, uint64_t last_progress_us);

}  // namespace trellara

namespace trellara {
// Delay before restarting a relay worker after `consecutive_failures` failures in a row:
// 1 s, 2 s, 4 s, ... capped at 60 s; 0 when there was no failure.
uint64_t RestartBackoffMs(int consecutive_failures);
}  // namespace trellara
