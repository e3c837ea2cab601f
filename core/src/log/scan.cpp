// scan.cpp — reads a log directory back and classifies what it finds (see scan.h for the torn
// tail vs corruption rule). Never writes, never skips past an invalid frame.
#include "trellara/log/scan.h"

#include <algorithm>
#include <cstring>

#include "trellara/base/fault.h"

namespace trellara::log {

const char* IndexStatusName(IndexStatus status) {
  switch (status) {
    case IndexStatus::kOk: return "ok";
    case IndexStatus::kRebuilt: return "rebuilt";
    case IndexStatus::kMissing: return "missing";
    case IndexStatus::kStale: return "stale";
    case IndexStatus::kCorrupt: return "corrupt";
  }
  return "corrupt";
}

namespace {

int Severity(IndexStatus status) {
  switch (status) {
    case IndexStatus::kOk: return 0;
    case IndexStatus::kRebuilt: return 1;
    case IndexStatus::kStale: return 2;
    case IndexStatus::kMissing: return 3;
    case IndexStatus::kCorrupt: return 4;
  }
  return 4;
}

Result<std::vector<uint8_t>> ReadWholeFile(LogDevice& device, const std::string& path) {
  auto file = device.OpenFileReadOnly(path);
  if (!file.ok()) return file.error();
  auto size = device.FileSize(*file);
  if (!size.ok()) {
    device.CloseFile(*file);
    return size.error();
  }
  std::vector<uint8_t> bytes(*size);
  auto n = device.ReadAt(*file, 0, bytes.data(), bytes.size());
  device.CloseFile(*file);
  if (!n.ok()) return n.error();
  bytes.resize(*n);  // a concurrent truncate can only shorten it
  return bytes;
}

// Validates the frame at `pos` of `bytes`, expecting `offset`. Returns nullopt and a reason
// when it is not a complete valid frame.
std::optional<FrameHeader> CheckFrameAt(const std::vector<uint8_t>& bytes, uint64_t pos, uint64_t offset,
                                        std::string& reason) {
  if (bytes.size() - pos < kFrameHeaderBytes) {
    reason = "incomplete frame header (" + std::to_string(bytes.size() - pos) + " bytes)";
    return std::nullopt;
  }
  auto header = DecodeFrameHeader(bytes.data() + pos);
  if (!header) {
    reason = "bad frame header (magic, version or length)";
    return std::nullopt;
  }
  if (bytes.size() - pos - kFrameHeaderBytes < header->payload_bytes) {
    reason = "incomplete payload (" + std::to_string(bytes.size() - pos - kFrameHeaderBytes) + " of " +
             std::to_string(header->payload_bytes) + " bytes)";
    return std::nullopt;
  }
  if (!FrameCrcMatches(bytes.data() + pos, *header,
                       std::span<const uint8_t>(bytes.data() + pos + kFrameHeaderBytes, header->payload_bytes))) {
    reason = "CRC32C mismatch";
    return std::nullopt;
  }
  if (header->offset != offset) {
    reason = "frame carries offset " + std::to_string(header->offset) + ", expected " + std::to_string(offset);
    return std::nullopt;
  }
  return header;
}

// Rule 3 of scan.h: is there a later valid frame written after `offset` was durable?
std::optional<uint64_t> LaterFrameSayingDurable(const std::vector<uint8_t>& bytes, uint64_t from, uint64_t offset) {
  for (uint64_t pos = from + 1; pos + kFrameHeaderBytes <= bytes.size(); ++pos) {
    if (GetU32(bytes.data() + pos) != kFrameMagic) continue;
    auto header = DecodeFrameHeader(bytes.data() + pos);
    if (!header || header->offset <= offset) continue;
    if (bytes.size() - pos - kFrameHeaderBytes < header->payload_bytes) continue;
    if (!FrameCrcMatches(bytes.data() + pos, *header,
                         std::span<const uint8_t>(bytes.data() + pos + kFrameHeaderBytes, header->payload_bytes))) {
      continue;
    }
    if (header->durable_end_at_write > offset) return pos;
  }
  return std::nullopt;
}

// Negative control (tests only, TRELLARA_FAULTS=defect.log_read_past_invalid_frame:1:defect;
// seed row local_stream_index_rebuild, caught by
// torn_tail_indexed_as_durable_by_a_scan_reading_past_an_invalid_frame_negative_control in
// tests/unit/log_index_test.cpp): the scan takes an invalid frame whose header still decodes (a
// torn write, a CRC mismatch) at its header's word and resynchronises on the next frame magic
// after it, or the end of the bytes — so a torn tail is indexed as a durable record, and records
// after a damaged frame are indexed as if nothing were missing. Returns where the defective scan
// goes on, or nullopt (the correct path: stop at the invalid frame).
std::optional<uint64_t> ReadPastInvalidFrameDefect(const std::vector<uint8_t>& bytes, uint64_t pos) {
  if (bytes.size() - pos < kFrameHeaderBytes || !DecodeFrameHeader(bytes.data() + pos)) return std::nullopt;
  if (fault::Hit("defect.log_read_past_invalid_frame") != fault::Action::Defect) return std::nullopt;
  for (uint64_t next = pos + 1; next + kFrameHeaderBytes <= bytes.size(); ++next) {
    if (GetU32(bytes.data() + next) == kFrameMagic && DecodeFrameHeader(bytes.data() + next)) return next;
  }
  return bytes.size();
}

}  // namespace

IndexStatus WorseIndexStatus(IndexStatus a, IndexStatus b) { return Severity(a) >= Severity(b) ? a : b; }

Result<std::vector<uint64_t>> ListSegments(LogDevice& device, const std::string& dir) {
  auto names = device.ListDirectory(dir);
  if (!names.ok()) return names.error();
  std::vector<uint64_t> firsts;
  for (const auto& name : *names) {
    if (auto first = ParseSegmentFileName(name)) firsts.push_back(*first);
  }
  std::sort(firsts.begin(), firsts.end());
  return firsts;
}

namespace {

// Whether the index at `path` exists; when not, `read` says it is missing.
Result<bool> IndexFileExists(LogDevice& device, const std::string& path, uint64_t first_offset, IndexRead& read) {
  auto exists = device.Exists(path);
  if (!exists.ok()) return exists.error();
  if (!*exists) {
    read.found = IndexStatus::kMissing;
    read.detail = IndexFileName(first_offset) + " does not exist";
  }
  return *exists;
}

// Appends to read.entries the whole entries in `bytes` (the first is entry `index` of the index),
// each dense after the one before it (`previous` before the first; none before entry 0). A bad last
// entry is an append that did not finish (stale); a bad entry with more after it is damage
// (corrupt); a partial entry at the end is stale.
void DecodeIndexEntries(const uint8_t* bytes, uint64_t size, uint64_t first_offset, uint64_t index,
                        std::optional<IndexEntry> previous, IndexRead& read) {
  const uint64_t whole = size / kIndexEntryBytes;
  for (uint64_t i = 0; i < whole; ++i) {
    auto entry = DecodeIndexEntry(bytes + i * kIndexEntryBytes);
    const bool dense = entry && entry->offset == first_offset + index + i &&
                       (!previous || entry->position > previous->position);
    if (!dense) {
      read.found = (i + 1 == whole && size % kIndexEntryBytes == 0) ? IndexStatus::kStale : IndexStatus::kCorrupt;
      read.detail = IndexFileName(first_offset) + ": entry " + std::to_string(index + i) + " (offset " +
                    std::to_string(first_offset + index + i) + ") is invalid";
      return;
    }
    read.entries.push_back(*entry);
    previous = *entry;
  }
  if (size % kIndexEntryBytes != 0) {
    read.found = IndexStatus::kStale;
    read.detail = IndexFileName(first_offset) + " ends in a partial entry";
  }
}

}  // namespace

Result<IndexRead> ReadIndexFile(LogDevice& device, const std::string& dir, uint64_t first_offset) {
  IndexRead read;
  const std::string path = JoinPath(dir, IndexFileName(first_offset));
  auto exists = IndexFileExists(device, path, first_offset, read);
  if (!exists.ok()) return exists.error();
  if (!*exists) return read;
  auto bytes = ReadWholeFile(device, path);
  if (!bytes.ok()) return bytes.error();
  if (bytes->size() < kIndexHeaderBytes) {
    read.found = IndexStatus::kCorrupt;
    read.detail = IndexFileName(first_offset) + " is shorter than its header";
    read.short_header = true;
    return read;
  }
  auto header_first = DecodeIndexHeader(bytes->data());
  if (!header_first || *header_first != first_offset) {
    read.found = IndexStatus::kCorrupt;
    read.detail = IndexFileName(first_offset) + " has an invalid header";
    return read;
  }
  DecodeIndexEntries(bytes->data() + kIndexHeaderBytes, bytes->size() - kIndexHeaderBytes, first_offset, 0,
                     std::nullopt, read);
  return read;
}

namespace {

Result<std::vector<uint8_t>> ReadFileFrom(LogDevice& device, const std::string& path, uint64_t from,
                                          uint64_t& file_bytes) {
  auto file = device.OpenFileReadOnly(path);
  if (!file.ok()) return file.error();
  auto size = device.FileSize(*file);
  if (!size.ok()) {
    device.CloseFile(*file);
    return size.error();
  }
  file_bytes = *size;
  std::vector<uint8_t> bytes(*size > from ? *size - from : 0);
  auto n = device.ReadAt(*file, from, bytes.data(), bytes.size());
  device.CloseFile(*file);
  if (!n.ok()) return n.error();
  bytes.resize(*n);
  file_bytes = from + *n;
  return bytes;
}

// Fast path of recovery: the index's last entry points at a valid frame, so every earlier entry
// is trusted (each was written only after its frame was durable) and frames are read only after
// it. Returns the position after that frame, or nullopt when the entry does not check out.
std::optional<uint64_t> VerifyLastIndexedFrame(LogDevice& device, const std::string& path, const IndexEntry& last) {
  auto file = device.OpenFileReadOnly(path);
  if (!file.ok()) return std::nullopt;
  std::vector<uint8_t> header(kFrameHeaderBytes);
  auto n = device.ReadAt(*file, last.position, header.data(), header.size());
  std::optional<uint64_t> end;
  if (n.ok() && *n == header.size()) {
    auto decoded = DecodeFrameHeader(header.data());
    if (decoded && decoded->offset == last.offset) {
      header.resize(kFrameHeaderBytes + decoded->payload_bytes);
      auto m = device.ReadAt(*file, last.position + kFrameHeaderBytes, header.data() + kFrameHeaderBytes,
                             decoded->payload_bytes);
      if (m.ok() && *m == decoded->payload_bytes &&
          FrameCrcMatches(header.data(), *decoded,
                          std::span<const uint8_t>(header.data() + kFrameHeaderBytes, decoded->payload_bytes))) {
        end = last.position + kFrameHeaderBytes + decoded->payload_bytes;
      }
    }
  }
  device.CloseFile(*file);
  return end;
}

Result<SegmentScan> ScanSegment(LogDevice& device, const std::string& dir, uint64_t first_offset, bool is_last,
                                const ScanOptions& options) {
  SegmentScan scan;
  scan.first_offset = first_offset;
  scan.segment_name = SegmentFileName(first_offset);
  scan.index_name = IndexFileName(first_offset);
  const std::string segment_path = JoinPath(dir, scan.segment_name);
  // The index is read before the frames: a live writer publishes an entry only after the frame is
  // written and fdatasync'ed, so every entry read here points at bytes the frame read will see.
  auto index = ReadIndexFile(device, dir, first_offset);
  if (!index.ok()) return index.error();

  uint64_t base = 0;  // file position of bytes[0]
  if (options.trust_index && index->found == IndexStatus::kOk && !index->entries.empty()) {
    if (auto end = VerifyLastIndexedFrame(device, segment_path, index->entries.back())) {
      scan.frames = index->entries;
      base = *end;
    }
  }
  auto bytes = ReadFileFrom(device, segment_path, base, scan.file_bytes);
  if (!bytes.ok()) return bytes.error();
  if (scan.file_bytes < base) {  // shrank under us: fall back to a full scan
    scan.frames.clear();
    base = 0;
    bytes = ReadFileFrom(device, segment_path, 0, scan.file_bytes);
    if (!bytes.ok()) return bytes.error();
  }

  uint64_t pos = 0;  // relative to base
  std::string reason;
  while (pos < bytes->size()) {
    const uint64_t offset = first_offset + scan.frames.size();
    auto header = CheckFrameAt(*bytes, pos, offset, reason);
    if (!header) {
      auto past = ReadPastInvalidFrameDefect(*bytes, pos);
      if (!past) break;
      const auto torn = DecodeFrameHeader(bytes->data() + pos);
      scan.frames.push_back(IndexEntry{offset, base + pos, torn->commit_lsn, torn->type});
      pos = *past;
      continue;
    }
    scan.frames.push_back(IndexEntry{offset, base + pos, header->commit_lsn, header->type});
    pos += kFrameHeaderBytes + header->payload_bytes;
  }
  scan.valid_end_position = base + pos;

  if (pos < bytes->size()) {
    const uint64_t bad_offset = first_offset + scan.frames.size();
    scan.invalid_reason = reason;
    std::string why;
    if (!is_last) {
      why = "it is not in the last segment, and sealed segments were fdatasync'ed before the next one was created";
    } else if (index->entries.size() > scan.frames.size()) {
      why = "the index publishes offset " + std::to_string(index->entries.back().offset) +
            ", so the frame was durable and acknowledged";
    } else if (auto later = LaterFrameSayingDurable(*bytes, pos, bad_offset)) {
      why = "a later valid frame at position " + std::to_string(base + *later) +
            " was written after this offset was durable";
    }
    if (!why.empty()) {
      scan.corrupt = true;
      scan.corruption_detail = "corruption in " + segment_path + " at position " +
                               std::to_string(base + pos) + " (offset " + std::to_string(bad_offset) + "): " + reason +
                               "; this is not a torn tail because " + why +
                               ". Reading stops before this offset; restore the log from a replica or "
                               "backup, or re-seed the flow (the log cannot skip past it)";
    }
  }

  // Index health against the valid chain.
  scan.index_status = index->found;
  scan.index_detail = index->detail;
  uint64_t matching = 0;
  bool mismatch = false;
  for (const auto& entry : index->entries) {
    if (matching >= scan.frames.size()) break;
    const auto& frame = scan.frames[matching];
    if (entry.position != frame.position || entry.commit_lsn != frame.commit_lsn || entry.type != frame.type) {
      mismatch = true;
      break;
    }
    matching += 1;
  }
  scan.index_entries_valid = matching;
  if (index->found == IndexStatus::kMissing || index->found == IndexStatus::kCorrupt) {
    // keep the finding
  } else if (mismatch || index->entries.size() > scan.frames.size()) {
    scan.index_status = IndexStatus::kCorrupt;
    scan.index_detail = scan.index_name + ": entry for offset " + std::to_string(first_offset + matching) +
                        " does not match the frame in " + scan.segment_name;
  } else if (matching < scan.frames.size()) {
    if (is_last && options.writer_active && index->found == IndexStatus::kOk) {
      scan.pending_frames = scan.frames.size() - matching;  // a live writer publishes them after fdatasync
    } else {
      scan.index_status = IndexStatus::kStale;
      scan.index_detail = scan.index_name + " ends at offset " +
                          (matching == 0 ? std::string("(none)") : std::to_string(first_offset + matching - 1)) +
                          " but frames continue to offset " + std::to_string(scan.end_offset() - 1);
    }
  }
  return scan;
}

}  // namespace

Result<SegmentScan> ScanOneSegment(LogDevice& device, const std::string& dir, uint64_t first_offset, bool is_last,
                                   const ScanOptions& options) {
  return ScanSegment(device, dir, first_offset, is_last, options);
}

Result<LogScan> ScanLog(LogDevice& device, const std::string& dir, const ScanOptions& options) {
  LogScan log;
  log.dir = dir;
  log.writer_active = options.writer_active;
  auto names = device.ListDirectory(dir);
  if (!names.ok()) return names.error();
  auto firsts = ListSegments(device, dir);
  if (!firsts.ok()) return firsts.error();
  for (const auto& name : *names) {
    auto index_first = ParseIndexFileName(name);
    if (index_first && !std::binary_search(firsts->begin(), firsts->end(), *index_first)) {
      log.orphan_index_files.push_back(name);
    }
  }
  for (size_t i = 0; i < firsts->size(); ++i) {
    bool is_last = i + 1 == firsts->size();
    auto segment = ScanSegment(device, dir, (*firsts)[i], is_last, options);
    if (!segment.ok()) return segment.error();
    log.segments.push_back(std::move(segment).value());
    if (i > 0 && log.continuity_error.empty()) {
      const auto& prev = log.segments[i - 1];
      if (!prev.corrupt && prev.end_offset() != (*firsts)[i]) {
        log.continuity_error = "offsets do not continue between " + JoinPath(dir, prev.segment_name) +
                               " (ends before offset " + std::to_string(prev.end_offset()) + ") and " +
                               JoinPath(dir, SegmentFileName((*firsts)[i])) +
                               "; a segment is missing or damaged. Restore it from a backup or re-seed the flow";
      }
    }
    if (log.segments.back().corrupt) break;  // never look past corruption
  }
  return log;
}

uint64_t LogScan::records() const {
  uint64_t n = 0;
  for (const auto& s : segments) n += s.frames.size() - (writer_active ? s.pending_frames : 0);
  return n;
}

std::optional<uint64_t> LogScan::first_offset() const {
  for (const auto& s : segments) {
    if (!s.frames.empty()) return s.first_offset;
  }
  return std::nullopt;
}

std::optional<uint64_t> LogScan::last_valid_offset() const {
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
    uint64_t visible = it->frames.size() - (writer_active ? it->pending_frames : 0);
    if (visible > 0) return it->first_offset + visible - 1;
  }
  return std::nullopt;
}

uint64_t LogScan::torn_tail_bytes() const {
  if (segments.empty() || segments.back().corrupt) return 0;
  return segments.back().invalid_bytes();
}

IndexStatus LogScan::index_status() const {
  IndexStatus status = IndexStatus::kOk;
  for (const auto& s : segments) status = WorseIndexStatus(status, s.index_status);
  return status;
}

std::optional<std::string> LogScan::corruption() const {
  for (const auto& s : segments) {
    if (s.corrupt) return s.corruption_detail;
  }
  if (!continuity_error.empty()) return continuity_error;
  return std::nullopt;
}

Result<IndexRead> ReadIndexTail(LogDevice& device, const std::string& dir, uint64_t first_offset, uint64_t known,
                                const std::optional<IndexEntry>& last_known) {
  if (known == 0) return ReadIndexFile(device, dir, first_offset);
  IndexRead read;
  const std::string path = JoinPath(dir, IndexFileName(first_offset));
  if (!last_known || last_known->offset != first_offset + known - 1)
    return MakeError("internal: the tail of index " + path + " asked after " + std::to_string(known) +
                     " entries without the last of them");
  // Missing or shorter than what was read (being rebuilt by a writer's recovery): nothing new for
  // now, as ReadIndexFile's caller sees no more entries than it holds.
  auto exists = IndexFileExists(device, path, first_offset, read);
  if (!exists.ok()) return exists.error();
  if (!*exists) return read;
  const uint64_t from = kIndexHeaderBytes + (known - 1) * kIndexEntryBytes;
  uint64_t file_bytes = 0;
  auto bytes = ReadFileFrom(device, path, from, file_bytes);
  if (!bytes.ok()) return bytes.error();
  const uint64_t whole = bytes->size() / kIndexEntryBytes;
  if (whole == 0) {
    read.found = IndexStatus::kStale;
    read.detail = IndexFileName(first_offset) + " is shorter than the " + std::to_string(known) + " entries read";
    return read;
  }
  auto again = DecodeIndexEntry(bytes->data());
  if (!again || again->offset != last_known->offset || again->position != last_known->position ||
      again->commit_lsn != last_known->commit_lsn || again->type != last_known->type) {
    return MakeError("index " + path + " changed under the reader at offset " + std::to_string(last_known->offset) +
                     "; reopen the reader");
  }
  DecodeIndexEntries(bytes->data() + kIndexEntryBytes, bytes->size() - kIndexEntryBytes, first_offset, known,
                     *last_known, read);
  return read;
}

Result<uint64_t> PublishedEndOffset(LogDevice& device, const std::string& dir) {
  auto segments = ListSegments(device, dir);
  if (!segments.ok()) return segments.error();
  if (segments->empty()) return uint64_t{0};
  auto index = ReadIndexFile(device, dir, segments->back());
  if (!index.ok()) return index.error();
  return segments->back() + index->entries.size();
}

}  // namespace trellara::log
