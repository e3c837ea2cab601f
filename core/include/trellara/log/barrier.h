// barrier.h — barrier reassembly: turns log frames, in log order, into whole verified source
// transactions ready to apply (DESIGN §2 "large transaction", §4).
//
// An Envelope is a whole transaction once its own checksum verifies. A chunked transaction is
// whole only when its CommitMarker arrives and binds a Manifest whose every listed chunk is
// present with matching seq, event count and checksum, whose totals and per-relation counts
// match the chunks, and whose total checksum equals the canonical checksum recomputed over the
// chunks' changes in seq order. Anything else fails closed: nothing is yielded, the barrier
// stops (every later Feed returns the same failure) and the applier quarantines the transaction.
//
// Memory stays bounded whatever the transaction size: the barrier never holds chunk changes. It
// streams each chunk's changes into the transaction's running ChangeHasher as the chunk arrives
// and keeps only the chunk's log offset, seq, event count and checksum. The applier re-reads the
// chunks by offset when it applies the transaction (ForEachVerifiedChunk), and each re-read chunk
// is checked again against what the barrier verified.
//
// Accepted log shapes (the relay writes each chunked transaction as chunks 0..n-1, Manifest,
// CommitMarker; after a relay crash it re-emits a transaction whose CommitMarker was not durable):
//   - chunks must arrive in seq order; a chunk whose seq is below the next expected one must be an
//     identical duplicate (same event count and checksum) — counted, not an error; a re-emitted
//     prefix (0..k, then 0..n-1) is therefore accepted any number of times;
//   - the Manifest may arrive before, between or after the chunks (it is only a claim until the
//     CommitMarker); an identical duplicate Manifest is counted, a different one fails;
//   - the CommitMarker decides: at that point everything above must hold.
// Rejected (fail closed, with a reason naming flow, xid, commit LSN, chunk seq, log offset):
//   a chunk seq gap (a chunk arriving before its predecessor), a conflicting duplicate chunk or
//   manifest, a chunk not listed by the manifest, a missing chunk at the marker, a marker without
//   manifest, mismatched totals, counts or checksums, a tampered record, a partitioned manifest
//   (not supported by this applier), an Envelope sharing the identity of an open chunked
//   transaction, and an open transaction orphaned by the log: a later transaction completed (or a
//   relay progress marker covered its commit LSN) while it still lacks its CommitMarker, so it
//   can never complete and applying what follows would skip it.
//
// The barrier never touches the target or the disk, never yields a transaction it has not fully
// verified, and never skips or reorders a transaction.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trellara/record/envelope.h"
#include "trellara/base/result.h"

namespace trellara {

// Limits (TigerStyle: a limit on everything). Exceeding one fails closed with its name.
inline constexpr size_t kBarrierMaxOpenTransactions = 16;
inline constexpr uint32_t kBarrierMaxChunksPerTransaction = 1u << 22;

// One log frame as the log reader returns it. `payload` is only borrowed for the call.
struct LogFrame {
  uint64_t offset = 0;
  uint8_t type = 0;         // 1..4 Record types, 5 relay progress marker (relay_progress.h)
  uint64_t lsn = 0;         // the frame's commit LSN (records) or covered LSN (progress marker)
  std::span<const uint8_t> payload;
};

// Where a verified chunk lives in the log and what it must still be when re-read.
struct ChunkLocation {
  uint64_t offset = 0;  // first copy seen in the log
  uint32_t seq = 0;
  uint32_t partition_id = 0;
  uint32_t event_count = 0;
  Sha256 checksum{};
  uint32_t partition_seq = 0;  // partitioned: the chunk's sequence within its partition
  bool operator==(const ChunkLocation&) const = default;
};

// A whole, verified source transaction.
struct ReadyTransaction {
  TxIdentity tx;
  uint64_t begin_lsn = 0;
  int64_t commit_time_us = 0;
  // The transaction checksum: the Envelope's, or the Manifest's total checksum. Both are the same
  // canonical hash over the changes in order, so it does not depend on how the relay chunked the
  // transaction; it is what the dedup row records.
  Sha256 checksum{};
  uint64_t total_changes = 0;
  std::vector<RelationCount> counts;

  std::optional<Envelope> envelope;  // set for a whole (unchunked) transaction
  std::optional<Manifest> manifest;  // set for a chunked transaction
  std::vector<ChunkLocation> chunks;  // chunked: seq order, chunks[i].seq == i

  uint64_t first_offset = 0;   // lowest log offset this transaction needs (its first chunk)
  uint64_t end_offset = 0;     // offset just after its completing frame (Envelope / CommitMarker)
  uint32_t duplicate_chunks = 0;

  bool chunked() const { return manifest.has_value(); }
  bool partitioned() const { return manifest && manifest->boundary_mode == BoundaryMode::Partitioned; }
};

// Why the barrier stopped. `tx` is empty when the failing frame names no transaction (an
// undecodable record, an unknown frame type).
struct BarrierFailure {
  std::optional<TxIdentity> tx;
  uint64_t offset = 0;        // log offset of the frame that revealed the failure
  std::string reason;         // for a person: what, on which object, and what it means
};

struct BarrierStats {
  uint64_t envelopes = 0;
  uint64_t chunked_transactions = 0;
  uint64_t chunks = 0;              // distinct chunks accepted
  uint64_t duplicate_chunks = 0;    // identical re-emitted chunks tolerated
  uint64_t duplicate_manifests = 0;
  uint64_t progress_markers = 0;
  // The source's clock in the newest progress marker that carried one (capture/relay_progress.h).
  std::optional<int64_t> last_progress_time_us;
};

// What the barrier is waiting for (for `status` and for --until-caught-up at a live tail).
struct OpenTransactionInfo {
  TxIdentity tx;
  uint64_t first_offset = 0;
  uint32_t chunks_received = 0;
  bool manifest_received = false;
  uint32_t chunks_expected = 0;  // from the manifest, 0 before it
};

class TransactionBarrier {
 public:
  TransactionBarrier();
  ~TransactionBarrier();
  TransactionBarrier(const TransactionBarrier&) = delete;
  TransactionBarrier& operator=(const TransactionBarrier&) = delete;
  TransactionBarrier(TransactionBarrier&&) noexcept;
  TransactionBarrier& operator=(TransactionBarrier&&) noexcept;

  // Feeds the next frame in log order (offsets must increase). Returns a transaction when the
  // frame completes one, nothing when more frames are needed, or the failure (fail closed).
  Result<std::optional<ReadyTransaction>> Feed(const LogFrame& frame);

  // The log is final (a closed log, a test, an inspection): any transaction still open — chunks
  // or a manifest without a commit marker — is a failure. A live applier at the durable tail
  // does NOT call this: an open transaction there is simply still being written.
  Status FinishFinalInput();

  // Lowest log offset the barrier still needs (first chunk of an open transaction), if any. The
  // applier must not advance its consumer offset past it: a restart re-reads from there.
  std::optional<uint64_t> RetainFromOffset() const;

  std::vector<OpenTransactionInfo> OpenTransactions() const;
  const std::optional<BarrierFailure>& failure() const;
  const BarrierStats& stats() const;

  // Hands every newly accepted chunk (not an identical duplicate), after the barrier has verified
  // it and added its changes to the transaction's checksum, to `sink` with its log offset — for a
  // VerifiedChunkCache, so the applier need not decode and hash it again. Unset: nothing handed.
  void SetChunkSink(std::function<void(uint64_t offset, Chunk&& chunk)> sink);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Decoded chunks the barrier verified (TransactionBarrier::SetChunkSink), kept so that the
// applier's pass over a chunked transaction neither decodes nor hashes them a second time. Bounded:
// a chunk that would take the estimated size past `bytes_max` is not kept (the pass re-reads it
// from the log as before). The applier clears it once a transaction is handled and whenever it
// resets its barrier, so only chunks of transactions still to be applied are held.
class VerifiedChunkCache {
 public:
  explicit VerifiedChunkCache(uint64_t bytes_max) : bytes_max_(bytes_max) {}
  // Keeps `chunk`, verified by the barrier at log offset `offset`, if it fits; false if not.
  bool Offer(uint64_t offset, Chunk&& chunk);
  const Chunk* Find(uint64_t offset) const;
  void Clear();
  uint64_t bytes() const { return bytes_; }
  uint64_t refused() const { return refused_; }  // chunks not kept: over bytes_max

 private:
  uint64_t bytes_max_;
  uint64_t bytes_ = 0;
  uint64_t refused_ = 0;
  std::map<uint64_t, Chunk> chunks_;
};

// Estimated heap and object bytes of a decoded chunk (what VerifiedChunkCache counts).
uint64_t EstimatedBytes(const Chunk& chunk);

// Re-reads the chunks of a ready chunked transaction in seq order, checks each against what the
// barrier verified (identity, seq, event count, checksum, its own checksum) and recomputes the
// total checksum, then hands each chunk to `visit` one at a time. `read` returns the payload of
// the frame at a log offset. A visit error stops the walk and is returned as is. A mismatch
// (the log changed under the applier) fails before the chunk is visited; the total-checksum
// check comes after the last visit, so the applier must treat a failure as "roll back".
// A chunk found in `cache` at its location's offset is the very object the barrier verified: it is
// visited without reading, decoding or checking its record checksum again (its identity, seq,
// event count and checksum are still compared with the location). When every chunk is cached the
// total checksum is not recomputed either — the barrier computed it over these same objects;
// otherwise it is recomputed over all of them, cached or re-read.
using ReadFramePayload = std::function<Result<std::vector<uint8_t>>(uint64_t offset)>;
Status ForEachVerifiedChunk(const ReadyTransaction& ready, const ReadFramePayload& read,
                            const std::function<Status(const Chunk&)>& visit,
                            const VerifiedChunkCache* cache = nullptr);

// "xid 7421 (commit 0/3A1F2B0) of flow app", how every barrier message names a transaction.
std::string DescribeTransaction(const TxIdentity& tx);

}  // namespace trellara
