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
#include <set>
#include <thread>

#include "engine/applier.h"
#include "trellara/base/cadence.h"
#include "trellara/base/fault.h"
#include "trellara/capture/assembler.h"
#include "trellara/partition/partition.h"
#include "trellara/record/codec.h"

namespace trellara::cli::apply {

std::map<uint32_t, partition::PartitionBlocker> Applier::ReadPartitionCheckpoints() {
  PgResult r = Must(conn_->ExecParams("SELECT partition, (commit_lsn - '0/0')::numeric::text, blocker, "
                                      "(blocked_commit_lsn - '0/0')::numeric::text "
                                      "FROM trellara.partition_checkpoints WHERE flow = $1",
                                      {config_.flow_name}),
                    "reading the partitions' checkpoints of flow " + config_.flow_name);
  std::map<uint32_t, partition::PartitionBlocker> blockers;
  for (int i = 0; i < r.rows(); i++) {
    const uint32_t p = static_cast<uint32_t>(std::stoul(r.Value(i, 0).value_or("0")));
    partition_evidence_[p] = std::max<uint64_t>(partition_evidence_[p], std::stoull(r.Value(i, 1).value_or("0")));
    if (r.Value(i, 2)) blockers[p] = {std::stoull(r.Value(i, 3).value_or("0")), *r.Value(i, 2)};
  }
  return blockers;
}

// Of `partitions`, those with no partition applier session on the target (application_name
// "trellara partition K <flow>", set by PartitionApplier::Connect).
std::vector<uint32_t> Applier::PartitionsWithoutApplier(const std::vector<uint32_t>& partitions) {
  PgResult r = Must(conn_->Exec("SELECT DISTINCT application_name FROM pg_stat_activity "
                                "WHERE application_name LIKE 'trellara partition %'"),
                    "looking for the partition appliers of flow " + config_.flow_name + " on the target");
  std::set<std::string> connected;
  for (int i = 0; i < r.rows(); i++) connected.insert(r.Value(i, 0).value_or(""));
  std::vector<uint32_t> absent;
  for (uint32_t p : partitions)
    // The server keeps application_name to NAMEDATALEN - 1 (63) bytes.
    if (!connected.count(("trellara partition " + std::to_string(p) + " " + config_.flow_name).substr(0, 63)))
      absent.push_back(p);
  return absent;
}

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
  // Since when a partition it waits for has had no applier connected (max(): none missing).
  auto absent_since = std::chrono::steady_clock::time_point::max();
  for (bool read = false;; read = true) {
    if (read) blockers = ReadPartitionCheckpoints();
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
    std::string holding;
    for (uint32_t p : decision->holding) holding += (holding.empty() ? "" : ", ") + std::to_string(p);
    if (!reported) {
      WriteStatus("running", DescribeTransaction(ready.tx) + " waits for checkpoint evidence of partition(s) " + holding +
                                 " (trellara apply --partition K; trellara partition-watermarks)");
      reported = true;
    }
    // A run until caught up waits only for partitions whose applier is there to give the evidence:
    // after a grace (an applier started beside this one is still connecting) it ends as blocked.
    if (until_caught_up_) {
      const std::vector<uint32_t> absent = PartitionsWithoutApplier(decision->holding);
      const auto now = std::chrono::steady_clock::now();
      if (absent.empty()) {
        absent_since = std::chrono::steady_clock::time_point::max();
      } else if (absent_since == std::chrono::steady_clock::time_point::max()) {
        absent_since = now;
      } else if (now - absent_since > cadence::kHoldNotRunningGrace) {
        std::string names;
        for (uint32_t p : absent) names += (names.empty() ? "" : ", ") + std::to_string(p);
        Fail(DescribeTransaction(ready.tx) + " waits for checkpoint evidence of partition(s) " + holding +
                 "; no partition applier of partition(s) " + names + " is connected to the target " +
                 conn_->Describe() + ": start `trellara apply --config " + config_.path + " --partition K` for each "
                 "(or `trellara run --local --verify --config " + config_.path + "`); nothing past it was applied",
             kExitFlowBlocked);
      }
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

// The staged chunks (hex of each record by seq) of the partitioned transactions committed at
// `commit_lsns`, in one round trip.
Applier::StagedChunks Applier::ReadStaged(const std::vector<uint64_t>& commit_lsns, const std::string& what) {
  std::string lsns = "{";
  for (uint64_t lsn : commit_lsns) lsns += (lsns.size() > 1 ? "," : "") + FormatLsn(lsn);
  PgResult r = Must(conn_->ExecParams("SELECT (commit_lsn - '0/0')::numeric::text, seq, encode(record, 'hex') "
                                      "FROM trellara.partition_stage WHERE flow = $1 AND commit_lsn = ANY($2::pg_lsn[])",
                                      {config_.flow_name, lsns + "}"}),
                    "reading the staged chunks of " + what);
  StagedChunks staged;
  for (int row = 0; row < r.rows(); row++)
    staged[std::stoull(r.Value(row, 0).value_or("0"))][static_cast<uint32_t>(std::stoul(r.Value(row, 1).value_or("0")))] =
        r.Value(row, 2).value_or("");
  return staged;
}

// Up to the size of a strict whole transaction (the relay's default trellara.chunk_changes): a
// larger one is applied as a strict chunked transaction is (COPY runs, pipelined statements), one
// chunk at a time — measured 13x faster on transactions of 1 000-10 000 inserted rows than merging
// it whole into the batch.
bool Applier::PipelinesPartitioned(const ReadyTransaction& ready) {
  return ready.partitioned() && ready.total_changes <= kDefaultChunkChanges;
}

// The batch path (apply_pipeline.cpp SendBatch, before the candidates are classified): the
// partitioned candidates not applied yet that every listed partition holds evidence for (core
// DecidePublication over the cached checkpoints, read once more when they do not cover the
// candidates) get their staged chunks read in one round trip for all of them, each verified
// against the manifest's entry and merged back into source order: from then on each is a whole
// transaction of the batch (grouped with the others, its dedup row, its staged chunks deleted in
// the same target transaction — SendBatch). The first one not covered, or whose staged chunks do
// not verify, stays as it is and ends the batch before it; at the front it goes alone (Process),
// which waits for its evidence or quarantines it with the exact cause.
void Applier::MaterializePartitioned(size_t candidates, const std::vector<Evidence>& evidence) {
  std::vector<size_t> wanted;
  uint64_t changes = 0;
  for (size_t i = 0; i < candidates; i++) {
    PipelineTx& tx = pipeline_.at(i);
    if (!tx.ready.partitioned() || tx.ready.envelope) continue;  // whole, or merged for an earlier batch
    const ApplyDecision decision = DecideApply(tx.ready.tx, tx.ready.checksum, evidence[i].target);  // core, no fault point
    if (decision.action == ApplyAction::SkipDuplicate) continue;
    if (decision.action != ApplyAction::Apply || evidence[i].target.quarantine) break;  // goes alone
    if (!wanted.empty() && changes + tx.ready.total_changes > kPreloadChangesMax) break;  // the next batch's
    changes += tx.ready.total_changes;
    wanted.push_back(i);
  }
  if (wanted.empty()) return;
  // Negative control (tests only, defect.partition_publish_before_evidence): no evidence is asked
  // for, and whatever is staged is merged — a partial transaction becomes visible.
  const bool defect = fault::Hit("defect.partition_publish_before_evidence") == fault::Action::Defect;
  size_t covered = 0;
  for (bool read = false;; read = true) {
    if (read) (void)ReadPartitionCheckpoints();
    covered = 0;
    for (size_t i : wanted) {
      const ReadyTransaction& ready = pipeline_.at(i).ready;
      auto decision = partition::DecidePublication(0, ready.tx.commit_lsn, partition::ListedPartitions(ready.manifest->chunks),
                                                   partition_evidence_, {});
      if (!decision) Fail("internal: " + decision.error().message);
      if (!defect && decision->action != partition::PublishAction::Publish) break;
      covered++;
    }
    if (covered == wanted.size() || read) break;
  }
  if (covered == 0) return;
  wanted.resize(covered);
  std::vector<uint64_t> commits;
  for (size_t i : wanted) commits.push_back(pipeline_.at(i).ready.tx.commit_lsn);
  StagedChunks staged = ReadStaged(commits, std::to_string(wanted.size()) + " partitioned transaction(s)");
  for (size_t i : wanted) {
    ReadyTransaction& ready = pipeline_.at(i).ready;
    auto envelope = StagedEnvelope(ready, staged[ready.tx.commit_lsn], defect);
    if (!envelope) break;  // goes alone: ApplyPartitionedChanges quarantines it with the cause
    ready.envelope = std::move(*envelope);
  }
}

// `ready`'s changes in source order from its staged chunks (each verified against the manifest),
// with the relations they name. An error when a chunk is missing or does not verify, when the
// positions do not reconstruct the transaction, or when two chunks describe one relation
// differently (a shape change inside the transaction: the per-chunk path applies it).
Result<Envelope> Applier::StagedEnvelope(const ReadyTransaction& ready, const std::map<uint32_t, std::string>& staged,
                                         bool defect) {
  Envelope e;
  e.tx = ready.tx;
  e.begin_lsn = ready.begin_lsn;
  e.commit_time_us = ready.commit_time_us;
  e.counts = ready.counts;
  e.boundary_mode = BoundaryMode::Partitioned;
  e.checksum = ready.checksum;
  e.changes.reserve(ready.total_changes);
  std::map<uint32_t, size_t> relation_at;  // oid -> index in e.relations
  Status shapes = Status::Ok();
  auto add_relations = [&](const Chunk& chunk) {
    for (const RelationInfo& relation : chunk.relations) {
      auto [at, added] = relation_at.emplace(relation.oid, e.relations.size());
      if (added)
        e.relations.push_back(relation);
      else if (!(e.relations[at->second] == relation) && shapes.ok())
        shapes = MakeError("relation " + relation.schema + "." + relation.name + " has two shapes in " +
                           DescribeTransaction(ready.tx));
    }
  };
  if (defect) {
    for (const ChunkRef& ref : ready.manifest->chunks) {
      auto chunk = ReadStagedChunk(ready, ref, &staged);
      if (!chunk) continue;
      add_relations(*chunk);
      for (Change& change : chunk->changes) e.changes.push_back(std::move(change));
    }
    return e;
  }
  Status walked = partition::MergeByPosition(
      ready.manifest->chunks, ready.total_changes,
      [&](const ChunkRef& ref) -> Result<Chunk> {
        auto chunk = ReadStagedChunk(ready, ref, &staged);
        if (chunk) add_relations(*chunk);
        return chunk;
      },
      [&](const Chunk& chunk, size_t i) -> Status {
        e.changes.push_back(chunk.changes[i]);
        return Status::Ok();
      });
  if (!walked.ok()) return walked.error();
  if (!shapes.ok()) return shapes.error();
  return e;
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
  if (ready.total_changes <= kPreloadChangesMax)
    preloaded = std::move(ReadStaged({tx.commit_lsn}, DescribeTransaction(tx))[tx.commit_lsn]);
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
