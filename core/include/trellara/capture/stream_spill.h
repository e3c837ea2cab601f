// stream_spill.h — the relay's store for streamed (in-progress) source transactions (DESIGN §2
// "large transaction"; seed 000 pgoutput_streamed_transaction_spills_until_commit,
// pgoutput_stream_abort_discards_partial_changes).
//
// PostgreSQL streams a transaction that is still in progress once the reorder buffer holds more
// than logical_decoding_work_mem. The output plugin turns each streamed change into one *stream
// record* (an encoded Record holding an Envelope with at most one change and the relations it
// needs) tagged with the top-level xid and the (sub)transaction xid the change belongs to. The
// relay hands every stream record to this store instead of its log: nothing of a transaction
// reaches the log before its commit.
//
// The store keeps at most `memory_changes` records or `memory_bytes` bytes per transaction in
// memory; beyond that it appends them to the transaction's own spill file
// `<directory>/xid-<top xid>.spill` (frames: u32 length, u32 xid, u32 crc32c of the bytes, bytes;
// little-endian). Spill files are not fsync'ed: after a crash the slot decodes the transaction
// again from its start, so Open() removes every `*.spill` left in the directory.
//
//   - AbortSubtransaction(top, xid): exactly the records of `xid` are discarded: removed from memory
//     now, skipped when the file is read back. PostgreSQL reports the abort of each aborted
//     descendant of a subtransaction separately, so a nested abort needs no tree here.
//   - AbortTransaction(top): everything of the transaction is forgotten, memory and file.
//   - Commit(top, each): hands every kept record to `each` in the order they were added, reading
//     the file back in bounded memory (one frame at a time), then forgets the transaction and
//     removes its file. A frame that does not read back whole (length, crc) is an error naming the
//     file and offset: the relay fails and the slot decodes the transaction again.
//
// The store never touches the log and never decides record shapes: ReplayStreamedTransaction
// feeds the kept changes to a TransactionAssembler, which writes chunks + manifest + commit marker
// through the relay's sink exactly as it would for a transaction decoded at commit.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "trellara/capture/assembler.h"
#include "trellara/base/result.h"

namespace trellara {

inline constexpr uint32_t kDefaultSpillMemoryChanges = 1024;
inline constexpr uint64_t kDefaultSpillMemoryBytes = 4ull << 20;
// Largest stream record accepted (the log's frame limit).
inline constexpr uint64_t kMaxStreamRecordBytes = 1ull << 30;

struct SpillOptions {
  std::string directory;  // created if missing (mode 0700)
  uint32_t memory_changes = kDefaultSpillMemoryChanges;  // records kept in memory per transaction
  uint64_t memory_bytes = kDefaultSpillMemoryBytes;      // bytes kept in memory per transaction
};

struct SpillStats {
  uint64_t transactions_open = 0;
  uint64_t memory_bytes = 0;       // bytes of records held in memory, all transactions
  uint64_t spilled_bytes = 0;      // bytes written to spill files since Open
  uint64_t files_open = 0;         // spill files that exist now
  uint64_t records_discarded = 0;  // by aborts, since Open
};

class StreamSpill {
 public:
  // Creates the directory if needed and removes every *.spill in it (left by a crash);
  // removed_at_open() says how many.
  static Result<std::unique_ptr<StreamSpill>> Open(SpillOptions options);
  ~StreamSpill();

  Status Add(uint32_t top_xid, uint32_t xid, std::span<const uint8_t> record);
  Status AbortSubtransaction(uint32_t top_xid, uint32_t xid);
  Status AbortTransaction(uint32_t top_xid);
  // `each` returning an error stops the replay with that error; the transaction is then forgotten
  // (its file removed) all the same: the caller fails and decoding starts over.
  Status Commit(uint32_t top_xid, const std::function<Status(std::span<const uint8_t>)>& each);

  bool Has(uint32_t top_xid) const;
  uint64_t removed_at_open() const { return removed_at_open_; }
  SpillStats stats() const;
  const std::string& directory() const { return options_.directory; }
  // Path of the spill file of `top_xid` (whether or not it exists).
  std::string FileOf(uint32_t top_xid) const;

  StreamSpill(const StreamSpill&) = delete;
  StreamSpill& operator=(const StreamSpill&) = delete;

 private:
  struct Pending {
    uint32_t xid = 0;
    std::vector<uint8_t> bytes;
  };
  struct Transaction {
    std::vector<Pending> memory;     // not yet in the file, in order
    uint64_t memory_bytes = 0;
    int fd = -1;                     // spill file, once opened
    uint64_t file_bytes = 0;
    uint64_t file_records = 0;       // frames in the file (aborted ones included)
    std::set<uint32_t> aborted;      // subtransactions whose records are skipped on read-back
  };
  explicit StreamSpill(SpillOptions options) : options_(std::move(options)) {}
  Status Flush(uint32_t top_xid, Transaction& tx);
  void Forget(uint32_t top_xid);

  SpillOptions options_;
  std::map<uint32_t, Transaction> open_;
  uint64_t removed_at_open_ = 0;
  uint64_t spilled_bytes_ = 0;
  uint64_t records_discarded_ = 0;
};

// The commit LSN a stream record carries: the transaction has not committed yet, and the codec
// refuses commit LSN 0/0 (no committed transaction has it), so stream records carry this
// placeholder instead. It never reaches the log: the assembler stamps the real commit LSN.
inline constexpr uint64_t kStreamRecordCommitLsn = ~uint64_t{0};

// Builds the stream record the plugin emits for one streamed change: a Record holding a sealed
// Envelope (identity: flow, `xid`, commit_lsn kStreamRecordCommitLsn) with the change and the
// relations it refers to (`relation` for a row change or a DDL with a definition, `truncated` for a
// Truncate, none for a Message or a dropped table).
Result<std::string> EncodeStreamRecord(const std::string& flow, uint32_t xid, Change change,
                                       const RelationInfo* relation, const std::vector<const RelationInfo*>& truncated);

// Commit of a streamed transaction: replays the store's kept records of `top_xid` through
// `assembler` (Begin with the given identity, one AddChange per record, Commit) into `sink`.
// Errors name the transaction and the failing record; the store forgets the transaction either way.
struct StreamedCommit {
  uint32_t top_xid = 0;
  uint64_t begin_lsn = 0;
  uint64_t commit_lsn = 0;       // end of the commit record, as for a transaction decoded at commit
  int64_t commit_time_us = 0;
};
Status ReplayStreamedTransaction(StreamSpill& spill, const StreamedCommit& commit, TransactionAssembler& assembler,
                                 const RecordSink& sink);

}  // namespace trellara
