// snapshot_copy.h — the copy workers of `trellara snapshot` (snapshot_command.cpp): a shared queue
// of key-range chunks and the workers that copy them, each with its own source and target
// connection, exactly as docs/snapshot.md "The copy of one chunk" says.
//
// A worker never holds more than one row of a chunk in memory, never commits a chunk's rows
// without its `copied` state and snapshot in the same target transaction, and never decides a
// table's handoff (the command does, once every chunk is copied).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kit/config.h"
#include "trellara/apply/snapshot.h"

namespace trellara::cli::snapshot {

using Registration = SnapshotRegistration;  // core snapshot.h DecideRegistration

// One table of the flow's publication, as the source describes it and the target registered it.
struct SnapshotTable {
  std::string name;       // schema.table (unquoted, as pg_publication_tables names it)
  std::string schema, table;
  std::string qualified;  // format('%I.%I')
  std::string columns;    // the published, non-generated columns, quoted, comma-separated
  std::optional<std::string> row_filter;   // the publication's row filter (the plugin applies it too)
  bool source_partitioned = false;         // read FROM ONLY unless partitioned: not its inheritance children
  std::optional<std::string> key_column;   // the leading key column chunks split on; nullopt = one chunk
  std::string key_quoted;
  std::vector<ChunkRange> ranges;   // planned from the source (used when (re)registered)
  Registration registration = Registration::New;
  int chunks = 0;                   // registered chunk count
  std::vector<ChunkRange> pending;  // registered chunks not yet copied
};

// This invocation's progress on one table (shared by the workers and the progress reporter).
struct TableProgress {
  using Clock = std::chrono::steady_clock;
  std::atomic<uint64_t> rows{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<int> chunks_copied{0};
  std::atomic<int> chunks_skipped{0};
  std::atomic<bool> failed{false};
  std::atomic<bool> started{false};
  std::atomic<bool> reported_done{false};
  std::atomic<int> in_flight{0};  // chunks of the table being copied right now
  mutable std::mutex mutex;  // guards error, first_start, last_end
  std::string error;
  std::optional<Clock::time_point> first_start;
  std::optional<Clock::time_point> last_end;

  void MarkStart();
  void MarkEnd();
  double Seconds(Clock::time_point now) const;  // copy time of this invocation
};

struct ChunkWork {
  size_t table = 0;  // index into the tables / progress vectors
  ChunkRange range;
};

class WorkQueue {
 public:
  explicit WorkQueue(std::vector<ChunkWork> chunks);
  size_t size() const { return total_; }
  std::optional<ChunkWork> Pop();
  void Finished();  // one popped chunk is done (copied, skipped or failed)
  // True once every chunk is finished; otherwise waits up to `timeout` and returns false.
  bool WaitDone(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<ChunkWork> chunks_;
  size_t total_ = 0;
  size_t finished_ = 0;
};

struct CopyContext {
  const FlowConfig& config;
  const std::string& run_id;
  const std::vector<SnapshotTable>& tables;
  std::deque<TableProgress>& progress;
};

// One worker: takes chunks until the queue is empty. Transient failures are retried with
// backoff; any other failure marks the chunk's table failed_recoverable (with last_error, in a
// separate target transaction) and the table's remaining chunks are left pending.
void RunWorker(CopyContext& context, WorkQueue& queue, int worker_no);

}  // namespace trellara::cli::snapshot
