// writer.h — the only code that appends to a log directory: frames records, submits them through
// the device's asynchronous queue (io_uring on the real device), group-commits them with one
// fdatasync per group, publishes index entries and only then acknowledges.
//
// The acknowledgement rule (DESIGN §2): durable_end() moves past an offset only after
//   1. the write of its frame completed,
//   2. an fdatasync submitted after that completion completed successfully, and
//   3. its index entry was written (readers in other processes see only indexed frames).
// After a failed write or fdatasync the writer stops: every later call returns the error, no
// further offset is acknowledged, and the log must be reopened (recovery reads back what is really
// on disk — retrying fdatasync after a failure can report success for lost data).
//
// Two ways to drive it:
//  * non-blocking (the relay background worker): Append() ... Submit(), then wait on
//    completion_event_fd() with the latch and call Poll(); durable_end() says what is acknowledged.
//  * blocking (CLI, tests): Append() then Flush().
// A LogWriter is used from one thread. Segment rollover is the one blocking step inside Append: it waits for the old segment's
// outstanding records to be durable, then creates and fsyncs the new segment and the directory
// (once per segment_bytes_max of log, default 64 MiB).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trellara/log/device.h"
#include "trellara/log/format.h"
#include "trellara/log/recovery.h"

namespace trellara::log {

struct WriterOptions {
  // A segment is closed before a frame that would take it past this size; a frame larger than it
  // is written alone in a segment of its own.
  uint64_t segment_bytes_max = kSegmentBytesDefault;
  // An open batch of frames is submitted as one write when it reaches this size (Submit() submits
  // it earlier).
  size_t batch_bytes_max = 256u << 10;
  // 0: start an fdatasync as soon as written frames wait for one (lowest latency). Otherwise
  // wait until this long after the previous fdatasync started, so more records share one.
  uint64_t fsync_interval_us = 0;
};

// The last durable (acknowledged) record: its offset and the commit LSN in its frame header. That
// LSN is NOT what the log covers when the record is a Chunk or a Manifest (a torn chunked
// transaction at the tail): skipping re-decoded transactions through it would lose that one. The
// relay's restart rule is core DecideRestart (relay_progress.h), which reads back to the last
// completing frame.
struct DurableTail {
  std::optional<uint64_t> offset;
  uint64_t commit_lsn = 0;
};

class LogWriter {
 public:
  // Creates `dir` (0700) and `dir/consumers` if needed, takes the directory lock, recovers the log
  // (recovery.h) and positions appending after the last valid frame.
  static Result<std::unique_ptr<LogWriter>> Open(LogDevice& device, const std::string& dir,
                                                 const WriterOptions& options, RecoveryReport* report = nullptr);
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  // Frames a record into the open batch and returns its offset. Does not wait for the disk
  // (except at segment rollover). The record is acknowledged once durable_end() > offset.
  Result<uint64_t> Append(uint8_t type, uint64_t commit_lsn, std::span<const uint8_t> payload);
  // Submits the open batch and, when due, an fdatasync. Never waits.
  Status Submit();
  // Reaps completions without waiting and advances the state machine; returns durable_end().
  Result<uint64_t> Poll();
  // Blocks until the device reports a completion, then Poll().
  Result<uint64_t> WaitAndPoll();
  // Blocks until every appended record is acknowledged; returns durable_end().
  Result<uint64_t> Flush();
  // Deletes segments wholly below every registered consumer's offset (consumer_offsets.h).
  Result<uint64_t> ReclaimSegments();

  // Every offset below this is acknowledged: durable, indexed and readable by other processes.
  uint64_t durable_end() const { return durable_end_; }
  uint64_t next_offset() const { return next_offset_; }
  DurableTail durable_tail() const { return durable_tail_; }
  // Whether appending `payload_bytes` would start a new segment (the blocking step): a caller that
  // must stay responsive first waits for every appended record to be durable, its own way.
  bool WouldRollSegment(size_t payload_bytes) const {
    return segment_end_position_ > 0 && segment_end_position_ + kFrameHeaderBytes + payload_bytes > options_.segment_bytes_max;
  }
  // Bytes appended but not yet acknowledged (the caller throttles on this).
  uint64_t unacknowledged_bytes() const { return unacknowledged_bytes_; }
  uint64_t fsyncs_completed() const { return fsyncs_completed_; }
  // Readable when completions are waiting (-1 on devices without one).
  int completion_event_fd() const { return device_.completion_event_fd(); }
  const std::string& dir() const { return dir_; }
  // The error that stopped the writer, if any.
  const std::optional<Error>& failure() const { return failure_; }

 private:
  struct Batch {
    std::vector<uint8_t> bytes;
    uint64_t position = 0;  // in the current segment
    uint64_t first_offset = 0;
    uint64_t end_offset = 0;
    std::vector<IndexEntry> entries;
    uint64_t tag = 0;
    bool submitted = false;
    bool written = false;
  };

  LogWriter(LogDevice& device, std::string dir, const WriterOptions& options);
  Status StartSegment(uint64_t first_offset, bool create);
  Status RollSegment();
  Status SubmitOpenBatch();
  Status MaybeStartSync(bool force);
  Status HandleCompletion(const Completion& completion);
  Status PublishSyncedBatches(size_t count);
  Error Fail(Error error);
  Error FailAfterFsyncError(Error error);
  Status CheckUsable() const;

  LogDevice& device_;
  std::string dir_;
  WriterOptions options_;
  std::optional<FileId> lock_;
  std::optional<FileId> segment_file_;
  std::optional<FileId> index_file_;
  uint64_t segment_first_offset_ = 0;
  uint64_t segment_end_position_ = 0;  // includes appended, unsubmitted frames
  uint64_t index_entries_ = 0;         // entries in the current index file
  uint64_t next_offset_ = 0;
  uint64_t durable_end_ = 0;
  DurableTail durable_tail_;
  uint64_t unacknowledged_bytes_ = 0;
  std::deque<Batch> batches_;          // oldest first; not yet acknowledged
  uint64_t next_tag_ = 1;
  bool sync_in_flight_ = false;
  size_t sync_covers_batches_ = 0;
  size_t ops_in_flight_ = 0;
  uint64_t fsyncs_completed_ = 0;
  std::chrono::steady_clock::time_point last_sync_start_{};
  std::optional<Error> failure_;
  std::vector<Completion> completions_;
  // Buffers of acknowledged batches, reused so appends do not fault in fresh pages.
  std::vector<std::vector<uint8_t>> spare_buffers_;
  std::vector<uint8_t> index_buffer_;
};

}  // namespace trellara::log
