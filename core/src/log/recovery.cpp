// recovery.cpp — brings a log directory to a consistent, durable state before appending (see
// recovery.h). Never truncates anything except a torn tail and never publishes an index entry
// for a frame that is not fdatasync'ed.
#include "trellara/log/recovery.h"

#include <span>
#include <string>
#include <vector>

#include "trellara/base/fault.h"
#include "trellara/log/atomic_file.h"
#include "trellara/log/writer_failure.h"

namespace trellara::log {

namespace {

// An index file replaced whole (log/atomic_file.h); the index is derived data, so a failure only
// means the next open of the log rebuilds it again.
Status ReplaceIndexFile(LogDevice& device, const std::string& dir, const std::string& name,
                        std::span<const uint8_t> bytes, const std::string& what) {
  Status written = WriteFileAtomically(device, dir, name, name + ".tmp", bytes);
  if (written.ok()) return written;
  return MakeError(what + " " + JoinPath(dir, name) + " failed: " + written.error().message +
                   "; the index is derived data, opening the log again retries");
}

}  // namespace

Status RebuildIndexFile(LogDevice& device, const std::string& dir, const SegmentScan& segment) {
  {
    auto file = device.OpenFile(JoinPath(dir, segment.segment_name), false);
    if (!file.ok()) return file.error();
    Status synced = device.SyncData(*file);
    device.CloseFile(*file);
    if (!synced.ok()) {
      return MakeError("fdatasync of " + JoinPath(dir, segment.segment_name) +
                       " failed before rebuilding its index: " + synced.error().message +
                       "; check the disk, then open the log again");
    }
  }
  std::vector<uint8_t> bytes(kIndexHeaderBytes + segment.frames.size() * kIndexEntryBytes);
  EncodeIndexHeader(segment.first_offset, bytes.data());
  for (size_t i = 0; i < segment.frames.size(); ++i) {
    EncodeIndexEntry(segment.frames[i], bytes.data() + kIndexHeaderBytes + i * kIndexEntryBytes);
  }
  return ReplaceIndexFile(device, dir, segment.index_name, bytes, "rebuilding index");
}

namespace {

Status CreateEmptySegment(LogDevice& device, const std::string& dir, uint64_t first_offset) {
  // Index first, whole and under its final name, then the segment file (as LogWriter::StartSegment
  // does): a reader never lists a segment whose index is missing or shorter than its header.
  uint8_t header[kIndexHeaderBytes];
  EncodeIndexHeader(first_offset, header);
  TRELLARA_TRY(ReplaceIndexFile(device, dir, IndexFileName(first_offset), header, "creating index"));
  auto segment = device.OpenFile(JoinPath(dir, SegmentFileName(first_offset)), true);
  if (!segment.ok()) return segment.error();
  Status status = device.SyncData(*segment);
  device.CloseFile(*segment);
  TRELLARA_TRY(status);
  return device.SyncDirectory(dir);
}

// Brings the log back to the point recorded by the writer after an fdatasync failure: segments
// created after the recorded one are removed, the recorded one is truncated to the end of its last
// acknowledged frame and the truncation is fdatasync'ed. Returns the bytes dropped.
Result<uint64_t> DropUntrustedTail(LogDevice& device, const std::string& dir, const WriterFailureState& state) {
  auto segments = ListSegments(device, dir);
  if (!segments.ok()) return segments.error();
  uint64_t dropped = 0;
  bool found = false;
  bool removed = false;
  for (uint64_t first : *segments) {
    const std::string path = JoinPath(dir, SegmentFileName(first));
    if (first < state.segment_first_offset) continue;
    auto file = device.OpenFile(path, false);
    if (!file.ok()) return file.error();
    auto size = device.FileSize(*file);
    Status status = size.ok() ? Status::Ok() : Status(size.error());
    if (first > state.segment_first_offset) {
      device.CloseFile(*file);
      TRELLARA_TRY(status);
      dropped += *size;
      TRELLARA_TRY(device.Remove(path));
      TRELLARA_TRY(device.Remove(JoinPath(dir, IndexFileName(first))));
      removed = true;
      continue;
    }
    found = true;
    if (status.ok() && *size > state.durable_position) {
      dropped += *size - state.durable_position;
      status = device.Truncate(*file, state.durable_position);
      if (status.ok()) status = device.SyncData(*file);
    }
    device.CloseFile(*file);
    if (!status.ok()) {
      return MakeError("truncating " + path + " to its last acknowledged frame (position " +
                       std::to_string(state.durable_position) + ", after an earlier fdatasync failure) failed: " +
                       status.error().message + "; " + kWriterFailedFileName +
                       " stays, open the log again after fixing the disk");
    }
  }
  if (!found && state.durable_end > 0) {
    return MakeError(JoinPath(dir, SegmentFileName(state.segment_first_offset)) + ", which " +
                     kWriterFailedFileName + " names as holding acknowledged offsets below " +
                     std::to_string(state.durable_end) +
                     ", is missing; restore the log from a backup or re-seed the flow");
  }
  if (removed) TRELLARA_TRY(device.SyncDirectory(dir));
  return dropped;
}

}  // namespace

Result<RecoveryReport> RecoverLog(LogDevice& device, const std::string& dir, const RecoveryOptions& options) {
  // An earlier fdatasync failed: never trust bytes after the recorded durable point, even though
  // the page cache may still show them as valid frames (writer_failure.h).
  auto failure = ReadWriterFailure(device, dir);
  if (!failure.ok()) return failure.error();
  uint64_t untrusted_bytes = 0;
  if (failure->has_value()) {
    if (!options.truncate_torn_tail) {
      return MakeError("the writer of " + dir + " stopped after an fdatasync failure (" + kWriterFailedFileName +
                       "); only the writer's recovery may repair this log: start the relay (or open the log for "
                       "writing) once the disk is healthy");
    }
    // Negative control (tests only, defect.log_trust_rescan_after_fsync_failure): recover by
    // re-scanning whatever the page cache shows, which is the bug this record prevents.
    if (fault::Hit("defect.log_trust_rescan_after_fsync_failure") != fault::Action::Defect) {
      auto dropped = DropUntrustedTail(device, dir, **failure);
      if (!dropped.ok()) return dropped.error();
      untrusted_bytes = *dropped;
    }
  }

  ScanOptions scan_options;
  scan_options.trust_index = options.trust_index;
  auto scan = ScanLog(device, dir, scan_options);
  if (!scan.ok()) return scan.error();
  if (auto corruption = scan->corruption()) return MakeError(*corruption);

  RecoveryReport report;
  report.index_found = scan->index_status();
  report.torn_tail_bytes = scan->torn_tail_bytes();

  for (const auto& orphan : scan->orphan_index_files) {
    TRELLARA_TRY(device.Remove(JoinPath(dir, orphan)));
  }
  if (!scan->orphan_index_files.empty()) TRELLARA_TRY(device.SyncDirectory(dir));

  if (scan->segments.empty()) {
    if (options.truncate_torn_tail) {
      TRELLARA_TRY(CreateEmptySegment(device, dir, 0));
      report.segments = 1;
      if (failure->has_value()) {
        TRELLARA_TRY(ClearWriterFailure(device, dir));
        report.writer_failure_recovered = true;
        report.untrusted_bytes_dropped = untrusted_bytes;
      }
    }
    return report;
  }

  SegmentScan& last = scan->segments.back();
  if (options.truncate_torn_tail && last.invalid_bytes() > 0) {
    const std::string path = JoinPath(dir, last.segment_name);
    auto file = device.OpenFile(path, false);
    if (!file.ok()) return file.error();
    Status status = device.Truncate(*file, last.valid_end_position);
    if (status.ok()) status = device.SyncData(*file);
    device.CloseFile(*file);
    if (!status.ok()) {
      return MakeError("truncating the torn tail of " + path + " at position " +
                       std::to_string(last.valid_end_position) + " failed: " + status.error().message +
                       "; nothing was appended, open the log again after fixing the disk");
    }
    last.file_bytes = last.valid_end_position;
  }

  for (auto& segment : scan->segments) {
    if (segment.index_status != IndexStatus::kOk) {
      TRELLARA_TRY(RebuildIndexFile(device, dir, segment));
      report.indexes_rebuilt += 1;
    }
  }
  report.index_status = report.indexes_rebuilt > 0 ? IndexStatus::kRebuilt : IndexStatus::kOk;
  report.segments = scan->segments.size();
  report.records = scan->records();
  report.first_offset = scan->first_offset();
  report.last_valid_offset = scan->last_valid_offset();
  report.next_offset = last.end_offset();
  for (auto it = scan->segments.rbegin(); it != scan->segments.rend(); ++it) {
    if (!it->frames.empty()) {
      report.last_commit_lsn = it->frames.back().commit_lsn;
      break;
    }
  }
  if (failure->has_value()) {
    if (report.next_offset < (*failure)->durable_end) {
      return MakeError("after an fdatasync failure of " + dir + ", offsets below " +
                       std::to_string((*failure)->durable_end) + " were acknowledged but the log ends before offset " +
                       std::to_string(report.next_offset) + "; acknowledged records are missing: restore the log "
                       "from a backup or re-seed the flow");
    }
    TRELLARA_TRY(ClearWriterFailure(device, dir));
    report.writer_failure_recovered = true;
    report.untrusted_bytes_dropped = untrusted_bytes;
  }
  return report;
}

}  // namespace trellara::log
