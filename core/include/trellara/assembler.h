// assembler.h — turns the changes of one decoded source transaction into log records.
//
// The output plugin feeds a transaction's changes in commit order; the assembler decides the
// record shape: one Envelope when the transaction has at most `chunk_changes` changes, otherwise
// Chunks emitted as they fill, then a Manifest and a CommitMarker. At most `chunk_changes`
// changes are held in memory, whatever the transaction size. A relation whose schema changes in
// the middle of a transaction forces a chunk boundary, so every record describes each relation
// it refers to exactly once. The assembler never writes anywhere: records go to the Sink.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trellara/checksum.h"
#include "trellara/envelope.h"
#include "trellara/result.h"

namespace trellara {

inline constexpr uint32_t kDefaultChunkChanges = 1024;
inline constexpr uint32_t kMaxChunkChanges = 1u << 20;

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

 private:
  void RememberRelation(const RelationInfo& relation);
  void MergeIntoAllRelations(const std::vector<RelationInfo>& relations);
  Status FlushChunk(const RecordSink& sink);
  Status Emit(const Record& record, bool completes, const RecordSink& sink, std::string* bytes_out = nullptr);

  Options options_;
  bool open_ = false;
  TxIdentity tx_;
  uint64_t begin_lsn_ = 0;
  int64_t commit_time_us_ = 0;
  std::vector<Change> pending_;               // changes not yet emitted (<= chunk_changes)
  std::vector<RelationInfo> pending_relations_;  // relations the pending changes refer to
  std::vector<RelationInfo> all_relations_;      // every relation of the transaction (last version)
  std::vector<RelationCount> counts_;
  std::vector<ChunkRef> chunk_refs_;
  std::unique_ptr<ChangeHasher> total_hasher_;
  uint64_t total_changes_ = 0;
};

}  // namespace trellara
