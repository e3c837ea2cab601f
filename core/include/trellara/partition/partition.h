// partition.h — partitioned scale mode's rules, as pure decisions (no log, no target): where a
// change goes (the versioned partition map), what a partition applier must find in a partitioned
// transaction's manifest before it buffers a chunk, and the global watermark — the newest source
// commit for which every partition listed by every manifest up to it holds checkpoint evidence.
// Readers of the user tables may see a source transaction only once the watermark passes it.
//
// Routing. A row change (insert, update, delete) goes to exactly one partition, chosen from its
// relation's schema and name (not its OID: a target restored from pg_dump routes alike) and its
// replica-identity key values: the old key when the change carries an old image, else the new
// row's key columns. A relation without key columns (REPLICA IDENTITY FULL or NOTHING without a
// primary key) routes by relation alone, so its rows keep their order in one partition. A change
// that is not a row change (truncate, DDL, logical message), or whose key value is not in the
// change (an unchanged TOASTed key), is `serial`: it belongs to the transaction's global boundary
// and is applied only once every partition holds everything before it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trellara/base/result.h"
#include "trellara/record/envelope.h"

namespace trellara::partition {

inline constexpr uint32_t kMaxPartitions = 64;

// The versioned partition map. Changing `partitions` is a new version, made only by the
// documented re-partitioning step (a flow never mixes two maps in one transaction).
struct PartitionMap {
  uint32_t version = 1;
  uint32_t partitions = 1;  // 1..kMaxPartitions
  bool operator==(const PartitionMap&) const = default;
};
// An error naming the bad field: version 0, no partitions, more than kMaxPartitions.
Status ValidateMap(const PartitionMap& map);

struct Route {
  bool serial = false;     // applied at the transaction's global boundary (see above)
  uint32_t partition = 0;  // when not serial: 0..partitions-1
  bool operator==(const Route&) const = default;
};

// The partition of a row of `schema`.`name` whose key values are `key` (empty: the relation has
// no key). Stable across processes, versions of this code's callers, and machines: a hash of the
// bytes (CRC32C over length-prefixed fields), never of pointers or OIDs.
uint32_t PartitionOfRow(const PartitionMap& map, std::string_view schema, std::string_view name,
                        std::span<const Value> key);

// Where `change` of `relation` goes. `relation` is the change's relation (ignored for serial ops).
Route RouteChange(const PartitionMap& map, const RelationInfo& relation, const Change& change);

// ---- a partition applier's check of one chunk against the manifest ------------------------------
// The manifest is a claim until its commit marker binds it; a partition applier checks every chunk
// it is handed against it before it buffers anything.
enum class ChunkVerdict : uint8_t {
  Accept,               // listed for this partition, same event count and checksum
  Duplicate,            // already accepted, identical: counted, not buffered again
  RoutingMismatch,      // the chunk's routing header names another partition than this applier's
  Unlisted,             // the manifest lists no chunk with this seq
  ListedElsewhere,      // listed, but for another partition than the chunk's header says
  Conflicting,          // listed (or accepted before) with another event count or checksum
};
const char* ChunkVerdictName(ChunkVerdict verdict);  // "accept", "duplicate", "routing_mismatch", ...
bool Refused(ChunkVerdict verdict);                   // everything but Accept and Duplicate

// `accepted`: the chunks this partition accepted so far for the transaction, by seq.
ChunkVerdict CheckChunk(uint32_t applier_partition, const ChunkRef& chunk, std::span<const ChunkRef> manifest_chunks,
                        const std::map<uint32_t, ChunkRef>& accepted);

// At the commit marker: the chunks of `partition` the manifest lists that were not accepted
// (their seqs, ascending). Non-empty: the transaction is refused for a missing chunk.
std::vector<uint32_t> MissingChunks(uint32_t partition, std::span<const ChunkRef> manifest_chunks,
                                    const std::map<uint32_t, ChunkRef>& accepted);

// The partitions a manifest lists (ascending, each once): those that must hold checkpoint
// evidence for the transaction before the watermark may pass it.
std::vector<uint32_t> ListedPartitions(std::span<const ChunkRef> manifest_chunks);

// ---- the global watermark --------------------------------------------------------------------
struct PendingTransaction {
  uint64_t commit_lsn = 0;
  std::vector<uint32_t> partitions;  // ListedPartitions of its manifest
};

struct Watermark {
  uint64_t commit_lsn = 0;            // every transaction at or below it may be visible
  std::optional<uint64_t> held_at;    // the first transaction past it (nullopt: none pending)
  std::vector<uint32_t> holding;      // the partitions without checkpoint evidence for held_at
  bool operator==(const Watermark&) const = default;
};

// `pending`: the transactions past `floor` (the watermark already published), in commit order.
// `checkpoints`: per partition, the commit LSN of the newest transaction whose part that
// partition committed (a partition applier commits its transactions in commit order, so evidence
// for T is a checkpoint at or past T's commit LSN; a partition absent from the map has none).
// The watermark moves to the last transaction before the first one some listed partition lacks.
// An error when `pending` is not in ascending commit order, or starts at or below `floor`.
Result<Watermark> GlobalWatermark(uint64_t floor, std::span<const PendingTransaction> pending,
                                  const std::map<uint32_t, uint64_t>& checkpoints);

// ---- the publisher's decision for one partitioned transaction ------------------------------
// What a partition applier recorded when it refused a transaction (trellara.partition_checkpoints
// blocker / blocked_commit_lsn): it staged nothing of it and will not move past it.
struct PartitionBlocker {
  uint64_t commit_lsn = 0;  // the refused transaction
  std::string reason;       // the partition applier's message (a chunk verdict, a missing chunk, ...)
};

enum class PublishAction : uint8_t {
  Publish,     // every listed partition holds evidence: apply it from the staged chunks
  Wait,        // some listed partition has no evidence yet and refused nothing: wait for it
  Quarantine,  // a listed partition without evidence refused this very transaction
};

struct PublishDecision {
  PublishAction action = PublishAction::Wait;
  std::vector<uint32_t> holding;  // Wait: the partitions without evidence (ascending)
  uint32_t refusing = 0;          // Quarantine: the first holding partition that refused it
  std::string reason;             // Quarantine: that partition's reason
  bool operator==(const PublishDecision&) const = default;
};

// For the transaction at `commit_lsn` listing `partitions`: its watermark over `checkpoints`
// (GlobalWatermark with this one transaction pending past `floor`), then the blockers of the
// partitions holding it. A blocker for another transaction (an older one the partition retried
// past, or a later one) does not refuse this one. Never publishes past a partition without
// evidence. An error when `commit_lsn` is not past `floor`.
Result<PublishDecision> DecidePublication(uint64_t floor, uint64_t commit_lsn, std::span<const uint32_t> partitions,
                                          const std::map<uint32_t, uint64_t>& checkpoints,
                                          const std::map<uint32_t, PartitionBlocker>& blockers);

}  // namespace trellara::partition

namespace trellara::partition {

// ---- a partition applier's check of a chunk's rows -------------------------------------------
// Every change of `chunk` must route to `partition` under `map` (serial changes ride in partition
// 0): the chunk's routing header is a claim the rows must bear out before anything of it is
// buffered. Returns what contradicts it (change index, relation, the partition it routes to), or
// nullopt. Negative control (tests only): defect.partition_routing_unchecked trusts the header.
std::optional<std::string> CheckRowsRoute(const PartitionMap& map, const Chunk& chunk, uint32_t partition);

// ---- the publisher's merge -----------------------------------------------------------------
// A partitioned transaction's changes in their source order: each partition's chunks (listed by
// `chunks`, the manifest's refs in seq order) are read in partition-sequence order — one chunk per
// partition held at a time — and their changes merged by position. The positions must be exactly
// 0..total_changes-1, each once; `load` must return the chunk a ref names (the caller verifies it
// against the ref). `visit(chunk, i)` gets each change as chunk.changes[i], in source order. An
// error names the position that is missing or repeated and the partition.
Status MergeByPosition(std::span<const ChunkRef> chunks, uint64_t total_changes,
                       const std::function<Result<Chunk>(const ChunkRef&)>& load,
                       const std::function<Status(const Chunk&, size_t)>& visit);

}  // namespace trellara::partition
