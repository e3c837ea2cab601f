// recovery.h — making a log directory consistent before it is appended to: truncate the torn
// tail, make the valid frames durable, rebuild index files from frames, remove orphan indexes.
//
// Recovery runs only under the directory lock (one writer). It refuses — with the segment,
// position and offset — to open a log with corruption; it never skips past a bad frame and
// never truncates anything but a torn tail (scan.h defines the difference).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trellara/log/device.h"
#include "trellara/log/scan.h"

namespace trellara::log {

struct RecoveryReport {
  uint64_t segments = 0;
  uint64_t records = 0;
  std::optional<uint64_t> first_offset;
  std::optional<uint64_t> last_valid_offset;
  uint64_t last_commit_lsn = 0;      // commit LSN carried by the last valid frame (0 if none)
  uint64_t torn_tail_bytes = 0;      // truncated (or, without truncation, found) at the tail
  IndexStatus index_found = IndexStatus::kOk;   // before repair
  IndexStatus index_status = IndexStatus::kOk;  // after: ok or rebuilt
  uint64_t indexes_rebuilt = 0;
  uint64_t next_offset = 0;          // where appending resumes
  // The log had a WRITER_FAILED record (writer_failure.h): recovery truncated to the recorded
  // durable point, dropping this many bytes the page cache may have shown as valid frames.
  bool writer_failure_recovered = false;
  uint64_t untrusted_bytes_dropped = 0;
};

struct RecoveryOptions {
  // Truncate the torn tail (the writer does). Without it, recovery only repairs indexes (inspect
  // --repair-index), which is safe while the torn bytes stay: they are after the last index entry.
  bool truncate_torn_tail = true;
  // Use the index fast path (scan.h trust_index).
  bool trust_index = true;
};

// Recovers `dir`. The caller must hold the directory lock (kLockFileName).
Result<RecoveryReport> RecoverLog(LogDevice& device, const std::string& dir, const RecoveryOptions& options);

// Writes a fresh index file for `segment` from its valid frames: tmp file, fdatasync, rename,
// directory fsync. The frames themselves are fdatasync'ed first, so every entry names a durable
// frame (index entries are the publication of durability to readers).
Status RebuildIndexFile(LogDevice& device, const std::string& dir, const SegmentScan& segment);

}  // namespace trellara::log
