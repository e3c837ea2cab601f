// reader.h — reads acknowledged records of a log directory, in any process, while a writer
// appends: sequential scan, seek by offset through the index, and tail-follow by polling.
//
// A record is visible only once its index entry exists; the writer writes index entries only
// after the fdatasync covering the frame, so a reader never returns a frame that is not durable,
// nor bytes of a torn or unfinished write. Every frame read is checked (offset, CRC32C) and a bad
// one is reported as corruption with segment, position and offset — the reader never skips past
// it. A sealed segment (one with a successor) whose index is missing, stale or corrupt is read
// through an index rebuilt in memory from its frames (they were fdatasync'ed before the next
// segment was created). The reader never writes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trellara/log/device.h"
#include "trellara/log/format.h"
#include "trellara/log/scan.h"

namespace trellara::log {

struct LogRecord {
  uint64_t offset = 0;
  uint64_t commit_lsn = 0;
  uint8_t type = 0;
  std::vector<uint8_t> payload;
};

class LogReader {
 public:
  // Opens `dir` positioned at its first offset.
  static Result<std::unique_ptr<LogReader>> Open(LogDevice& device, const std::string& dir);
  ~LogReader();
  LogReader(const LogReader&) = delete;
  LogReader& operator=(const LogReader&) = delete;

  // The next Next() returns `offset` (once it is published). Fails for a reclaimed offset.
  Status Seek(uint64_t offset);
  // The next published record, or nullopt at the published end (call again to follow the tail).
  Result<std::optional<LogRecord>> Next();

  uint64_t next_offset() const { return next_offset_; }
  // ok, or the worst index state met and worked around in memory (missing|stale|corrupt).
  IndexStatus index_status() const { return index_status_; }

 private:
  LogReader(LogDevice& device, std::string dir) : device_(device), dir_(std::move(dir)) {}
  Status LoadSegment(uint64_t first_offset);
  Status RefreshIndex();
  // True when `first_offset` is the active segment, still empty, whose index the writer has not
  // finished creating (missing or shorter than its header): it holds no record yet.
  Result<bool> SegmentBeingCreated(uint64_t first_offset);
  void CloseSegment();
  Result<LogRecord> ReadFrame(size_t index);  // entries_[index]

  static constexpr uint64_t kReadAheadBytes = 256 * 1024;

  LogDevice& device_;
  std::string dir_;
  std::optional<uint64_t> segment_first_;
  std::optional<FileId> segment_file_;
  std::vector<IndexEntry> entries_;
  bool entries_complete_ = false;  // rebuilt from frames of a sealed segment
  uint64_t next_offset_ = 0;
  IndexStatus index_status_ = IndexStatus::kOk;
  // Read-ahead (ReadFrame): bytes of published frames of the open segment from buffer_position_.
  std::vector<uint8_t> buffer_;
  uint64_t buffer_position_ = 0;
};

}  // namespace trellara::log
