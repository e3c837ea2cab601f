// writer.cpp — appends, group commit and acknowledgement for one log directory (see writer.h).
// Never acknowledges an offset before its frame is fdatasync'ed and its index entry written, and
// never continues after a failed write or fdatasync.
#include "trellara/base/assert.h"
#include "trellara/log/writer.h"

#include <algorithm>
#include <cstring>

#include "trellara/base/fault.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/writer_failure.h"

namespace trellara::log {
namespace {

constexpr uint64_t kSyncTag = 1ull << 63;

}  // namespace

LogWriter::LogWriter(LogDevice& device, std::string dir, const WriterOptions& options)
    : device_(device), dir_(std::move(dir)), options_(options) {}

LogWriter::~LogWriter() {
  // The device may still be writing from our batch buffers: wait for every operation to finish.
  while (ops_in_flight_ > 0) {
    if (!device_.WaitForCompletion().ok()) break;
    completions_.clear();
    size_t reaped = device_.ReapCompletions(completions_);
    if (reaped == 0) break;  // the device lost them (simulated power loss)
    ops_in_flight_ -= std::min(ops_in_flight_, reaped);
  }
  if (index_file_) {
    if (!failure_) (void)device_.SyncData(*index_file_);  // derived data: best effort
    device_.CloseFile(*index_file_);
  }
  if (segment_file_) device_.CloseFile(*segment_file_);
  if (lock_) device_.UnlockFile(*lock_);
}

Result<std::unique_ptr<LogWriter>> LogWriter::Open(LogDevice& device, const std::string& dir,
                                                   const WriterOptions& options, RecoveryReport* report_out) {
  if (options.segment_bytes_max < kFrameHeaderBytes + 1 || options.segment_bytes_max > (1ull << 40)) {
    return MakeError("segment_bytes_max " + std::to_string(options.segment_bytes_max) +
                     " is out of range; use between 41 bytes and 1 TiB (default 64 MiB)");
  }
  TRELLARA_TRY(device.MakeDirectory(dir));
  TRELLARA_TRY(device.MakeDirectory(JoinPath(dir, kConsumersDirName)));
  std::unique_ptr<LogWriter> writer(new LogWriter(device, dir, options));
  auto lock = device.TryLockFile(JoinPath(dir, kLockFileName));
  if (!lock.ok()) return lock.error();
  if (!lock->has_value()) {
    return MakeError("log directory " + dir + " is locked by another writer (" + kLockFileName +
                     "); a flow's log has exactly one writer: stop the other relay or command first");
  }
  writer->lock_ = **lock;

  auto report = RecoverLog(device, dir, RecoveryOptions{});
  if (!report.ok()) return report.error();
  auto segments = ListSegments(device, dir);
  if (!segments.ok()) return segments.error();
  if (segments->empty()) return MakeError("recovery of " + dir + " left no segment; open the log again");
  TRELLARA_TRY(writer->StartSegment(segments->back(), false));
  writer->next_offset_ = report->next_offset;
  writer->durable_end_ = report->next_offset;
  writer->durable_tail_ = DurableTail{report->last_valid_offset, report->last_commit_lsn};
  if (report_out != nullptr) *report_out = *report;
  return writer;
}

Status LogWriter::StartSegment(uint64_t first_offset, bool create) {
  const std::string segment_path = JoinPath(dir_, SegmentFileName(first_offset));
  const std::string index_path = JoinPath(dir_, IndexFileName(first_offset));
  // A new segment's index is created whole (header written and synced) before the segment file
  // exists: readers find segments by their segment files (ListSegments), so none can see a segment
  // whose index is missing or shorter than its header. A crash in between leaves an index without
  // a segment, which recovery removes (ScanLog's orphan_index_files).
  auto index = device_.OpenFile(index_path, create);
  if (!index.ok()) return index.error();
  index_file_ = *index;
  if (create) {
    uint8_t header[kIndexHeaderBytes];
    EncodeIndexHeader(first_offset, header);
    TRELLARA_TRY(device_.WriteAt(*index_file_, 0, header, sizeof header));
    TRELLARA_TRY(device_.SyncData(*index_file_));
  }
  auto segment = device_.OpenFile(segment_path, create);
  if (!segment.ok()) return segment.error();
  segment_file_ = *segment;
  segment_first_offset_ = first_offset;
  if (create) {
    TRELLARA_TRY(device_.SyncData(*segment_file_));
    // The new names must survive power loss before any record in them is acknowledged.
    TRELLARA_TRY(device_.SyncDirectory(dir_));
    segment_end_position_ = 0;
    index_entries_ = 0;
    return Status::Ok();
  }
  auto segment_bytes = device_.FileSize(*segment_file_);
  if (!segment_bytes.ok()) return segment_bytes.error();
  auto index_bytes = device_.FileSize(*index_file_);
  if (!index_bytes.ok()) return index_bytes.error();
  segment_end_position_ = *segment_bytes;
  index_entries_ = (*index_bytes - kIndexHeaderBytes) / kIndexEntryBytes;
  return Status::Ok();
}

Status LogWriter::RollSegment() {
  auto flushed = Flush();
  if (!flushed.ok()) return flushed.error();
  Status synced = device_.SyncData(*index_file_);
  if (!synced.ok()) return Fail(synced.error());
  const WriterFailureState sealed{durable_end_, segment_first_offset_, segment_end_position_};
  device_.CloseFile(*segment_file_);
  device_.CloseFile(*index_file_);
  segment_file_.reset();
  index_file_.reset();
  Status started = StartSegment(next_offset_, true);
  if (!started.ok()) {
    // The new segment's fsyncs may have failed: recovery must not trust it, only the sealed one.
    Status recorded = RecordWriterFailure(device_, dir_, sealed);
    if (!recorded.ok()) started = MakeError(started.error().message + "; " + recorded.error().message);
    return Fail(MakeError("creating segment " + JoinPath(dir_, SegmentFileName(next_offset_)) +
                          " failed: " + started.error().message + "; reopen the log after fixing the disk"));
  }
  return Status::Ok();
}

Error LogWriter::Fail(Error error) {
  if (!failure_) {
    failure_ = MakeError(error.message + " [log " + dir_ + " stopped: offsets below " + std::to_string(durable_end_) +
                         " are acknowledged, nothing later will be; reopen the log to recover from disk]");
  }
  return *failure_;
}

Error LogWriter::FailAfterFsyncError(Error error) {
  // The frames after the last acknowledged one may now exist only in the page cache, marked
  // clean: record the last point known durable so that recovery truncates to it instead of
  // trusting a re-scan (writer_failure.h). Batches are contiguous and all in the current segment
  // (rollover flushes first), so the oldest unacknowledged batch starts where durability ends.
  const uint64_t durable_position = batches_.empty() ? segment_end_position_ : batches_.front().position;
  Status recorded = RecordWriterFailure(device_, dir_, WriterFailureState{durable_end_, segment_first_offset_, durable_position});
  if (!recorded.ok()) {
    return Fail(MakeError(error.message + "; " + recorded.error().message +
                          " — do not reopen this log before the disk is healthy: recovery could trust bytes that "
                          "never reached the disk"));
  }
  return Fail(std::move(error));
}

Status LogWriter::CheckUsable() const {
  if (failure_) return *failure_;
  return Status::Ok();
}

Result<uint64_t> LogWriter::Append(uint8_t type, uint64_t commit_lsn, std::span<const uint8_t> payload) {
  TRELLARA_TRY(CheckUsable());
  const uint64_t frame_bytes = kFrameHeaderBytes + payload.size();
  if (payload.size() > kPayloadBytesMax) {
    return MakeError("record of " + std::to_string(payload.size()) + " bytes for " + dir_ +
                     " is larger than a frame may be (payload max " + std::to_string(kPayloadBytesMax) +
                     "); split it into chunks");
  }
  // segment_bytes_max is where a segment is closed, not a bound on records: a frame larger than it
  // (a small trellara.log_segment_size and a big row) gets a segment of its own.
  if (segment_end_position_ > 0 && segment_end_position_ + frame_bytes > options_.segment_bytes_max) {
    TRELLARA_TRY(RollSegment());
  }
  if (batches_.empty() || batches_.back().submitted) {
    Batch batch;
    batch.position = segment_end_position_;
    batch.first_offset = next_offset_;
    batch.end_offset = next_offset_;
    batch.tag = next_tag_++;
    if (!spare_buffers_.empty()) {
      batch.bytes = std::move(spare_buffers_.back());
      spare_buffers_.pop_back();
      batch.bytes.clear();
    }
    batch.bytes.reserve(std::max<size_t>(options_.batch_bytes_max + (64u << 10), frame_bytes));
    batches_.push_back(std::move(batch));
  }
  Batch& batch = batches_.back();
  const size_t at = batch.bytes.size();
  batch.bytes.resize(at + frame_bytes);
  const uint64_t offset = next_offset_;
  // Offsets are dense and increasing within a batch, and a frame lies within its segment: it
  // starts where the previous one ended and ends at the segment's bound, or is the segment's only
  // frame (a frame larger than segment_bytes_max gets a segment of its own).
  TRELLARA_ASSERT(batch.end_offset == offset && batch.position + at == segment_end_position_,
                  "log writer of " + dir_ + ": offset " + std::to_string(offset) + " at position " +
                      std::to_string(segment_end_position_) + " does not follow its batch (end offset " +
                      std::to_string(batch.end_offset) + ", batch position " + std::to_string(batch.position) +
                      " + " + std::to_string(at) + ")");
  TRELLARA_ASSERT(segment_end_position_ == 0 || segment_end_position_ + frame_bytes <= options_.segment_bytes_max,
                  "log writer of " + dir_ + ": frame of offset " + std::to_string(offset) + " would end past its segment");
  EncodeFrame(type, offset, commit_lsn, durable_end_, payload, batch.bytes.data() + at);
  batch.entries.push_back(IndexEntry{offset, segment_end_position_, commit_lsn, type});
  batch.end_offset = offset + 1;
  segment_end_position_ += frame_bytes;
  unacknowledged_bytes_ += frame_bytes;
  next_offset_ += 1;
  if (batch.bytes.size() >= options_.batch_bytes_max) {
    TRELLARA_TRY(SubmitOpenBatch());
    TRELLARA_TRY(device_.SubmitQueued());
  }
  return offset;
}

Status LogWriter::SubmitOpenBatch() {
  if (batches_.empty() || batches_.back().submitted) return Status::Ok();
  // Keep one slot for the fdatasync; an open batch waits (and grows) until a write completes.
  if (ops_in_flight_ + 2 > device_.in_flight_max()) return Status::Ok();
  Batch& batch = batches_.back();
  if (fault::Hit("log.no_space") == fault::Action::Error) {
    return Fail(MakeError("write of " + std::to_string(batch.bytes.size()) + " bytes at position " +
                          std::to_string(batch.position) + " of " + JoinPath(dir_, SegmentFileName(segment_first_offset_)) +
                          " failed: No space left on device (fault point log.no_space); free space, then reopen"));
  }
  Status queued = device_.QueueWrite(*segment_file_, batch.position, batch.bytes.data(), batch.bytes.size(), batch.tag);
  if (!queued.ok()) return Fail(queued.error());
  batch.submitted = true;
  ops_in_flight_ += 1;
  return Status::Ok();
}

Status LogWriter::MaybeStartSync(bool force) {
  if (sync_in_flight_) return Status::Ok();
  size_t written = 0;
  while (written < batches_.size() && batches_[written].written) written += 1;
  if (written == 0) return Status::Ok();
  auto now = std::chrono::steady_clock::now();
  if (!force && options_.fsync_interval_us > 0 &&
      now - last_sync_start_ < std::chrono::microseconds(options_.fsync_interval_us)) {
    return Status::Ok();
  }
  // Sync exactly the bytes of the covered batches (they are contiguous, oldest first).
  const uint64_t sync_from = batches_.front().position;
  const uint64_t sync_to = batches_[written - 1].position + batches_[written - 1].bytes.size();
  Status queued = device_.QueueSyncData(*segment_file_, sync_from, sync_to - sync_from, kSyncTag);
  if (!queued.ok()) return Fail(queued.error());
  sync_in_flight_ = true;
  sync_covers_batches_ = written;  // only writes that completed before this fdatasync was issued
  last_sync_start_ = now;
  ops_in_flight_ += 1;
  return Status::Ok();
}

Status LogWriter::PublishSyncedBatches(size_t count) {
  std::vector<uint8_t>& entries = index_buffer_;  // reused: a fresh buffer per group costs page faults
  entries.clear();
  for (size_t i = 0; i < count; ++i) {
    for (const auto& entry : batches_[i].entries) {
      entries.resize(entries.size() + kIndexEntryBytes);
      EncodeIndexEntry(entry, entries.data() + entries.size() - kIndexEntryBytes);
    }
  }
  Status written = device_.WriteAt(*index_file_, kIndexHeaderBytes + index_entries_ * kIndexEntryBytes,
                                   entries.data(), entries.size());
  if (!written.ok()) {
    return Fail(MakeError("writing index entries to " + JoinPath(dir_, IndexFileName(segment_first_offset_)) +
                          " failed: " + written.error().message));
  }
  index_entries_ += entries.size() / kIndexEntryBytes;
  for (size_t i = 0; i < count; ++i) {
    Batch& batch = batches_.front();
    durable_end_ = batch.end_offset;
    durable_tail_ = DurableTail{batch.end_offset - 1, batch.entries.back().commit_lsn};
    unacknowledged_bytes_ -= batch.bytes.size();
    if (spare_buffers_.size() < 512 && batch.bytes.capacity() <= (8u << 20)) {
      spare_buffers_.push_back(std::move(batches_.front().bytes));
    }
    batches_.pop_front();
  }
  return Status::Ok();
}

Status LogWriter::HandleCompletion(const Completion& completion) {
  ops_in_flight_ -= 1;
  if (completion.tag == kSyncTag) {
    sync_in_flight_ = false;
    const std::string segment = JoinPath(dir_, SegmentFileName(segment_first_offset_));
    if (completion.result < 0) {
      return FailAfterFsyncError(
          MakeError("fdatasync of " + segment + " failed: " + std::strerror(static_cast<int>(-completion.result))));
    }
    if (fault::Hit("log.fsync_fails") == fault::Action::Error) {
      return FailAfterFsyncError(
          MakeError("fdatasync of " + segment + " failed: Input/output error (fault point log.fsync_fails)"));
    }
    fsyncs_completed_ += 1;
    return PublishSyncedBatches(sync_covers_batches_);
  }
  for (Batch& batch : batches_) {
    if (batch.tag != completion.tag) continue;
    const std::string where = std::to_string(batch.bytes.size()) + " bytes at position " +
                              std::to_string(batch.position) + " of " +
                              JoinPath(dir_, SegmentFileName(segment_first_offset_));
    if (completion.result < 0) {
      return Fail(MakeError("write of " + where + " failed: " + std::strerror(static_cast<int>(-completion.result))));
    }
    if (static_cast<uint64_t>(completion.result) != batch.bytes.size()) {
      return Fail(MakeError("short write of " + where + ": only " + std::to_string(completion.result) +
                            " bytes written (disk full?)"));
    }
    batch.written = true;
    return Status::Ok();
  }
  return Fail(MakeError("log writer received a completion for unknown operation " + std::to_string(completion.tag)));
}

Status LogWriter::Submit() {
  TRELLARA_TRY(CheckUsable());
  TRELLARA_TRY(SubmitOpenBatch());
  TRELLARA_TRY(MaybeStartSync(false));
  Status submitted = device_.SubmitQueued();
  if (!submitted.ok()) return Fail(submitted.error());
  return Status::Ok();
}

Result<uint64_t> LogWriter::Poll() {
  TRELLARA_TRY(CheckUsable());
  completions_.clear();
  device_.ReapCompletions(completions_);
  for (const Completion& completion : completions_) {
    TRELLARA_TRY(HandleCompletion(completion));
  }
  TRELLARA_TRY(Submit());
  return durable_end_;
}

Result<uint64_t> LogWriter::WaitAndPoll() {
  TRELLARA_TRY(Submit());
  if (ops_in_flight_ > 0) {
    Status waited = device_.WaitForCompletion();
    if (!waited.ok()) return Fail(waited.error());
  }
  return Poll();
}

Result<uint64_t> LogWriter::Flush() {
  while (durable_end_ < next_offset_) {
    TRELLARA_TRY(CheckUsable());
    TRELLARA_TRY(SubmitOpenBatch());
    TRELLARA_TRY(MaybeStartSync(true));
    Status submitted = device_.SubmitQueued();
    if (!submitted.ok()) return Fail(submitted.error());
    if (ops_in_flight_ == 0) {
      return Fail(MakeError("log writer has unacknowledged records but nothing in flight (internal error)"));
    }
    Status waited = device_.WaitForCompletion();
    if (!waited.ok()) return Fail(waited.error());
    completions_.clear();
    device_.ReapCompletions(completions_);
    for (const Completion& completion : completions_) {
      TRELLARA_TRY(HandleCompletion(completion));
    }
  }
  TRELLARA_TRY(CheckUsable());
  return durable_end_;
}

Result<uint64_t> LogWriter::ReclaimSegments() {
  TRELLARA_TRY(CheckUsable());
  auto report = log::ReclaimSegments(device_, dir_);
  if (!report.ok()) return report.error();
  return report->segments_deleted;
}

}  // namespace trellara::log
