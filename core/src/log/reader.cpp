// reader.cpp — reading published records (reader.h). Never returns a frame without an index
// entry in the last segment, never skips a bad frame, never writes.
#include "trellara/log/reader.h"

#include <algorithm>
#include <cstring>

namespace trellara::log {

LogReader::~LogReader() { CloseSegment(); }

Result<std::unique_ptr<LogReader>> LogReader::Open(LogDevice& device, const std::string& dir) {
  std::unique_ptr<LogReader> reader(new LogReader(device, dir));
  auto segments = ListSegments(device, dir);
  if (!segments.ok()) return segments.error();
  if (!segments->empty()) {
    TRELLARA_TRY(reader->LoadSegment(segments->front()));
    reader->next_offset_ = segments->front();
  }
  return reader;
}

void LogReader::CloseSegment() {
  if (segment_file_) device_.CloseFile(*segment_file_);
  segment_file_.reset();
  segment_first_.reset();
  entries_.clear();
  entries_complete_ = false;
  buffer_.clear();
  buffer_position_ = 0;
}

Status LogReader::LoadSegment(uint64_t first_offset) {
  CloseSegment();
  auto segments = ListSegments(device_, dir_);
  if (!segments.ok()) return segments.error();
  const bool sealed = !segments->empty() && segments->back() > first_offset;
  auto index = ReadIndexFile(device_, dir_, first_offset);
  if (!index.ok()) return index.error();
  if (index->found == IndexStatus::kMissing || index->found == IndexStatus::kCorrupt) {
    if (!sealed) {
      return MakeError("index " + JoinPath(dir_, IndexFileName(first_offset)) + " of the active segment is " +
                       IndexStatusName(index->found) + " (" + index->detail +
                       "); readers see only indexed records there. Open the log for writing (recovery rebuilds "
                       "it) or run 'trellara log inspect --dir " + dir_ + " --repair-index'");
    }
    auto scan = ScanOneSegment(device_, dir_, first_offset, false, ScanOptions{});
    if (!scan.ok()) return scan.error();
    index_status_ = WorseIndexStatus(index_status_, index->found);
    entries_ = scan->frames;  // a corrupt frame, if any, is hit (and reported) when read
    entries_complete_ = true;
  } else {
    entries_ = std::move(index->entries);
  }
  auto file = device_.OpenFileReadOnly(JoinPath(dir_, SegmentFileName(first_offset)));
  if (!file.ok()) return file.error();
  segment_file_ = *file;
  segment_first_ = first_offset;
  return Status::Ok();
}

// Reads only what was appended to the index since the last refresh (ReadIndexTail), so a reader
// following the tail pays for the new entries, not for the whole index at every look.
Status LogReader::RefreshIndex() {
  if (!segment_first_ || entries_complete_) return Status::Ok();
  const std::optional<IndexEntry> last = entries_.empty() ? std::nullopt : std::optional<IndexEntry>(entries_.back());
  auto index = ReadIndexTail(device_, dir_, *segment_first_, entries_.size(), last);
  if (!index.ok()) return index.error();
  if (entries_.empty()) {
    if (!index->entries.empty()) entries_ = std::move(index->entries);
  } else {
    entries_.insert(entries_.end(), index->entries.begin(), index->entries.end());
  }
  return Status::Ok();
}

Status LogReader::Seek(uint64_t offset) {
  auto segments = ListSegments(device_, dir_);
  if (!segments.ok()) return segments.error();
  if (segments->empty()) return MakeError("log " + dir_ + " has no segments; nothing to seek to");
  if (offset < segments->front()) {
    return MakeError("offset " + std::to_string(offset) + " is no longer in " + dir_ + " (reclaimed); the log starts at " +
                     std::to_string(segments->front()));
  }
  auto it = std::upper_bound(segments->begin(), segments->end(), offset);
  const uint64_t first = *(it - 1);
  if (!segment_first_ || *segment_first_ != first) TRELLARA_TRY(LoadSegment(first));
  next_offset_ = offset;
  return Status::Ok();
}

// Frames are read through a buffer of up to kReadAheadBytes that ends where a later indexed frame
// starts (one syscall for many small frames instead of two per frame): every byte in it belongs to a frame that was published (durable, never rewritten) when it
// was read, so a frame found whole in the buffer is the frame on disk. The last indexed frame (its
// end is not known from the index) is read directly.
Result<LogRecord> LogReader::ReadFrame(size_t index) {
  const IndexEntry& entry = entries_[index];
  const std::string where = JoinPath(dir_, SegmentFileName(*segment_first_)) + " at position " +
                            std::to_string(entry.position) + " (offset " + std::to_string(entry.offset) + ")";
  const auto corrupt = [&](const std::string& what) {
    return MakeError("corruption in " + where + ": " + what + "; reading stops here, nothing after it is read. "
                     "Run 'trellara log inspect --dir " + dir_ + "' for details");
  };
  const auto buffered = [&](uint64_t position, uint64_t bytes) {
    return position >= buffer_position_ && position + bytes <= buffer_position_ + buffer_.size();
  };
  if (!buffered(entry.position, kFrameHeaderBytes) && index + 1 < entries_.size() &&
      entries_[index + 1].position - entry.position <= kReadAheadBytes) {
    // Up to the start of the furthest later frame within kReadAheadBytes. A larger frame is read
    // directly (no second copy of it in the buffer).
    size_t last = index + 1;
    while (last + 1 < entries_.size() && entries_[last + 1].position - entry.position <= kReadAheadBytes) ++last;
    buffer_.resize(entries_[last].position - entry.position);
    buffer_position_ = entry.position;
    auto n = device_.ReadAt(*segment_file_, entry.position, buffer_.data(), buffer_.size());
    if (!n.ok()) {
      buffer_.clear();
      return n.error();
    }
    buffer_.resize(*n);
  }
  uint8_t header_bytes[kFrameHeaderBytes];
  if (buffered(entry.position, kFrameHeaderBytes)) {
    std::memcpy(header_bytes, buffer_.data() + (entry.position - buffer_position_), kFrameHeaderBytes);
  } else {
    auto n = device_.ReadAt(*segment_file_, entry.position, header_bytes, sizeof header_bytes);
    if (!n.ok()) return n.error();
    if (*n != sizeof header_bytes) return corrupt("the indexed frame header is invalid");
  }
  auto header = DecodeFrameHeader(header_bytes);
  if (!header || header->offset != entry.offset) return corrupt("the indexed frame header is invalid");
  LogRecord record;
  record.offset = header->offset;
  record.commit_lsn = header->commit_lsn;
  record.type = header->type;
  const uint64_t payload_position = entry.position + kFrameHeaderBytes;
  if (buffered(payload_position, header->payload_bytes)) {
    const uint8_t* p = buffer_.data() + (payload_position - buffer_position_);
    record.payload.assign(p, p + header->payload_bytes);
  } else {
    record.payload.resize(header->payload_bytes);
    auto m = device_.ReadAt(*segment_file_, payload_position, record.payload.data(), record.payload.size());
    if (!m.ok()) return m.error();
    if (*m != record.payload.size()) return corrupt("CRC32C mismatch");
  }
  if (!FrameCrcMatches(header_bytes, *header, record.payload)) return corrupt("CRC32C mismatch");
  return record;
}

Result<std::optional<LogRecord>> LogReader::Next() {
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (!segment_first_) {
      auto segments = ListSegments(device_, dir_);
      if (!segments.ok()) return segments.error();
      if (segments->empty()) return std::optional<LogRecord>();
      TRELLARA_TRY(Seek(std::max(next_offset_, segments->front())));
    }
    uint64_t index = next_offset_ - *segment_first_;
    if (index < entries_.size()) {
      auto record = ReadFrame(index);
      if (!record.ok()) return record.error();
      next_offset_ += 1;
      return std::optional<LogRecord>(std::move(record).value());
    }
    TRELLARA_TRY(RefreshIndex());
    if (index < entries_.size()) continue;
    // At the end of this segment: move on only once its successor exists (the writer creates it
    // after every record of this one is durable and indexed); re-read the index first.
    const uint64_t successor = *segment_first_ + entries_.size();
    auto exists = device_.Exists(JoinPath(dir_, SegmentFileName(successor)));
    if (!exists.ok()) return exists.error();
    if (!*exists) return std::optional<LogRecord>();
    TRELLARA_TRY(RefreshIndex());
    if (index < entries_.size()) continue;
    // A relay built before 2026-12-02 created the successor's segment file before its index and
    // header (the writer now creates the index whole first, LogWriter::StartSegment): an active
    // successor that is still empty, with its index missing or shorter than its header, holds no
    // record yet: nothing new for now (the next call looks again), not a damaged index.
    auto creating = SegmentBeingCreated(successor);
    if (!creating.ok()) return creating.error();
    if (*creating) return std::optional<LogRecord>();
    TRELLARA_TRY(LoadSegment(successor));
  }
  return std::optional<LogRecord>();
}

Result<bool> LogReader::SegmentBeingCreated(uint64_t first_offset) {
  auto segments = ListSegments(device_, dir_);
  if (!segments.ok()) return segments.error();
  if (segments->empty() || segments->back() != first_offset) return false;  // sealed: its index is whole
  auto index = ReadIndexFile(device_, dir_, first_offset);
  if (!index.ok()) return index.error();
  const bool header_missing = index->found == IndexStatus::kMissing ||
                              (index->found == IndexStatus::kCorrupt && index->short_header);
  if (!header_missing) return false;
  auto file = device_.OpenFileReadOnly(JoinPath(dir_, SegmentFileName(first_offset)));
  if (!file.ok()) return file.error();
  auto size = device_.FileSize(*file);
  device_.CloseFile(*file);
  if (!size.ok()) return size.error();
  return *size == 0;  // a record already written there with no index header is damage: LoadSegment says so
}

}  // namespace trellara::log
