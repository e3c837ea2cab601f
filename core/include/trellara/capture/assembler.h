// assembler.h — turns the changes of one decoded source transaction into log records.
//
// The output plugin feeds a transaction's changes in commit order; the assembler decides the
// record shape: one Envelope when the transaction fits one record (at most `chunk_changes`
// changes and `chunk_bytes` bytes of values), otherwise Chunks emitted as they fill, then a
// Manifest and a CommitMarker. A chunk closes before a change that would take it past either
// bound, so at most `chunk_changes` changes and about `chunk_bytes` bytes are held in memory,
// whatever the transaction size. A single change larger than `chunk_bytes` is carried alone in its
// own record (chunk, or the Envelope of a one-change transaction): values are never split. A
// record that would encode to more than `record_bytes_max` is refused with an error that names
// the transaction and the relation (uncapturable_failure() is then true). A relation whose schema changes in
// the middle of a transaction forces a chunk boundary, so every record describes each relation
// it refers to exactly once. The assembler never writes anywhere: records go to the Sink.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trellara/partition/partition.h"
#include "trellara/record/checksum.h"
#include "trellara/record/envelope.h"
#include "trellara/base/result.h"

namespace trellara {

inline constexpr uint32_t kDefaultChunkChanges = 1024;
inline constexpr uint32_t kMaxChunkChanges = 1u << 20;
inline constexpr uint64_t kDefaultChunkBytes = 16ull << 20;
inline constexpr uint64_t kMinChunkBytes = 64ull << 10;
inline constexpr uint64_t kMaxChunkBytes = 1ull << 30;

// The bytes a change adds to a record, as counted against chunk_bytes: its values' data plus a
// small fixed cost per value and per change.
uint64_t ChangeBytes(const Change& change);

// One encoded record ready to be written, with what a writer needs to frame and acknowledge it.
struct EmittedRecord {
  RecordType type;
  const TxIdentity& tx;
  bool completes_transaction;  // Envelope or CommitMarker: the transaction is whole once durable
  const std::string& bytes;    // encoded Record
};
using RecordSink = std::function<Status(const EmittedRecord&)>;

class TransactionAssembler {
 public:
  struct Options {
    std::string flow;
    uint64_t origin_sysid = 0;
    uint32_t chunk_changes = kDefaultChunkChanges;
    uint64_t chunk_bytes = kDefaultChunkBytes;
    uint64_t record_bytes_max = 1ull << 30;  // the log's frame limit (kMaxRecordBytes)
    // Partitioned scale mode (docs/partitioned.md): every transaction with changes is written as
    // per-partition chunks (each change routed by partition::RouteChange; serial changes ride in
    // partition 0), a partitioned Manifest naming `map`, and a CommitMarker. Each partition fills
    // its own chunk, so up to map.partitions chunks are held at once.
    bool partitioned = false;
    partition::PartitionMap map;
  };
  explicit TransactionAssembler(Options options);

  // Starts a transaction; every record of it carries this identity.
  void Begin(uint32_t xid, uint64_t begin_lsn, uint64_t commit_lsn, int64_t commit_time_us);
  // Adds the next change. Every RelationInfo must carry its fingerprint (ComputeFingerprint).
  // `relation` describes change.relation_oid (null for Truncate, Message
  // and Ddl); `truncated` describes every relation a Truncate names, in its order.
  Status AddChange(Change change, const RelationInfo* relation, const std::vector<const RelationInfo*>& truncated,
                   const RecordSink& sink);
  // Emits the transaction's remaining records. A transaction without changes emits nothing.
  Status Commit(const RecordSink& sink);
  // Forgets the open transaction (decoding error or rollback of a prepared transaction).
  void Reset();

  bool in_transaction() const { return open_; }
  uint64_t change_count() const { return total_changes_; }
  uint32_t chunks_emitted() const { return static_cast<uint32_t>(chunk_refs_.size()); }
  // The last error came from a record above record_bytes_max: the transaction cannot be captured.
  bool uncapturable_failure() const { return uncapturable_failure_; }

 private:
  void RememberRelation(const RelationInfo& relation);
  // Keeps the descriptions an emitted record carried, for RememberRelation to reuse (bounded).
  void KeepSpareRelations(std::vector<RelationInfo>& relations);  // moves the elements out
  void MergeIntoAllRelations(const std::vector<RelationInfo>& relations);
  Status FlushChunk(const RecordSink& sink);
  Status AddPartitioned(Change change, const RelationInfo* relation, const std::vector<const RelationInfo*>& truncated,
                        const RecordSink& sink);
  // Partitioned: one partition's open chunk.
  struct Lane {
    std::vector<Change> changes;
    std::vector<uint32_t> positions;
    std::vector<RelationInfo> relations;
    uint64_t bytes = 0;
    uint32_t next_partition_seq = 0;
  };
  Status FlushLane(uint32_t partition, const RecordSink& sink);
  Status EmitManifestAndMarker(const RecordSink& sink);
  Status Emit(const Record& record, bool completes, const RecordSink& sink, std::string* bytes_out = nullptr);

  Options options_;
  bool open_ = false;
  TxIdentity tx_;
  uint64_t begin_lsn_ = 0;
  int64_t commit_time_us_ = 0;
  std::vector<Change> pending_;               // changes not yet emitted (<= chunk_changes)
  std::vector<RelationInfo> pending_relations_;  // relations the pending changes refer to
  std::vector<RelationInfo> all_relations_;      // every relation of the transaction (last version)
  // Descriptions of relations of earlier records, reused when equal (never consulted for content:
  // a reused description is equal in every field to the one the caller passed).
  static constexpr size_t kSpareRelationsMax = 64;
  std::vector<RelationInfo> spare_relations_;
  std::vector<RelationCount> counts_;
  std::vector<ChunkRef> chunk_refs_;
  std::unique_ptr<ChangeHasher> total_hasher_;
  uint64_t total_changes_ = 0;
  uint64_t pending_bytes_ = 0;
  std::vector<Lane> lanes_;  // partitioned: one per partition
  bool uncapturable_failure_ = false;
};

}  // namespace trellara
