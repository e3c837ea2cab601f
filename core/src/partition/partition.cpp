// partition.cpp — partitioned scale mode's rules (partition.h).
#include "trellara/partition/partition.h"

#include <algorithm>

#include "trellara/base/assert.h"
#include "trellara/base/fault.h"
#include "trellara/log/crc32c.h"

namespace trellara::partition {
namespace {

uint32_t HashField(uint32_t crc, std::string_view bytes) {
  const uint32_t length = static_cast<uint32_t>(bytes.size());
  const uint8_t prefix[4] = {static_cast<uint8_t>(length), static_cast<uint8_t>(length >> 8),
                             static_cast<uint8_t>(length >> 16), static_cast<uint8_t>(length >> 24)};
  crc = Crc32c(prefix, sizeof prefix, crc);
  return Crc32c(bytes.data(), bytes.size(), crc);
}

// The key values of the row `change` touches, in column order; empty when the relation has no
// key; nullopt when the change does not carry them (an unchanged TOASTed key, a delete without
// its old key, a tuple that does not match the relation).
std::optional<std::vector<Value>> KeyOf(const RelationInfo& relation, const Change& change) {
  std::vector<size_t> keys;
  for (size_t i = 0; i < relation.columns.size(); i++)
    if (relation.columns[i].is_key) keys.push_back(i);
  if (keys.empty()) return std::vector<Value>{};
  std::vector<Value> key;
  if (change.old_image == OldImage::Key) {
    if (change.old_tuple.size() != keys.size()) return std::nullopt;
    key = change.old_tuple;
  } else {
    const std::vector<Value>* row = nullptr;
    if (change.old_image == OldImage::Full)
      row = &change.old_tuple;
    else if (change.op != Op::Delete)
      row = &change.new_tuple;
    if (row == nullptr || row->size() != relation.columns.size()) return std::nullopt;
    for (size_t i : keys) key.push_back((*row)[i]);
  }
  for (const Value& v : key)
    if (v.kind == Value::Kind::UnchangedToast) return std::nullopt;
  return key;
}

}  // namespace

Status ValidateMap(const PartitionMap& map) {
  if (map.version == 0) return MakeError("partition map version 0 is not a version (versions start at 1)");
  if (map.partitions == 0) return MakeError("a partition map needs at least one partition (partitions = 0)");
  if (map.partitions > kMaxPartitions)
    return MakeError("partitions = " + std::to_string(map.partitions) + " is more than the most a flow supports (" +
                     std::to_string(kMaxPartitions) + ")");
  return Status::Ok();
}

uint32_t PartitionOfRow(const PartitionMap& map, std::string_view schema, std::string_view name,
                        std::span<const Value> key) {
  uint32_t crc = HashField(0, schema);
  crc = HashField(crc, name);
  for (const Value& v : key) {
    const char kind = static_cast<char>(v.kind);
    crc = Crc32c(&kind, 1, crc);
    crc = HashField(crc, v.data);
  }
  return map.partitions <= 1 ? 0 : crc % map.partitions;
}

Route RouteChange(const PartitionMap& map, const RelationInfo& relation, const Change& change) {
  if (change.op != Op::Insert && change.op != Op::Update && change.op != Op::Delete) return Route{true, 0};
  auto key = KeyOf(relation, change);
  if (!key) return Route{true, 0};
  return Route{false, PartitionOfRow(map, relation.schema, relation.name, *key)};
}

const char* ChunkVerdictName(ChunkVerdict verdict) {
  switch (verdict) {
    case ChunkVerdict::Accept: return "accept";
    case ChunkVerdict::Duplicate: return "duplicate";
    case ChunkVerdict::RoutingMismatch: return "routing_mismatch";
    case ChunkVerdict::Unlisted: return "unlisted";
    case ChunkVerdict::ListedElsewhere: return "listed_elsewhere";
    case ChunkVerdict::Conflicting: return "conflicting";
  }
  return "unknown";
}

bool Refused(ChunkVerdict verdict) { return verdict != ChunkVerdict::Accept && verdict != ChunkVerdict::Duplicate; }

ChunkVerdict CheckChunk(uint32_t applier_partition, const ChunkRef& chunk, std::span<const ChunkRef> manifest_chunks,
                        const std::map<uint32_t, ChunkRef>& accepted) {
  if (chunk.partition_id != applier_partition) return ChunkVerdict::RoutingMismatch;
  auto listed = std::find_if(manifest_chunks.begin(), manifest_chunks.end(),
                             [&](const ChunkRef& ref) { return ref.seq == chunk.seq; });
  if (listed == manifest_chunks.end()) return ChunkVerdict::Unlisted;
  if (listed->partition_id != chunk.partition_id) return ChunkVerdict::ListedElsewhere;
  if (listed->event_count != chunk.event_count || listed->checksum != chunk.checksum) return ChunkVerdict::Conflicting;
  auto before = accepted.find(chunk.seq);
  if (before == accepted.end()) return ChunkVerdict::Accept;
  return before->second == chunk ? ChunkVerdict::Duplicate : ChunkVerdict::Conflicting;
}

std::vector<uint32_t> MissingChunks(uint32_t partition, std::span<const ChunkRef> manifest_chunks,
                                    const std::map<uint32_t, ChunkRef>& accepted) {
  std::vector<uint32_t> missing;
  for (const ChunkRef& ref : manifest_chunks)
    if (ref.partition_id == partition && !accepted.count(ref.seq)) missing.push_back(ref.seq);
  std::sort(missing.begin(), missing.end());
  return missing;
}

std::vector<uint32_t> ListedPartitions(std::span<const ChunkRef> manifest_chunks) {
  std::vector<uint32_t> partitions;
  for (const ChunkRef& ref : manifest_chunks) partitions.push_back(ref.partition_id);
  std::sort(partitions.begin(), partitions.end());
  partitions.erase(std::unique(partitions.begin(), partitions.end()), partitions.end());
  return partitions;
}

Result<Watermark> GlobalWatermark(uint64_t floor, std::span<const PendingTransaction> pending,
                                  const std::map<uint32_t, uint64_t>& checkpoints) {
  Watermark w;
  w.commit_lsn = floor;
  uint64_t previous = floor;
  for (const PendingTransaction& tx : pending) {
    if (tx.commit_lsn <= previous)
      return MakeError("pending partitioned transactions are not in ascending commit order past the watermark " +
                       FormatLsn(floor) + ": " + FormatLsn(tx.commit_lsn) + " follows " + FormatLsn(previous));
    previous = tx.commit_lsn;
  }
  for (const PendingTransaction& tx : pending) {
    std::vector<uint32_t> holding;
    for (uint32_t p : tx.partitions) {
      auto evidence = checkpoints.find(p);
      if (evidence == checkpoints.end() || evidence->second < tx.commit_lsn) holding.push_back(p);
    }
    if (!holding.empty()) {
      w.held_at = tx.commit_lsn;
      w.holding = std::move(holding);
      return w;
    }
    w.commit_lsn = tx.commit_lsn;
  }
  return w;
}

Result<PublishDecision> DecidePublication(uint64_t floor, uint64_t commit_lsn, std::span<const uint32_t> partitions,
                                          const std::map<uint32_t, uint64_t>& checkpoints,
                                          const std::map<uint32_t, PartitionBlocker>& blockers) {
  const std::vector<PendingTransaction> pending{{commit_lsn, std::vector<uint32_t>(partitions.begin(), partitions.end())}};
  auto watermark = GlobalWatermark(floor, pending, checkpoints);
  if (!watermark) return watermark.error();
  PublishDecision decision;
  if (!watermark->held_at) {
    TRELLARA_ASSERT(watermark->commit_lsn == commit_lsn, "a watermark with nothing held covers the transaction");
    decision.action = PublishAction::Publish;
    return decision;
  }
  TRELLARA_ASSERT(*watermark->held_at == commit_lsn && !watermark->holding.empty(),
                  "a held watermark names the one pending transaction and the partitions holding it");
  for (uint32_t p : watermark->holding)
    if (auto b = blockers.find(p); b != blockers.end() && b->second.commit_lsn == commit_lsn) {
      decision.action = PublishAction::Quarantine;
      decision.refusing = p;
      decision.reason = b->second.reason;
      return decision;
    }
  decision.action = PublishAction::Wait;
  decision.holding = std::move(watermark->holding);
  return decision;
}

std::optional<std::string> CheckRowsRoute(const PartitionMap& map, const Chunk& chunk, uint32_t partition) {
  if (fault::Hit("defect.partition_routing_unchecked") == fault::Action::Defect) return std::nullopt;
  static const RelationInfo kNone{};
  for (size_t i = 0; i < chunk.changes.size(); i++) {
    const Change& c = chunk.changes[i];
    const RelationInfo* relation = nullptr;
    for (const RelationInfo& r : chunk.relations)
      if (r.oid == c.relation_oid) relation = &r;
    const Route route = RouteChange(map, relation != nullptr ? *relation : kNone, c);
    const uint32_t expected = route.serial ? 0 : route.partition;
    if (expected != partition)
      return "chunk " + std::to_string(chunk.seq) + " names partition " + std::to_string(chunk.partition_id) +
             " in its routing header but its change " + std::to_string(i) +
             (relation != nullptr ? " (" + relation->schema + "." + relation->name + ")" : std::string()) +
             " routes to partition " + std::to_string(expected) + " under map version " + std::to_string(map.version) +
             " (" + std::to_string(map.partitions) + " partitions): routing_mismatch";
  }
  return std::nullopt;
}

Status MergeByPosition(std::span<const ChunkRef> chunks, uint64_t total_changes,
                       const std::function<Result<Chunk>(const ChunkRef&)>& load,
                       const std::function<Status(const Chunk&, size_t)>& visit) {
  struct Cursor {
    std::vector<const ChunkRef*> refs;  // partition sequence order
    size_t next_ref = 0;
    std::optional<Chunk> chunk;
    size_t index = 0;
  };
  std::map<uint32_t, Cursor> cursors;
  for (const ChunkRef& ref : chunks) cursors[ref.partition_id].refs.push_back(&ref);
  for (auto& [partition, cursor] : cursors)
    std::sort(cursor.refs.begin(), cursor.refs.end(),
              [](const ChunkRef* a, const ChunkRef* b) { return a->partition_seq < b->partition_seq; });
  // Loads the cursor's next non-empty chunk; false when the partition has no chunk left.
  auto advance = [&](uint32_t partition, Cursor& c) -> Result<bool> {
    while (!c.chunk || c.index >= c.chunk->changes.size()) {
      c.chunk.reset();
      c.index = 0;
      if (c.next_ref >= c.refs.size()) return false;
      const ChunkRef& ref = *c.refs[c.next_ref++];
      auto loaded = load(ref);
      if (!loaded.ok()) return loaded.error();
      if (loaded->positions.size() != loaded->changes.size())
        return MakeError("chunk " + std::to_string(ref.seq) + " of partition " + std::to_string(partition) +
                         " carries " + std::to_string(loaded->positions.size()) + " positions for " +
                         std::to_string(loaded->changes.size()) + " changes");
      c.chunk = std::move(loaded).value();
    }
    return true;
  };
  for (auto& [partition, cursor] : cursors) {
    auto more = advance(partition, cursor);
    if (!more.ok()) return more.error();
  }
  Cursor* current = nullptr;
  uint32_t current_partition = 0;
  for (uint64_t expected = 0; expected < total_changes; expected++) {
    const auto holds = [expected](const Cursor& c) {
      return c.chunk && c.index < c.chunk->changes.size() && c.chunk->positions[c.index] == expected;
    };
    if (current == nullptr || !holds(*current)) {
      current = nullptr;
      for (auto& [partition, cursor] : cursors)
        if (holds(cursor)) {
          current = &cursor;
          current_partition = partition;
          break;
        }
      if (current == nullptr) {
        std::string heads;
        for (const auto& [partition, cursor] : cursors)
          if (cursor.chunk && cursor.index < cursor.chunk->changes.size())
            heads += (heads.empty() ? "" : ", ") + std::string("partition ") + std::to_string(partition) + " at " +
                     std::to_string(cursor.chunk->positions[cursor.index]);
        return MakeError("no partition holds change position " + std::to_string(expected) + " of " +
                         std::to_string(total_changes) + " (next positions: " + (heads.empty() ? "none" : heads) +
                         "); the chunks do not reconstruct the transaction");
      }
    }
    TRELLARA_TRY(visit(*current->chunk, current->index));
    current->index++;
    auto more = advance(current_partition, *current);
    if (!more.ok()) return more.error();
  }
  for (const auto& [partition, cursor] : cursors)
    if (cursor.chunk || cursor.next_ref < cursor.refs.size())
      return MakeError("partition " + std::to_string(partition) + " holds changes past position " +
                       std::to_string(total_changes) + " (position " +
                       (cursor.chunk ? std::to_string(cursor.chunk->positions[cursor.index]) : std::string("?")) +
                       "), more than the transaction's " + std::to_string(total_changes) + " changes");
  return Status::Ok();
}

}  // namespace trellara::partition
