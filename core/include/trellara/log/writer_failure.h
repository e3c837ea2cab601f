// writer_failure.h — the durable "writer failed" state of a log directory (fsync failure recovery).
//
// After a failed fdatasync the kernel may mark the dirty pages clean and keep them readable in the
// page cache although they never reached the disk; a later fdatasync then reports success without
// writing them (the PostgreSQL "fsyncgate" lesson). A recovery that re-scans the segment would find
// those frames CRC-valid, "make them durable" with an fdatasync that does nothing, index them and
// let the relay acknowledge them — and the next power loss takes them away.
//
// So when an fdatasync of segment data fails, the writer records, durably and in a separate file
// (`WRITER_FAILED`: temp file, fdatasync, rename, directory fsync), the last point known durable:
// every offset below `durable_end` is acknowledged, and those frames end at byte `durable_position`
// of segment `segment_first_offset`. Recovery (recovery.h) honours it before it scans: it deletes
// segments created after that segment, truncates that segment to `durable_position`, fdatasyncs
// the truncation, and only then scans; the file is removed once the log is consistent again. It
// never trusts a byte past the recorded point, whatever the page cache shows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trellara/log/device.h"
#include "trellara/base/result.h"

namespace trellara::log {

inline constexpr const char* kWriterFailedFileName = "WRITER_FAILED";

struct WriterFailureState {
  uint64_t durable_end = 0;           // offsets below it were acknowledged
  uint64_t segment_first_offset = 0;  // the segment holding the acknowledged tail
  uint64_t durable_position = 0;      // byte after the last acknowledged frame in that segment
};

// Records `state` atomically and durably in <dir>/WRITER_FAILED.
Status RecordWriterFailure(LogDevice& device, const std::string& dir, const WriterFailureState& state);

// The recorded state, nullopt when the log has none. A damaged file is an error naming it.
Result<std::optional<WriterFailureState>> ReadWriterFailure(LogDevice& device, const std::string& dir);

// Removes the record (after recovery made the log consistent) and fsyncs the directory.
Status ClearWriterFailure(LogDevice& device, const std::string& dir);

}  // namespace trellara::log
