// partition_applier.h — `trellara apply --config F --partition K`: one partition applier of a
// partitioned flow (docs/partitioned.md).
//
// It reads the flow's log through the same barrier as every applier (nothing unverified goes
// further), takes the partitioned transactions whose manifest lists partition K, and for each one
// checks every chunk of K before it stages anything — the routing header against K and the
// manifest (core CheckChunk), every row of the chunk against the partition map the manifest names
// (core RouteChange: a chunk whose header says K but whose rows route elsewhere is refused), and
// at the end the chunks of K the manifest lists that it did not accept (core MissingChunks). Then
// it commits, in one target transaction, the chunks' records into trellara.partition_stage and
// its checkpoint evidence (trellara.partition_checkpoints: the commit LSN and the log offset to
// resume from). Nothing reaches the user tables here: the publisher (trellara apply) moves a
// transaction into them once every listed partition holds evidence for it.
//
// A refused transaction is rolled back (nothing of it was staged), recorded as the partition's
// blocker, and the partition applier halts there (exit 3 with --until-caught-up, else it waits
// for a stop); the publisher quarantines the transaction when it reaches it. A restart retries it.
// State lives on the target only: a restart resumes at the checkpoint's log offset, and a
// transaction at or below the checkpoint is never staged again. The log consumer "partition-K"
// follows the checkpoint so the relay retains what the partition still needs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kit/config.h"
#include "kit/log_watch.h"
#include "pg/pg_connection.h"
#include "trellara/log/barrier.h"
#include "trellara/log/device.h"
#include "trellara/log/reader.h"

namespace trellara::cli::apply {

class PartitionApplier {
 public:
  PartitionApplier(FlowConfig config, uint32_t partition, bool until_caught_up);
  void Run();

 private:
  struct Refusal {
    std::string reason;
  };
  bool WaitForReplica();  // false: stopped while waiting
  void Connect();
  void Resume();
  // One pass over the log from the checkpoint; returns normally when stopped or caught up.
  void Pump();
  // Stages this partition's part of `ready` with the checkpoint, or returns why it is refused.
  std::optional<Refusal> Stage(const ReadyTransaction& ready);
  void CommitBatch();
  void RecordCheckpointOnly();
  [[noreturn]] void Halt(uint64_t commit_lsn, const std::string& reason);
  PgResult Must(PgResult result, const std::string& what);
  std::string Name() const;

  FlowConfig config_;
  uint32_t partition_;
  bool until_caught_up_;
  std::string consumer_;
  std::unique_ptr<log::LogDevice> device_;
  std::unique_ptr<PgConnection> conn_;
  std::unique_ptr<log::LogReader> reader_;
  std::unique_ptr<LogDirWatch> log_watch_;  // woken by writes to the log directory (kit/log_watch.h)
  std::unique_ptr<log::LogReader> chunk_reader_;
  TransactionBarrier barrier_;
  uint64_t checkpoint_lsn_ = 0;       // evidence committed on the target
  uint64_t checkpoint_offset_ = 0;    // where the target says to resume
  uint64_t seen_lsn_ = 0;             // the newest transaction read (staged or not ours)
  uint64_t seen_offset_ = 0;          // just after it
  uint64_t stop_offset_ = UINT64_MAX; // --until-caught-up: the log's published end at start
  // The open batch: one target transaction staging several source transactions' parts, committed
  // with the checkpoint of its last one (bounds: core cadence kPartitionBatchTransactions/Age).
  struct StagedRow {
    std::string commit_lsn;  // formatted
    uint32_t seq = 0;
    uint32_t xid = 0;
    std::string record_hex;  // the chunk's log record, byte for byte
  };
  std::vector<StagedRow> batch_rows_;  // staged at the batch's commit, with its checkpoint
  uint64_t batch_bytes_ = 0;
  bool batch_open_ = false;
  std::chrono::steady_clock::time_point batch_started_;
  uint64_t batch_lsn_ = 0;
  uint64_t batch_offset_ = 0;
  uint32_t batch_map_version_ = 0;
  int64_t batch_commit_time_us_ = 0;
  uint64_t batch_transactions_ = 0;
  uint64_t batch_chunks_ = 0;
  uint64_t batch_duplicates_ = 0;
  uint64_t staged_transactions_ = 0;
  uint64_t staged_chunks_ = 0;
  uint64_t duplicate_chunks_ = 0;
};

}  // namespace trellara::cli::apply
