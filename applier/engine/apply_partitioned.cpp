// apply_partitioned.cpp — the publisher's side of partitioned mode (docs/partitioned.md): the
// flow's applier meets a partitioned transaction in the log (the barrier verified every chunk,
// the manifest and the commit marker), waits until every partition the manifest lists holds
// checkpoint evidence for it (core GlobalWatermark over trellara.partition_checkpoints), then
// applies it in one target transaction from what the partition appliers staged — each staged chunk
// checked against the chunk the barrier verified, the changes merged back into source order (core
// MergeByPosition) — and deletes the staged chunks in that same transaction, with the dedup row
// and the origin progress. Readers of the user tables see the whole source transaction or none
// of it. A partition that refused the transaction makes it quarantined here, like any transaction
// the flow cannot apply safely.
#include <iostream>
#include <thread>

#include "engine/applier.h"
#include "trellara/base/cadence.h"
#include "trellara/base/fault.h"
#include "trellara/partition/partition.h"
#include "trellara/record/codec.h"

namespace trellara::cli::apply {

PartitionGate Applier::WaitForPartitions(const ReadyTransaction& ready, QuarantineCause& cause) {
  // Negative control (tests only, TRELLARA_FAULTS=defect.partition_publish_before_evidence:1:defect):
  // publish without waiting for the partitions' evidence, which the visibility scenario must catch.
  if (fault::Hit("defect.partition_publish_before_evidence") == fault::Action::Defect) return PartitionGate::Publish;
  const std::vector<uint32_t> listed = partition::ListedPartitions(ready.manifest->chunks);
  const uint64_t floor = applied_lsn_ < ready.tx.commit_lsn ? applied_lsn_ : 0;
  // Checkpoints only move forward: evidence read for an earlier transaction may already cover this
  // one (core DecidePublication decides, here and after every read below).
  std::map<uint32_t, partition::PartitionBlocker> blockers;
  std::chrono::milliseconds idle = cadence::kApplierTail.min;
  bool reported = false;
  for (bool read = false;; read = true) {
    if (read) {
      PgResult r = Must(conn_->ExecParams("SELECT partition, (commit_lsn - '0/0')::numeric::text, blocker, "
                                          "(blocked_commit_lsn - '0/0')::numeric::text "
                                          "FROM trellara.partition_checkpoints WHERE flow = $1",
                                          {config_.flow_name}),
                        "reading the partitions' checkpoints of flow " + config_.flow_name);
      blockers.clear();
      for (int i = 0; i < r.rows(); i++) {
        const uint32_t p = static_cast<uint32_t>(std::stoul(r.Value(i, 0).value_or("0")));
        partition_evidence_[p] = std::max<uint64_t>(partition_evidence_[p], std::stoull(r.Value(i, 1).value_or("0")));
        if (r.Value(i, 2)) blockers[p] = {std::stoull(r.Value(i, 3).value_or("0")), *r.Value(i, 2)};
      }
    }
    auto decision = partition::DecidePublication(floor, ready.tx.commit_lsn, listed, partition_evidence_, blockers);
    if (!decision) Fail("internal: " + decision.error().message);
    switch (decision->action) {
      case partition::PublishAction::Publish:
        return PartitionGate::Publish;
      case partition::PublishAction::Quarantine:
        cause.reason = QuarantineReason::BarrierFailure;
        cause.detail = "partition " + std::to_string(decision->refusing) +
                       " refused it before staging anything: " + decision->reason;
        return PartitionGate::Refused;
      case partition::PublishAction::Wait:
        break;
    }
    if (!read) continue;  // what was cached did not suffice: read the partitions' checkpoints now
    if (!reported) {
      std::string holding;
      for (uint32_t p : decision->holding) holding += (holding.empty() ? "" : ", ") + std::to_string(p);
      WriteStatus("running", DescribeTransaction(ready.tx) + " waits for checkpoint evidence of partition(s) " + holding +
                                 " (trellara apply --partition K; trellara partition-watermarks)");
      reported = true;
    }
    if (StopRequested()) return PartitionGate::Stopped;
    std::this_thread::sleep_for(idle);
    idle = cadence::kApplierTail.After(idle, false);
  }
}

namespace {
// A transaction of at most this many changes has all its staged chunks read in one round trip
// before it is applied; a larger one reads them one at a time (bounded memory).
constexpr uint64_t kPreloadChangesMax = 16384;
}  // namespace

Result<Chunk> Applier::ReadStagedChunk(const ReadyTransaction& ready, const ChunkRef& ref,
                                       const std::map<uint32_t, std::string>* preloaded) {
  const std::string name = "chunk " + std::to_string(ref.seq) + " (partition " + std::to_string(ref.partition_id) +
                           ") of " + DescribeTransaction(ready.tx);
  std::optional<std::string> hex;
  if (preloaded != nullptr) {
    if (auto found = preloaded->find(ref.seq); found != preloaded->end()) hex = found->second;
  } else {
    PgResult r = Must(conn_->ExecParams("SELECT encode(record, 'hex') FROM trellara.partition_stage "
                                        "WHERE flow = $1 AND commit_lsn = $2::pg_lsn AND seq = $3",
                                        {config_.flow_name, FormatLsn(ready.tx.commit_lsn), std::to_string(ref.seq)}),
                      "reading staged " + name);
    if (r.rows() == 1) hex = r.Value(0, 0);
  }
  if (!hex)
    return MakeError(name + " is not staged on the target (trellara.partition_stage) although partition " +
                     std::to_string(ref.partition_id) + " holds checkpoint evidence for it");
  auto bytes = HexDecode(*hex);
  if (!bytes) return MakeError("staged " + name + " is not valid hex");
  auto decoded = DecodeRecord(std::span<const uint8_t>(bytes->data(), bytes->size()));
  if (!decoded) return MakeError("staged " + name + " does not decode: " + decoded.error().message);
  Chunk* chunk = std::get_if<Chunk>(&*decoded);
  if (chunk == nullptr) return MakeError("staged " + name + " is a " + RecordTypeName(TypeOf(*decoded)));
  if (Status v = VerifyRecordChecksum(*decoded); !v.ok())
    return MakeError("staged " + name + " failed verification: " + v.error().message);
  if (!(chunk->tx == ready.tx) || chunk->seq != ref.seq || chunk->partition_id != ref.partition_id ||
      chunk->partition_seq != ref.partition_seq || chunk->event_count != ref.event_count ||
      chunk->checksum != ref.checksum)
    return MakeError("staged " + name + " is not the chunk the log's manifest lists (checksum " +
                     HexEncode(chunk->checksum) + ", expected " + HexEncode(ref.checksum) + ")");
  return std::move(*chunk);
}

// Inside the open target transaction of `ready` (BEGIN, control check and dedup row done): its
// changes from the staged chunks in source order, then the staged chunks deleted.
std::optional<QuarantineCause> Applier::ApplyPartitionedChanges(const ReadyTransaction& ready) {
  const TxIdentity& tx = ready.tx;
  std::optional<QuarantineCause> failure;
  ResetChunked();
  Status walked = Status::Ok();
  // A transaction of up to kPreloadChangesMax changes: every staged chunk in one round trip.
  std::optional<std::map<uint32_t, std::string>> preloaded;
  if (ready.total_changes <= kPreloadChangesMax) {
    PgResult r = Must(conn_->ExecParams("SELECT seq, encode(record, 'hex') FROM trellara.partition_stage "
                                        "WHERE flow = $1 AND commit_lsn = $2::pg_lsn",
                                        {config_.flow_name, FormatLsn(tx.commit_lsn)}),
                      "reading the staged chunks of " + DescribeTransaction(tx));
    preloaded.emplace();
    for (int i = 0; i < r.rows(); i++)
      (*preloaded)[static_cast<uint32_t>(std::stoul(r.Value(i, 0).value_or("0")))] = r.Value(i, 1).value_or("");
  }
  const std::map<uint32_t, std::string>* staged = preloaded ? &*preloaded : nullptr;
  if (fault::Hit("defect.partition_publish_before_evidence") == fault::Action::Defect) {
    // The negative control's other half: whatever is staged is applied, in seq order; what is not
    // staged yet is left out — a partial transaction becomes visible.
    for (const ChunkRef& ref : ready.manifest->chunks) {
      if ((failure = FlushChunked(tx))) break;
      auto chunk = ReadStagedChunk(ready, ref, staged);
      if (!chunk) continue;
      for (const Change& change : chunk->changes)
        if ((failure = StageChunkedChange(change, chunk->relations, tx))) break;
      if (failure) break;
    }
  } else {
    walked = partition::MergeByPosition(
        ready.manifest->chunks, ready.total_changes,
        [&](const ChunkRef& ref) -> Result<Chunk> {
          if (staged != nullptr) return ReadStagedChunk(ready, ref, staged);
          // Read on the same session: what was queued before is answered first.
          if ((failure = FlushChunked(tx))) return MakeError("stopped at a failed change");
          return ReadStagedChunk(ready, ref, nullptr);
        },
        [&](const Chunk& chunk, size_t i) -> Status {
          failure = StageChunkedChange(chunk.changes[i], chunk.relations, tx);
          return failure ? Status(MakeError("stopped at a failed change")) : Status::Ok();
        });
  }
  if (!failure && walked.ok()) failure = FlushChunked(tx);
  if (!walked.ok() && !failure) {
    QuarantineCause cause;
    cause.reason = QuarantineReason::BarrierFailure;
    cause.detail = "the staged chunks do not reconstruct the transaction: " + walked.error().message;
    failure = cause;
  }
  ResetChunked();
  if (failure) return failure;
  PgResult deleted = conn_->ExecParams("DELETE FROM trellara.partition_stage WHERE flow = $1 AND commit_lsn = $2::pg_lsn",
                                       {config_.flow_name, FormatLsn(tx.commit_lsn)});
  Step(std::move(deleted), "DELETE of the staged chunks", tx, failure);
  return failure;
}

}  // namespace trellara::cli::apply
