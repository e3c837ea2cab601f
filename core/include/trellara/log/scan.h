// scan.h — reading a log directory back: which frames are valid, where the valid chain ends,
// whether the bytes after it are a torn tail or corruption, and how healthy each sidecar index is.
//
// The rule that separates a torn tail from corruption (docs/log.md, "Recovery"): a frame that
// fails its checks is corruption — never skipped, always reported with segment, position and
// offset — when any of these holds:
//   1. it is in a segment that is not the last one (sealed segments were fdatasync'ed before the
//      next segment was created);
//   2. the segment's index holds a CRC-valid entry for its offset or a later one (index entries
//      are written only after the fdatasync covering the frame, so the frame was durable);
//   3. a later CRC-valid frame says (durable_end_at_write) that this offset was already durable
//      when it was written.
// Otherwise the bytes from the bad frame to the end of the file are a torn tail: writes that no
// fdatasync covered, which were never acknowledged and never visible to readers.
// Scanning never writes; repair lives in recovery.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/log/device.h"
#include "trellara/log/format.h"
#include "trellara/base/result.h"

namespace trellara::log {

enum class IndexStatus { kOk, kRebuilt, kMissing, kStale, kCorrupt };
const char* IndexStatusName(IndexStatus status);
// Worse of two states (corrupt > missing > stale > rebuilt > ok), for a whole-log summary.
IndexStatus WorseIndexStatus(IndexStatus a, IndexStatus b);

struct SegmentScan {
  std::string segment_name;
  std::string index_name;
  uint64_t first_offset = 0;
  uint64_t file_bytes = 0;
  std::vector<IndexEntry> frames;  // the valid chain, from position 0 (offsets first_offset...)
  uint64_t valid_end_position = 0;  // byte after the last valid frame
  // Set when bytes follow the valid chain: why the frame at valid_end_position is invalid.
  std::string invalid_reason;
  bool corrupt = false;  // the invalid frame is corruption, not a torn tail
  std::string corruption_detail;
  IndexStatus index_status = IndexStatus::kOk;
  std::string index_detail;
  uint64_t index_entries_valid = 0;  // leading index entries that match frames
  uint64_t pending_frames = 0;       // valid frames a live writer has not published yet

  uint64_t invalid_bytes() const { return file_bytes - valid_end_position; }
  uint64_t end_offset() const { return first_offset + frames.size(); }
};

struct LogScan {
  std::string dir;
  bool writer_active = false;
  std::vector<SegmentScan> segments;
  std::vector<std::string> orphan_index_files;  // index files without a segment
  // Offsets follow on from one segment to the next; a gap is corruption.
  std::string continuity_error;

  uint64_t records() const;
  std::optional<uint64_t> first_offset() const;
  std::optional<uint64_t> last_valid_offset() const;
  uint64_t torn_tail_bytes() const;  // invalid bytes at the end of the last segment, not corruption
  IndexStatus index_status() const;
  // The first corruption (segment, position, offset and what to do), if any.
  std::optional<std::string> corruption() const;
};

struct ScanOptions {
  // True when the caller knows a writer holds the log (inspect while the relay runs): frames after
  // the last index entry of the last segment are then "pending", not a stale index.
  bool writer_active = false;
  // Recovery's fast path: when a segment's index is sound and its last entry points at a valid
  // frame, trust the entries and read frames only after it. Inspect leaves this off and reads
  // every frame.
  bool trust_index = false;
};

// Reads and CRC-verifies every frame of every segment in `dir`.
Result<LogScan> ScanLog(LogDevice& device, const std::string& dir, const ScanOptions& options);

// Reads and classifies one segment (as ScanLog does for each).
Result<SegmentScan> ScanOneSegment(LogDevice& device, const std::string& dir, uint64_t first_offset, bool is_last,
                                   const ScanOptions& options);

// Reads the segments of `dir`, sorted by first offset.
Result<std::vector<uint64_t>> ListSegments(LogDevice& device, const std::string& dir);

// Reads the index file of a segment: the leading run of valid, dense entries. `found` reports
// missing (no file), corrupt (bad header / bad entry followed by more bytes), stale (entries end
// in a partial or torn entry) or ok.
struct IndexRead {
  IndexStatus found = IndexStatus::kOk;
  std::string detail;
  std::vector<IndexEntry> entries;
  bool short_header = false;  // kCorrupt because the file is shorter than its header (being created?)
};
Result<IndexRead> ReadIndexFile(LogDevice& device, const std::string& dir, uint64_t first_offset);

// The entries appended to the index of segment `first_offset` after the `known` ones a reader
// already holds (`known` > 0: the last of them, `last_known`, is read again and must be byte for byte
// what it was — an index rewritten under the reader is an error, not a new view). Reads only the
// file's tail, so following an active segment costs what was appended, not the whole index each
// time. `found`/`detail` as ReadIndexFile for the part read: the dense valid entries up to a
// partial or invalid one are returned.
Result<IndexRead> ReadIndexTail(LogDevice& device, const std::string& dir, uint64_t first_offset, uint64_t known,
                                const std::optional<IndexEntry>& last_known);

// The offset the next published record will get: the last segment's first offset plus its valid
// index entries (0 for an empty log). Reads one index file, so it is cheap enough for a progress
// display; a reader may briefly see more (a record published after this call).
Result<uint64_t> PublishedEndOffset(LogDevice& device, const std::string& dir);

// The name used in every message about the lock file a writer holds on a log directory.
inline constexpr const char* kLockFileName = "LOCK";
inline constexpr const char* kConsumersDirName = "consumers";

}  // namespace trellara::log
