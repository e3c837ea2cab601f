// recovery.cpp — brings a log directory to a consistent, durable state before appending (see
// recovery.h). Never truncates anything except a torn tail and never publishes an index entry
// for a frame that is not fdatasync'ed.
#include "trellara/log/recovery.h"

#include <vector>

namespace trellara::log {

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
  const std::string final_path = JoinPath(dir, segment.index_name);
  const std::string tmp_path = final_path + ".tmp";
  auto tmp = device.OpenFile(tmp_path, true);
  if (!tmp.ok()) return tmp.error();
  Status status = device.Truncate(*tmp, 0);
  if (status.ok()) status = device.WriteAt(*tmp, 0, bytes.data(), bytes.size());
  if (status.ok()) status = device.SyncData(*tmp);
  device.CloseFile(*tmp);
  if (!status.ok()) {
    return MakeError("rebuilding index " + final_path + " failed: " + status.error().message +
                     "; the index is derived data, opening the log again retries");
  }
  TRELLARA_TRY(device.Rename(tmp_path, final_path));
  return device.SyncDirectory(dir);
}

namespace {

Status CreateEmptySegment(LogDevice& device, const std::string& dir, uint64_t first_offset) {
  auto segment = device.OpenFile(JoinPath(dir, SegmentFileName(first_offset)), true);
  if (!segment.ok()) return segment.error();
  Status status = device.SyncData(*segment);
  device.CloseFile(*segment);
  TRELLARA_TRY(status);
  SegmentScan empty;
  empty.first_offset = first_offset;
  empty.segment_name = SegmentFileName(first_offset);
  empty.index_name = IndexFileName(first_offset);
  return RebuildIndexFile(device, dir, empty);  // also fsyncs the directory
}

}  // namespace

Result<RecoveryReport> RecoverLog(LogDevice& device, const std::string& dir, const RecoveryOptions& options) {
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
  return report;
}

}  // namespace trellara::log
