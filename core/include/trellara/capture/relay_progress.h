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
#include <string>
#include <vector>

#include "trellara/record/record_type.h"

namespace trellara {

// Frame types of a flow log (the log treats them as opaque bytes): 1..4 are the Record bodies
// (envelope, chunk, manifest, commit marker); 5 is a relay progress marker.
inline constexpr uint8_t kProgressRecordType = static_cast<uint8_t>(RecordType::Progress);

// True for frames after which the log is complete up to the frame's commit LSN: an Envelope,
// a CommitMarker, or a progress marker. Chunks and Manifests are not: their transaction is whole
// only with its CommitMarker.
bool CompletesTransaction(uint8_t frame_type);

// A progress marker's payload: the LSN it covers (8 bytes, little-endian) and, since the fleet
// fan-in (docs/lake.md "Store progress"), the source's clock when the relay wrote it (8 more bytes:
// microseconds since the Unix epoch). Markers written before carry the LSN only.
struct ProgressMarker {
  uint64_t lsn = 0;
  std::optional<int64_t> source_time_us;
};
std::vector<uint8_t> EncodeProgressMarker(uint64_t lsn, int64_t source_time_us);
// nullopt when the payload is neither 8 nor 16 bytes.
std::optional<ProgressMarker> DecodeProgressMarker(const uint8_t* payload, size_t size);

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
// covers, and either the gap is large (WAL retention), someone asked for the log to cover an LSN
// it does not cover yet (`requested_lsn`: a verify or reseed --where waiting for the applier to
// reach its source point, trellara.request_progress), or time has passed since the last marker.
struct ProgressPolicy {
  uint64_t min_gap_bytes = 16ull << 20;  // always mark once the decoder is this far ahead
  uint64_t interval_us = 10'000'000;     // otherwise mark at most this often (trellara.progress_interval)
};
bool ShouldWriteProgress(const ProgressPolicy& policy, bool all_durable, uint64_t covered_lsn,
                         uint64_t decoded_end_lsn, uint64_t now_us, uint64_t last_progress_us,
                         uint64_t requested_lsn = 0);

}  // namespace trellara

namespace trellara {

// --- the restart rule (DESIGN §2, source -> log, and "continuity") ------------------------------
//
// On start the relay reads its log backwards from the durable tail, one frame at a time, until it
// reaches a completing frame (CompletesTransaction) or the first frame of the log, and hands those
// frames here, newest first. The rule decides:
//  * what the log covers: the commit LSN of its last durable *completing* frame. Never the commit
//    LSN of the last durable frame (DurableTail.commit_lsn): when the tail is a torn chunked
//    transaction (chunks, maybe its manifest, no commit marker), that LSN belongs to a
//    transaction the log does not hold whole, and skipping through it would lose it;
//  * whether the relay may run: only when the log covers at least the slot's confirmed position.
//    Otherwise the log has a hole (directory deleted, restored from an older copy, acknowledged
//    frames lost) and continuing would confirm or apply past it: refuse, name the gap and the
//    remedy.
// Nothing here reads the disk or talks to Postgres.

struct TailFrame {
  uint64_t offset = 0;
  uint8_t type = 0;
  uint64_t commit_lsn = 0;
};

// What the flow's catalog remembers about its log: the LSN its first frame (the start marker)
// covered, once the relay has started the log. Absent for a flow whose log was never started.
struct LogStartRecord {
  std::optional<uint64_t> started_lsn;
};

struct RestartDecision {
  enum class Kind {
    kFreshLog,  // empty log of a flow that never started one: write a start marker at the slot's
                // confirmed position, then decode from there
    kResume,    // decode with skip_through_lsn = covered_lsn
    kRefuse,    // the log does not cover the slot's confirmed position: never run
  };
  Kind kind = Kind::kRefuse;
  uint64_t covered_lsn = 0;      // what the log holds whole (0 when nothing)
  uint64_t skip_through_lsn = 0;  // pass to the plugin: transactions at or below are in the log
  // A chunked transaction at the tail without its commit marker (kResume only): it is decoded
  // and written again in full; its durable chunks stay as identical duplicates.
  std::optional<uint64_t> torn_commit_lsn;
  uint64_t torn_frames = 0;
  std::string reason;  // kRefuse: the gap, for a person
  std::string remedy;  // kRefuse: what to do next
};

// `newest_first`: the durable frames read backwards from the tail, ending with the first
// completing frame met (or with the log's first frame). Empty when the log holds no durable frame.
// `log_first_offset`: the offset of the log's first frame (what is not reclaimed).
RestartDecision DecideRestart(const std::vector<TailFrame>& newest_first, uint64_t slot_confirmed_lsn,
                              const LogStartRecord& start, const std::string& flow);

// Errors the relay meets while decoding, sorted into what a restart can cure and what it cannot.
enum class RelayFailureKind {
  kRetry,         // I/O, resources, conflicts: the launcher restarts the relay with backoff
  kUncapturable,  // this transaction can never be captured as decoded (a limit): restarting
                  // would fail on it again forever; the flow halts in an error state
};
// `sqlstate`: the five-character SQLSTATE of the error; `in_transaction`: the error was raised
// while a source transaction was being turned into records; `earlier_failures_same_transaction`:
// how many failures in a row before this one happened on that same transaction (xid and commit
// LSN) with the log not moving in between.
//  * a limit (class 54), a data exception (class 22) or corrupt data (XX001) raised on a
//    transaction is uncapturable at once: the same WAL decodes the same way every time;
//  * any other error that is not about resources, I/O or the operator (classes 53, 57, 58, 08)
//    and repeats on the same transaction kPoisonTransactionFailures times is uncapturable too
//    (an unknown deterministic failure must not become a restart loop);
//  * everything else is retried.
inline constexpr int kPoisonTransactionFailures = 3;
RelayFailureKind ClassifyRelayFailure(const char* sqlstate, bool in_transaction,
                                      int earlier_failures_same_transaction);

// Delay before restarting a relay worker after `consecutive_failures` failures in a row:
// 1 s, 2 s, 4 s, ... capped at 60 s; 0 when there was no failure.
uint64_t RestartBackoffMs(int consecutive_failures);
}  // namespace trellara
