// barrier.cpp — barrier reassembly of log frames into whole verified transactions (barrier.h).
//
// Holds per open transaction only chunk locations, a running ChangeHasher and counts — never
// chunk changes. Must never yield a transaction that is not fully verified, never continue after
// a failure, and never skip or reorder a transaction.
#include "trellara/log/barrier.h"
#include "trellara/partition/partition.h"

#include <algorithm>
#include <set>

#include "trellara/record/checksum.h"
#include "trellara/record/codec.h"
#include "trellara/base/fault.h"
#include "trellara/capture/relay_progress.h"

namespace trellara {

std::string DescribeTransaction(const TxIdentity& tx) {
  return "xid " + std::to_string(tx.xid) + " (commit " + FormatLsn(tx.commit_lsn) + ") of flow " + tx.flow;
}

namespace {

struct OpenTx {
  TxIdentity tx;
  uint64_t first_offset = 0;
  std::vector<ChunkLocation> chunks;  // index == seq
  ChangeHasher hasher;
  std::vector<RelationCount> counts;
  uint64_t changes = 0;
  std::set<uint32_t> relation_oids;  // every relation the chunks describe
  std::optional<Manifest> manifest;
  Sha256 manifest_hash{};
  uint64_t manifest_offset = 0;
  uint32_t duplicate_chunks = 0;
  uint32_t positioned_chunks = 0;  // chunks carrying positions (partitioned)
};

std::string At(uint64_t offset) { return " (log offset " + std::to_string(offset) + ")"; }

const RelationInfo* FindRelation(const std::vector<RelationInfo>& rels, uint32_t oid) {
  for (const auto& r : rels)
    if (r.oid == oid) return &r;
  return nullptr;
}

std::string SeqList(const std::vector<uint32_t>& seqs) {
  std::string out;
  size_t shown = 0;
  for (uint32_t s : seqs) {
    if (shown == 8) {
      out += ", ... (" + std::to_string(seqs.size()) + " in all)";
      break;
    }
    if (!out.empty()) out += ", ";
    out += std::to_string(s);
    shown++;
  }
  return out;
}

// Negative control (seed strict_chunk_checksum_tampering, docs/correctness.md): a barrier that
// trusts the manifest instead of checking the chunks against it — a tampered, re-sealed chunk then
// passes. Only with the test-only switch (fault.h: AllowDefects) and
// TRELLARA_FAULTS=defect.barrier_trust_manifest:1:defect.
bool TrustManifestDefect() { return fault::Hit("defect.barrier_trust_manifest") == fault::Action::Defect; }

// Negative control (seed barrier_conflicting_duplicate_messages): a barrier that recognises a
// duplicate chunk by (transaction, seq) alone and keeps the first copy, never comparing the second's
// content — a conflicting duplicate then passes silently. TRELLARA_FAULTS=defect.barrier_duplicate_by_seq:1:defect.
// Negative control (seed partition_commit_marker_manifest_mismatch): a barrier that takes the
// commit marker's word without checking that it binds the manifest it received, so a marker of
// another manifest (or with other totals) completes the transaction.
// TRELLARA_FAULTS=defect.barrier_marker_unbound:1:defect.
bool MarkerUnboundDefect() { return fault::Hit("defect.barrier_marker_unbound") == fault::Action::Defect; }

bool DuplicateBySeqDefect() { return fault::Hit("defect.barrier_duplicate_by_seq") == fault::Action::Defect; }

constexpr const char* kLogDamaged =
    "; the log does not hold a complete verified copy of this transaction, so it cannot be applied";

}  // namespace

struct TransactionBarrier::State {
  std::vector<OpenTx> open;
  std::optional<BarrierFailure> failure;
  BarrierStats stats;
  bool have_offset = false;
  uint64_t last_offset = 0;
  VerifiedRelations verified_relations;  // fingerprints already checked in earlier records
  std::function<void(uint64_t, Chunk&&)> chunk_sink;  // SetChunkSink

  Error Fail(std::optional<TxIdentity> tx, uint64_t offset, std::string reason) {
    failure = BarrierFailure{std::move(tx), offset, std::move(reason)};
    return MakeError("barrier: " + failure->reason);
  }

  OpenTx* Find(const TxIdentity& tx) {
    for (auto& o : open)
      if (o.tx == tx) return &o;
    return nullptr;
  }

  // An open transaction with a commit LSN at or below `lsn` (other than `except`) can never
  // complete once the log says it is complete up to `lsn`.
  std::optional<Error> CheckOrphans(uint64_t lsn, const TxIdentity* except, uint64_t offset,
                                    const std::string& what) {
    for (const auto& o : open) {
      if (except != nullptr && o.tx == *except) continue;
      if (o.tx.commit_lsn <= lsn)
        return Fail(o.tx, offset,
                    DescribeTransaction(o.tx) + " has " + std::to_string(o.chunks.size()) + " chunk(s)" +
                        (o.manifest ? " and a manifest" : " and no manifest") + " but no commit marker, and " +
                        what + At(offset) + ": it can never complete, and applying what follows would skip it" +
                        kLogDamaged);
    }
    return std::nullopt;
  }

  Result<OpenTx*> Open(const TxIdentity& tx, uint64_t offset) {
    if (OpenTx* o = Find(tx)) return o;
    if (open.size() >= kBarrierMaxOpenTransactions)
      return Fail(tx, offset,
                  DescribeTransaction(tx) + At(offset) + ": more than kBarrierMaxOpenTransactions (" +
                      std::to_string(kBarrierMaxOpenTransactions) +
                      ") chunked transactions are open at once; the relay writes one at a time, so the log is damaged");
    open.emplace_back();
    open.back().tx = tx;
    open.back().first_offset = offset;
    return &open.back();
  }

  void Close(const TxIdentity& tx) {
    open.erase(std::remove_if(open.begin(), open.end(), [&](const OpenTx& o) { return o.tx == tx; }), open.end());
  }

  Result<std::optional<ReadyTransaction>> Progress(const LogFrame& frame);
  Result<std::optional<ReadyTransaction>> OnEnvelope(const LogFrame& frame, Envelope envelope);
  Result<std::optional<ReadyTransaction>> OnChunk(const LogFrame& frame, Chunk chunk);
  Result<std::optional<ReadyTransaction>> OnManifest(const LogFrame& frame, Manifest manifest);
  Result<std::optional<ReadyTransaction>> OnCommitMarker(const LogFrame& frame, const CommitMarker& marker);
  std::optional<Error> CheckRefAgainstChunk(const OpenTx& o, const ChunkRef& ref, const ChunkLocation& got,
                                            uint64_t offset);
};

TransactionBarrier::TransactionBarrier() : state_(std::make_unique<State>()) {}
TransactionBarrier::~TransactionBarrier() = default;
TransactionBarrier::TransactionBarrier(TransactionBarrier&&) noexcept = default;
TransactionBarrier& TransactionBarrier::operator=(TransactionBarrier&&) noexcept = default;

const std::optional<BarrierFailure>& TransactionBarrier::failure() const { return state_->failure; }
const BarrierStats& TransactionBarrier::stats() const { return state_->stats; }
void TransactionBarrier::SetChunkSink(std::function<void(uint64_t, Chunk&&)> sink) {
  state_->chunk_sink = std::move(sink);
}

std::optional<uint64_t> TransactionBarrier::RetainFromOffset() const {
  std::optional<uint64_t> lowest;
  for (const auto& o : state_->open)
    if (!lowest || o.first_offset < *lowest) lowest = o.first_offset;
  return lowest;
}

std::vector<OpenTransactionInfo> TransactionBarrier::OpenTransactions() const {
  std::vector<OpenTransactionInfo> out;
  for (const auto& o : state_->open)
    out.push_back(OpenTransactionInfo{o.tx, o.first_offset, static_cast<uint32_t>(o.chunks.size()),
                                      o.manifest.has_value(),
                                      o.manifest ? static_cast<uint32_t>(o.manifest->chunks.size()) : 0u});
  return out;
}

Status TransactionBarrier::FinishFinalInput() {
  State& s = *state_;
  if (s.failure) return MakeError("barrier: " + s.failure->reason);
  if (s.open.empty()) return Status::Ok();
  const OpenTx& o = s.open.front();
  uint64_t offset = o.manifest ? o.manifest_offset : o.first_offset;
  std::string has = std::to_string(o.chunks.size()) + " chunk(s)" + (o.manifest ? " and a manifest" : " and no manifest");
  return s.Fail(o.tx, offset,
                DescribeTransaction(o.tx) + " has " + has + " but the log ends without its commit marker" +
                    kLogDamaged);
}

Result<std::optional<ReadyTransaction>> TransactionBarrier::Feed(const LogFrame& frame) {
  State& s = *state_;
  if (s.failure) return MakeError("barrier: " + s.failure->reason);
  if (s.have_offset && frame.offset <= s.last_offset)
    return s.Fail(std::nullopt, frame.offset,
                  "frame at log offset " + std::to_string(frame.offset) + " arrived after log offset " +
                      std::to_string(s.last_offset) + "; frames must be fed in log order");
  s.have_offset = true;
  s.last_offset = frame.offset;

  if (frame.type == kProgressRecordType) return s.Progress(frame);
  if (frame.type < static_cast<uint8_t>(RecordType::Envelope) ||
      frame.type > static_cast<uint8_t>(RecordType::CommitMarker))
    return s.Fail(std::nullopt, frame.offset,
                  "unknown frame type " + std::to_string(frame.type) + At(frame.offset) +
                      "; this applier reads envelopes, chunks, manifests, commit markers and progress markers only");

  auto decoded = DecodeRecord(frame.payload);
  if (!decoded.ok())
    return s.Fail(std::nullopt, frame.offset,
                  "undecodable record" + At(frame.offset) + ": " + decoded.error().message);
  Record record = std::move(decoded).value();
  if (static_cast<uint8_t>(TypeOf(record)) != frame.type)
    return s.Fail(TxOf(record), frame.offset,
                  "frame type " + std::to_string(frame.type) + " holds a " + RecordTypeName(TypeOf(record)) +
                      " of " + DescribeTransaction(TxOf(record)) + At(frame.offset));
  if (TxOf(record).commit_lsn != frame.lsn)
    return s.Fail(TxOf(record), frame.offset,
                  std::string(RecordTypeName(TypeOf(record))) + " of " + DescribeTransaction(TxOf(record)) +
                      " is framed with commit LSN " + FormatLsn(frame.lsn) + At(frame.offset));
  if (Status v = VerifyRecordChecksum(record, s.verified_relations); !v.ok())
    return s.Fail(TxOf(record), frame.offset,
                  std::string(RecordTypeName(TypeOf(record))) + " of " + DescribeTransaction(TxOf(record)) +
                      At(frame.offset) + " failed verification: " + v.error().message);

  switch (TypeOf(record)) {
    case RecordType::Envelope: return s.OnEnvelope(frame, std::get<Envelope>(std::move(record)));
    case RecordType::Chunk: return s.OnChunk(frame, std::get<Chunk>(std::move(record)));
    case RecordType::Manifest: return s.OnManifest(frame, std::get<Manifest>(std::move(record)));
    case RecordType::CommitMarker: return s.OnCommitMarker(frame, std::get<CommitMarker>(record));
    case RecordType::Progress:
    case RecordType::Test: break;  // TypeOf never returns these: a decoded Record is one of the four
  }
  return s.Fail(std::nullopt, frame.offset, "internal: unhandled record type" + At(frame.offset));
}

Result<std::optional<ReadyTransaction>> TransactionBarrier::State::Progress(const LogFrame& frame) {
  auto marker = DecodeProgressMarker(frame.payload.data(), frame.payload.size());
  if (!marker)
    return Fail(std::nullopt, frame.offset,
                "progress marker" + At(frame.offset) + " has " + std::to_string(frame.payload.size()) +
                    " payload bytes, expected 8 or 16");
  const uint64_t lsn = marker->lsn;
  if (marker->source_time_us) stats.last_progress_time_us = marker->source_time_us;
  if (auto e = CheckOrphans(lsn, nullptr, frame.offset, "a relay progress marker covers the log up to " + FormatLsn(lsn)))
    return *e;
  stats.progress_markers++;
  return std::optional<ReadyTransaction>{};
}

Result<std::optional<ReadyTransaction>> TransactionBarrier::State::OnEnvelope(const LogFrame& frame,
                                                                             Envelope envelope) {
  if (Find(envelope.tx) != nullptr)
    return Fail(envelope.tx, frame.offset,
                "an envelope of " + DescribeTransaction(envelope.tx) + At(frame.offset) +
                    " arrived while chunks of the same transaction are open; a transaction is either whole or "
                    "chunked" +
                    kLogDamaged);
  if (envelope.boundary_mode != BoundaryMode::Whole)
    return Fail(envelope.tx, frame.offset,
                "envelope of " + DescribeTransaction(envelope.tx) + At(frame.offset) + " has boundary mode " +
                    BoundaryModeName(envelope.boundary_mode) + ", expected whole");
  if (auto e = CheckOrphans(envelope.tx.commit_lsn, nullptr, frame.offset,
                            DescribeTransaction(envelope.tx) + " completed after it"))
    return *e;
  ReadyTransaction ready;
  ready.tx = envelope.tx;
  ready.begin_lsn = envelope.begin_lsn;
  ready.commit_time_us = envelope.commit_time_us;
  ready.checksum = envelope.checksum;
  ready.total_changes = envelope.changes.size();
  ready.counts = envelope.counts;
  ready.first_offset = frame.offset;
  ready.end_offset = frame.offset + 1;
  ready.envelope = std::move(envelope);
  stats.envelopes++;
  return std::optional<ReadyTransaction>(std::move(ready));
}

std::optional<Error> TransactionBarrier::State::CheckRefAgainstChunk(const OpenTx& o, const ChunkRef& ref,
                                                                      const ChunkLocation& got, uint64_t offset) {
  if ((ref.event_count != got.event_count || ref.checksum != got.checksum || ref.partition_id != got.partition_id ||
       ref.partition_seq != got.partition_seq) &&
      !TrustManifestDefect())
    return Fail(o.tx, offset,
                "chunk " + std::to_string(got.seq) + " of " + DescribeTransaction(o.tx) + " (log offset " +
                    std::to_string(got.offset) + ": " + std::to_string(got.event_count) + " changes, checksum " +
                    HexEncode(got.checksum) + ") does not match the manifest (" + std::to_string(ref.event_count) +
                    " changes, checksum " + HexEncode(ref.checksum) + ")" + kLogDamaged);
  return std::nullopt;
}

Result<std::optional<ReadyTransaction>> TransactionBarrier::State::OnChunk(const LogFrame& frame, Chunk chunk) {
  auto opened = Open(chunk.tx, frame.offset);
  if (!opened.ok()) return opened.error();
  OpenTx& o = **opened;
  const std::string name = "chunk " + std::to_string(chunk.seq) + " of " + DescribeTransaction(o.tx);
  // A strict chunk carries no positions and belongs to partition 0; a partitioned one carries one
  // position per change (the decoder checked they ascend) and names its partition.
  if (chunk.positions.empty() && (chunk.partition_id != 0 || chunk.partition_seq != 0))
    return Fail(o.tx, frame.offset,
                name + At(frame.offset) + " names partition " + std::to_string(chunk.partition_id) + " (sequence " +
                    std::to_string(chunk.partition_seq) + ") but carries no change positions" + kLogDamaged);
  if (!chunk.positions.empty() && chunk.partition_id >= partition::kMaxPartitions)
    return Fail(o.tx, frame.offset,
                name + At(frame.offset) + " names partition " + std::to_string(chunk.partition_id) +
                    ", above the largest partition map (" + std::to_string(partition::kMaxPartitions) + ")" +
                    kLogDamaged);
  if (chunk.event_count != chunk.changes.size())
    return Fail(o.tx, frame.offset,
                name + At(frame.offset) + " declares " + std::to_string(chunk.event_count) + " changes but holds " +
                    std::to_string(chunk.changes.size()));
  ChunkLocation here{frame.offset, chunk.seq, chunk.partition_id, chunk.event_count, chunk.checksum,
                     chunk.partition_seq};
  const uint32_t next = static_cast<uint32_t>(o.chunks.size());
  if (chunk.seq < next) {
    const ChunkLocation& first = o.chunks[chunk.seq];
    if ((first.checksum != here.checksum || first.event_count != here.event_count) && !DuplicateBySeqDefect())
      return Fail(o.tx, frame.offset,
                  "conflicting duplicate: " + name + At(frame.offset) + " has checksum " + HexEncode(here.checksum) +
                      " (" + std::to_string(here.event_count) + " changes) but the copy at log offset " +
                      std::to_string(first.offset) + " has " + HexEncode(first.checksum) + " (" +
                      std::to_string(first.event_count) + " changes)" + kLogDamaged);
    o.duplicate_chunks++;
    stats.duplicate_chunks++;
    return std::optional<ReadyTransaction>{};
  }
  if (chunk.seq > next)
    return Fail(o.tx, frame.offset,
                name + At(frame.offset) + " arrived before chunk " + std::to_string(next) +
                    "; the relay writes chunks in seq order, so chunk " + std::to_string(next) + " is missing" +
                    kLogDamaged);
  if (next >= kBarrierMaxChunksPerTransaction)
    return Fail(o.tx, frame.offset,
                name + At(frame.offset) + " exceeds kBarrierMaxChunksPerTransaction (" +
                    std::to_string(kBarrierMaxChunksPerTransaction) + ")");
  if (o.manifest) {
    if (chunk.seq >= o.manifest->chunks.size())
      return Fail(o.tx, frame.offset,
                  "extra chunk: " + name + At(frame.offset) + " is not listed by its manifest (" +
                      std::to_string(o.manifest->chunks.size()) + " chunks, log offset " +
                      std::to_string(o.manifest_offset) + ")" + kLogDamaged);
    if (auto e = CheckRefAgainstChunk(o, o.manifest->chunks[chunk.seq], here, frame.offset)) return *e;
  }
  for (const Change& c : chunk.changes) {
    const RelationInfo* rel = nullptr;
    if (c.op == Op::Insert || c.op == Op::Update || c.op == Op::Delete) rel = FindRelation(chunk.relations, c.relation_oid);
    o.hasher.Add(c, rel, chunk.relations);
    CountChange(c, o.counts);
  }
  o.changes += chunk.changes.size();
  for (const auto& r : chunk.relations) o.relation_oids.insert(r.oid);
  if (!chunk.positions.empty()) o.positioned_chunks++;
  o.chunks.push_back(here);
  stats.chunks++;
  if (chunk_sink) chunk_sink(frame.offset, std::move(chunk));
  return std::optional<ReadyTransaction>{};
}

Result<std::optional<ReadyTransaction>> TransactionBarrier::State::OnManifest(const LogFrame& frame,
                                                                             Manifest manifest) {
  Sha256 hash = Sha256Of(frame.payload);
  auto opened = Open(manifest.tx, frame.offset);
  if (!opened.ok()) return opened.error();
  OpenTx& o = **opened;
  const std::string name = "manifest of " + DescribeTransaction(o.tx) + At(frame.offset);
  if (o.manifest) {
    if (o.manifest_hash != hash)
      return Fail(o.tx, frame.offset,
                  "conflicting duplicate: " + name + " differs from the manifest at log offset " +
                      std::to_string(o.manifest_offset) + kLogDamaged);
    stats.duplicate_manifests++;
    return std::optional<ReadyTransaction>{};
  }
  if (manifest.boundary_mode != BoundaryMode::StrictChunk && manifest.boundary_mode != BoundaryMode::Partitioned)
    return Fail(o.tx, frame.offset,
                name + " has boundary mode " + BoundaryModeName(manifest.boundary_mode) +
                    ", expected strict_chunk or partitioned" + kLogDamaged);
  if (manifest.boundary_mode == BoundaryMode::Partitioned) {
    const partition::PartitionMap map{manifest.map_version, manifest.partitions};
    if (Status valid = partition::ValidateMap(map); !valid.ok())
      return Fail(o.tx, frame.offset, name + ": " + valid.error().message + kLogDamaged);
    // Each partition's chunks are listed with partition sequences 0, 1, ... in seq order.
    std::map<uint32_t, uint32_t> next_partition_seq;
    for (const ChunkRef& ref : manifest.chunks) {
      if (ref.partition_id >= map.partitions)
        return Fail(o.tx, frame.offset,
                    name + " lists chunk " + std::to_string(ref.seq) + " for partition " +
                        std::to_string(ref.partition_id) + " but its map version " + std::to_string(map.version) +
                        " has " + std::to_string(map.partitions) + " partitions" + kLogDamaged);
      uint32_t& expected = next_partition_seq[ref.partition_id];
      if (ref.partition_seq != expected)
        return Fail(o.tx, frame.offset,
                    name + " lists chunk " + std::to_string(ref.seq) + " as sequence " +
                        std::to_string(ref.partition_seq) + " of partition " + std::to_string(ref.partition_id) +
                        ", expected " + std::to_string(expected) + kLogDamaged);
      expected++;
    }
  } else {
    for (const ChunkRef& ref : manifest.chunks)
      if (ref.partition_id != 0 || ref.partition_seq != 0)
        return Fail(o.tx, frame.offset,
                    name + " is strict_chunk but lists chunk " + std::to_string(ref.seq) + " for partition " +
                        std::to_string(ref.partition_id) + kLogDamaged);
  }
  if (manifest.chunks.empty())
    return Fail(o.tx, frame.offset, name + " lists no chunks");
  if (manifest.chunks.size() > kBarrierMaxChunksPerTransaction)
    return Fail(o.tx, frame.offset,
                name + " lists more than kBarrierMaxChunksPerTransaction (" +
                    std::to_string(kBarrierMaxChunksPerTransaction) + ") chunks");
  uint64_t sum = 0;
  for (size_t i = 0; i < manifest.chunks.size(); i++) {
    if (manifest.chunks[i].seq != i)
      return Fail(o.tx, frame.offset,
                  name + " lists chunk seq " + std::to_string(manifest.chunks[i].seq) + " at position " +
                      std::to_string(i) + "; chunks must be listed as seq 0.." +
                      std::to_string(manifest.chunks.size() - 1));
    sum += manifest.chunks[i].event_count;
  }
  if (sum != manifest.total_changes)
    return Fail(o.tx, frame.offset,
                name + " declares " + std::to_string(manifest.total_changes) + " changes but its chunks list " +
                    std::to_string(sum));
  if (o.chunks.size() > manifest.chunks.size())
    return Fail(o.tx, frame.offset,
                "extra chunk: chunk " + std::to_string(manifest.chunks.size()) + " of " + DescribeTransaction(o.tx) +
                    " (log offset " + std::to_string(o.chunks[manifest.chunks.size()].offset) +
                    ") is not listed by its manifest" + At(frame.offset) + kLogDamaged);
  for (size_t i = 0; i < o.chunks.size(); i++)
    if (auto e = CheckRefAgainstChunk(o, manifest.chunks[i], o.chunks[i], frame.offset)) return *e;
  o.manifest = std::move(manifest);
  o.manifest_hash = hash;
  o.manifest_offset = frame.offset;
  return std::optional<ReadyTransaction>{};
}

Result<std::optional<ReadyTransaction>> TransactionBarrier::State::OnCommitMarker(const LogFrame& frame,
                                                                                 const CommitMarker& marker) {
  const std::string name = "commit marker of " + DescribeTransaction(marker.tx) + At(frame.offset);
  OpenTx* found = Find(marker.tx);
  if (found == nullptr)
    return Fail(marker.tx, frame.offset, name + " arrived without any chunk or manifest" + kLogDamaged);
  OpenTx& o = *found;
  if (!o.manifest)
    return Fail(o.tx, frame.offset, name + " arrived before the transaction's manifest" + kLogDamaged);
  const Manifest& m = *o.manifest;
  const bool unbound = (marker.manifest_checksum != o.manifest_hash || marker.total_chunks != m.chunks.size() ||
                        marker.total_changes != m.total_changes) &&
                       MarkerUnboundDefect();
  if (marker.manifest_checksum != o.manifest_hash && !unbound)
    return Fail(o.tx, frame.offset,
                name + " binds manifest checksum " + HexEncode(marker.manifest_checksum) +
                    " but the manifest at log offset " + std::to_string(o.manifest_offset) + " hashes to " +
                    HexEncode(o.manifest_hash) + kLogDamaged);
  if ((marker.total_chunks != m.chunks.size() || marker.total_changes != m.total_changes) && !unbound)
    return Fail(o.tx, frame.offset,
                name + " declares " + std::to_string(marker.total_chunks) + " chunks and " +
                    std::to_string(marker.total_changes) + " changes but the manifest lists " +
                    std::to_string(m.chunks.size()) + " chunks and " + std::to_string(m.total_changes) + " changes" +
                    kLogDamaged);
  if (o.chunks.size() < m.chunks.size()) {
    std::vector<uint32_t> missing;
    for (size_t i = o.chunks.size(); i < m.chunks.size(); i++) missing.push_back(static_cast<uint32_t>(i));
    return Fail(o.tx, frame.offset,
                name + ": missing chunk(s) " + SeqList(missing) + " of " + std::to_string(m.chunks.size()) +
                    " listed by the manifest" + kLogDamaged);
  }
  const bool partitioned = m.boundary_mode == BoundaryMode::Partitioned;
  if (o.positioned_chunks != (partitioned ? o.chunks.size() : 0))
    return Fail(o.tx, frame.offset,
                name + ": " + std::to_string(o.positioned_chunks) + " of its " + std::to_string(o.chunks.size()) +
                    " chunks carry change positions but the manifest is " + BoundaryModeName(m.boundary_mode) +
                    kLogDamaged);
  // Each received chunk was checked against the manifest when the later of the two arrived.
  const Sha256 total = o.hasher.Finish();
  const bool trust_manifest =
      (o.changes != m.total_changes || total != m.checksum || o.counts != m.counts) && TrustManifestDefect();
  if (o.changes != m.total_changes && !trust_manifest)
    return Fail(o.tx, frame.offset,
                name + ": the chunks hold " + std::to_string(o.changes) + " changes, the manifest declares " +
                    std::to_string(m.total_changes) + kLogDamaged);
  if (total != m.checksum && !trust_manifest)
    return Fail(o.tx, frame.offset,
                name + ": the checksum recomputed over the chunks' changes in seq order is " + HexEncode(total) +
                    " but the manifest records " + HexEncode(m.checksum) + kLogDamaged);
  if (o.counts != m.counts && !trust_manifest)
    return Fail(o.tx, frame.offset,
                name + ": the per-relation counts of the chunks' changes do not match the manifest's counts" +
                    kLogDamaged);
  for (uint32_t oid : o.relation_oids)
    if (FindRelation(m.relations, oid) == nullptr)
      return Fail(o.tx, frame.offset,
                  name + ": relation oid " + std::to_string(oid) +
                      " appears in the chunks but not in the manifest's affected relations" + kLogDamaged);
  if (auto e = CheckOrphans(o.tx.commit_lsn, &o.tx, frame.offset, DescribeTransaction(o.tx) + " completed after it"))
    return *e;

  ReadyTransaction ready;
  ready.tx = o.tx;
  ready.begin_lsn = m.begin_lsn;
  ready.commit_time_us = m.commit_time_us;
  ready.checksum = m.checksum;
  ready.total_changes = m.total_changes;
  ready.counts = m.counts;
  ready.manifest = std::move(o.manifest);
  ready.chunks = std::move(o.chunks);
  ready.first_offset = o.first_offset;
  ready.end_offset = frame.offset + 1;
  ready.duplicate_chunks = o.duplicate_chunks;
  stats.chunked_transactions++;
  TxIdentity tx = o.tx;
  Close(tx);
  return std::optional<ReadyTransaction>(std::move(ready));
}

Status ForEachVerifiedChunk(const ReadyTransaction& ready, const ReadFramePayload& read,
                            const std::function<Status(const Chunk&)>& visit, const VerifiedChunkCache* cache) {
  if (!ready.manifest)
    return MakeError("internal: ForEachVerifiedChunk called for the whole transaction " +
                     DescribeTransaction(ready.tx));
  const bool all_cached =
      cache != nullptr && std::all_of(ready.chunks.begin(), ready.chunks.end(),
                                      [cache](const ChunkLocation& loc) { return cache->Find(loc.offset) != nullptr; });
  ChangeHasher hasher;
  uint64_t changes = 0;
  for (size_t i = 0; i < ready.chunks.size(); i++) {
    const ChunkLocation& loc = ready.chunks[i];
    const auto name = [&] {
      return "chunk " + std::to_string(loc.seq) + " of " + DescribeTransaction(ready.tx) + " (log offset " +
             std::to_string(loc.offset) + ")";
    };
    const Chunk* chunk = cache != nullptr ? cache->Find(loc.offset) : nullptr;
    std::optional<Record> decoded;
    if (chunk == nullptr) {
      auto bytes = read(loc.offset);
      if (!bytes.ok()) return MakeError("cannot re-read " + name() + ": " + bytes.error().message);
      auto record = DecodeRecord(std::span<const uint8_t>(bytes->data(), bytes->size()));
      if (!record.ok()) return MakeError("re-read " + name() + " does not decode: " + record.error().message);
      decoded = std::move(record).value();
      chunk = std::get_if<Chunk>(&*decoded);
      if (chunk == nullptr)
        return MakeError("re-read " + name() + " is a " + RecordTypeName(TypeOf(*decoded)) + ", not a chunk");
      if (Status v = VerifyRecordChecksum(*decoded); !v.ok())
        return MakeError("re-read " + name() + " failed verification: " + v.error().message);
    }
    if (!(chunk->tx == ready.tx) || chunk->seq != loc.seq || chunk->event_count != loc.event_count ||
        chunk->checksum != loc.checksum || chunk->partition_id != loc.partition_id ||
        chunk->partition_seq != loc.partition_seq)
      return MakeError((decoded ? "re-read " : "cached ") + name() +
                       " is not the chunk the barrier verified; the log changed under the applier");
    if (!all_cached) {
      for (const Change& c : chunk->changes) {
        const RelationInfo* rel = nullptr;
        if (c.op == Op::Insert || c.op == Op::Update || c.op == Op::Delete)
          rel = FindRelation(chunk->relations, c.relation_oid);
        hasher.Add(c, rel, chunk->relations);
      }
    }
    changes += chunk->changes.size();
    TRELLARA_TRY(visit(*chunk));
  }
  if (changes != ready.total_changes || (!all_cached && hasher.Finish() != ready.checksum))
    return MakeError("re-read chunks of " + DescribeTransaction(ready.tx) +
                     " no longer add up to the verified transaction checksum; the log changed under the applier");
  return Status::Ok();
}

uint64_t EstimatedBytes(const Chunk& chunk) {
  // Objects plus every string's heap block (short strings live inside the object).
  const auto text = [](const std::string& s) -> uint64_t { return s.size() > 15 ? s.capacity() + 1 : 0; };
  uint64_t bytes = sizeof(Chunk) + chunk.relations.size() * (sizeof(RelationInfo) + 1024);
  for (const Change& c : chunk.changes) {
    bytes += sizeof(Change) + (c.old_tuple.size() + c.new_tuple.size()) * sizeof(Value);
    for (const Value& v : c.old_tuple) bytes += text(v.data);
    for (const Value& v : c.new_tuple) bytes += text(v.data);
    bytes += text(c.message.prefix) + text(c.message.content) + c.truncate.relation_oids.size() * sizeof(uint32_t);
    if (c.op == Op::Ddl) bytes += 4096 + text(c.ddl.sql);  // steps and the definition: rare, counted coarsely
  }
  return bytes;
}

bool VerifiedChunkCache::Offer(uint64_t offset, Chunk&& chunk) {
  const uint64_t size = EstimatedBytes(chunk);
  if (bytes_ + size > bytes_max_ || chunks_.count(offset) > 0) {
    refused_++;
    return false;
  }
  bytes_ += size;
  chunks_.emplace(offset, std::move(chunk));
  return true;
}

const Chunk* VerifiedChunkCache::Find(uint64_t offset) const {
  auto it = chunks_.find(offset);
  return it == chunks_.end() ? nullptr : &it->second;
}

void VerifiedChunkCache::Clear() {
  chunks_.clear();
  bytes_ = 0;
}

}  // namespace trellara
