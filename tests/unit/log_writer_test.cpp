// log_writer_test.cpp — the acknowledgement rule of the log writer: an acknowledged offset is
// durable (covered by a completed fdatasync), indexed, and immediately readable by another
// reader with a zero torn tail; nothing is acknowledged after a failed fdatasync or write.
#include <poll.h>

#include <fstream>
#include <random>

#include <catch2/catch.hpp>

#include "log_support/log_test_support.h"
#include "trellara/base/fault.h"
#include "trellara/capture/relay_progress.h"
#include "trellara/log/reader.h"
#include "trellara/log/scan.h"
#include "trellara/log/writer_failure.h"
#include "trellara/log/inspect.h"
#include "trellara/log/simulated_device.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_log_writer_test {

using namespace trellara;
using namespace trellara::log;
using namespace trellara::log::testing;

namespace {

// True when `bytes` (a segment image) holds a complete valid frame for `offset` at `position`.
bool HoldsFrame(const std::vector<uint8_t>& bytes, uint64_t position, uint64_t offset) {
  if (bytes.size() < position + kFrameHeaderBytes) return false;
  auto header = DecodeFrameHeader(bytes.data() + position);
  if (!header || header->offset != offset || bytes.size() < position + kFrameHeaderBytes + header->payload_bytes) {
    return false;
  }
  return FrameCrcMatches(bytes.data() + position, *header,
                         std::span<const uint8_t>(bytes.data() + position + kFrameHeaderBytes, header->payload_bytes));
}

}  // namespace

TEST_CASE("fsync_publish_ack_follows_durable_frame_and_index", "[log][writer]") {
  const uint64_t seed = 20240611;
  INFO("simulated device seed " << seed);
  SimulatedDevice device(SimulatedDeviceOptions{seed, false});
  const std::string dir = "/flow";
  WriterOptions options;
  options.batch_bytes_max = 1500;
  auto writer = LogWriter::Open(device, dir, options);
  REQUIRE(writer.ok());
  auto reader = LogReader::Open(device, dir);  // "another process": shares only the files
  REQUIRE(reader.ok());
  uint64_t acked = 0, read = 0, polls_with_unacked_records = 0;
  std::vector<uint64_t> positions;
  for (int step = 0; step < 400; ++step) {
    for (int i = 0; i < 3; ++i) {
      const uint64_t offset = (*writer)->next_offset();
      REQUIRE((*writer)->Append(static_cast<uint8_t>(RecordType::Test), TestRecordCommitLsn(offset),
                                MakeTestRecord(seed, offset, 300)).ok());
    }
    REQUIRE((*writer)->Submit().ok());
    auto durable_end = (*writer)->Poll();
    REQUIRE(durable_end.ok());
    if (*durable_end < (*writer)->next_offset()) polls_with_unacked_records += 1;
    auto durable_segment = device.DurableFileBytes(dir + "/" + SegmentFileName(0));
    REQUIRE(durable_segment);
    auto index = ReadIndexFile(device, dir, 0);
    REQUIRE(index.ok());
    for (; acked < *durable_end; ++acked) {
      // Indexed: the entry exists, and it points at a frame that survives power loss now.
      REQUIRE(index->entries.size() > acked);
      CHECK(HoldsFrame(*durable_segment, index->entries[acked].position, acked));
    }
    // Immediately readable, exactly up to the acknowledgement and never beyond it.
    for (;;) {
      auto record = (*reader)->Next();
      REQUIRE(record.ok());
      if (!record->has_value()) break;
      REQUIRE((*record)->offset == read);
      REQUIRE(TestRecordMatches(seed, read, (*record)->payload));
      read += 1;
    }
    REQUIRE(read == acked);
    // Inspection state of an acknowledged log: zero torn tail bytes below the acknowledgement.
    auto scan = ScanLog(device, dir, ScanOptions{true, false});
    REQUIRE(scan.ok());
    CHECK(scan->last_valid_offset().value_or(0) + (acked > 0 ? 1 : 0) >= acked);
  }
  CHECK(acked > 0);
  CHECK(polls_with_unacked_records > 0);  // the run exercised records in flight, not only flushes
  auto flushed = (*writer)->Flush();
  REQUIRE(flushed.ok());
  auto scan = ScanLog(device, dir, ScanOptions{true, false});
  REQUIRE(scan.ok());
  CHECK(scan->torn_tail_bytes() == 0);
  CHECK(scan->last_valid_offset() == std::optional<uint64_t>(*flushed - 1));
  CHECK(scan->index_status() == IndexStatus::kOk);
}

TEST_CASE("log_fsync_failure_stops_acknowledgements", "[log][writer][fault]") {
  TempDir dir;
  auto device = RealDevice();
  auto writer = LogWriter::Open(*device, dir.flow(), WriterOptions{});
  REQUIRE(writer.ok());
  AppendTestRecords(**writer, 3, 10, 100, 10);  // one group, one fdatasync
  REQUIRE((*writer)->durable_end() == 10);
  REQUIRE(fault::Configure("log.fsync_fails:1:error").ok());
  for (int i = 0; i < 5; ++i) {
    const uint64_t offset = (*writer)->next_offset();
    REQUIRE((*writer)->Append(static_cast<uint8_t>(RecordType::Test), TestRecordCommitLsn(offset),
                              MakeTestRecord(3, offset, 100)).ok());
  }
  auto flushed = (*writer)->Flush();
  CHECK(fault::FiredCount("log.fsync_fails") == 1);
  fault::Clear();
  REQUIRE_FALSE(flushed.ok());
  CHECK_THAT(flushed.error().message, Catch::Contains("fdatasync"));
  CHECK_THAT(flushed.error().message, Catch::Contains("reopen"));
  CHECK((*writer)->durable_end() == 10);  // nothing acknowledged after the failure
  // The writer stays stopped: no retry of fdatasync can turn a lost write into an acknowledgement.
  CHECK_FALSE((*writer)->Append(static_cast<uint8_t>(RecordType::Test), 0, MakeTestRecord(3, 15, 100)).ok());
  CHECK_FALSE((*writer)->Flush().ok());
  CHECK((*writer)->durable_end() == 10);
  // Index entries were not published for the unacknowledged records.
  auto index = ReadIndexFile(*device, dir.flow(), 0);
  REQUIRE(index.ok());
  CHECK(index->entries.size() == 10);
  // The last point known durable is recorded durably, beside the log (writer_failure.h).
  auto recorded = ReadWriterFailure(*device, dir.flow());
  REQUIRE(recorded.ok());
  REQUIRE(recorded->has_value());
  CHECK((*recorded)->durable_end == 10);
  CHECK((*recorded)->segment_first_offset == 0);
  CHECK((*recorded)->durable_position == 10 * 140);
  writer->reset();
  // Inspect shows it; an index repair (which would fdatasync and publish page-cache frames) refuses.
  auto inspected = InspectLog(*device, dir.flow(), InspectOptions{});
  REQUIRE(inspected.ok());
  CHECK_THAT(inspected->json, Catch::Contains("\"writer_failed\":{\"durable_end\":10"));
  InspectOptions repair;
  repair.repair_index = true;
  auto repaired = InspectLog(*device, dir.flow(), repair);
  REQUIRE_FALSE(repaired.ok());
  CHECK_THAT(repaired.error().message, Catch::Contains("WRITER_FAILED"));
  // Reopening recovers to the recorded point, not to whatever the page cache shows: the five
  // unacknowledged frames are dropped although they read back as valid here.
  RecoveryReport report;
  auto reopened = LogWriter::Open(*device, dir.flow(), WriterOptions{}, &report);
  REQUIRE(reopened.ok());
  CHECK(report.next_offset == 10);
  CHECK(report.writer_failure_recovered);
  CHECK(report.untrusted_bytes_dropped == 5 * 140);
  CHECK_FALSE(ReadWriterFailure(*device, dir.flow())->has_value());
  AppendTestRecords(**reopened, 3, 2, 100, 2);
  CHECK((*reopened)->durable_end() == 12);
}

TEST_CASE("log_no_space_fails_the_append_without_acknowledging", "[log][writer][fault]") {
  TempDir dir;
  auto device = RealDevice();
  auto writer = LogWriter::Open(*device, dir.flow(), WriterOptions{});
  REQUIRE(writer.ok());
  AppendTestRecords(**writer, 4, 3, 100, 3);
  REQUIRE(fault::Configure("log.no_space:1:error").ok());
  REQUIRE((*writer)->Append(static_cast<uint8_t>(RecordType::Test), TestRecordCommitLsn(3), MakeTestRecord(4, 3, 100)).ok());
  auto flushed = (*writer)->Flush();
  CHECK(fault::FiredCount("log.no_space") == 1);
  fault::Clear();
  REQUIRE_FALSE(flushed.ok());
  CHECK_THAT(flushed.error().message, Catch::Contains("No space left on device"));
  CHECK((*writer)->durable_end() == 3);
}

TEST_CASE("log_writer_non_blocking_api_signals_completions_on_eventfd", "[log][writer]") {
  // The relay's way to drive the writer: Append + Submit never wait; the eventfd becomes readable
  // when completions are ready; Poll reaps them without blocking.
  TempDir dir;
  auto device = RealDevice();
  auto writer = LogWriter::Open(*device, dir.flow(), WriterOptions{});
  REQUIRE(writer.ok());
  const int event_fd = (*writer)->completion_event_fd();
  REQUIRE(event_fd >= 0);
  for (uint64_t offset = 0; offset < 50; ++offset) {
    REQUIRE((*writer)->Append(static_cast<uint8_t>(RecordType::Test), TestRecordCommitLsn(offset),
                              MakeTestRecord(6, offset, 500)).ok());
  }
  REQUIRE((*writer)->Submit().ok());
  CHECK((*writer)->durable_end() == 0);  // nothing is acknowledged before the disk answered
  int waits = 0;
  while ((*writer)->durable_end() < 50) {
    pollfd pfd{event_fd, POLLIN, 0};
    int ready = ::poll(&pfd, 1, 10000);  // a latch wait with a timeout in the relay
    REQUIRE(ready == 1);
    waits += 1;
    auto durable = (*writer)->Poll();
    REQUIRE(durable.ok());
    REQUIRE(waits < 1000);
  }
  CHECK((*writer)->durable_end() == 50);
  CHECK((*writer)->fsyncs_completed() >= 1);
  CHECK((*writer)->durable_tail().commit_lsn == TestRecordCommitLsn(49));
}

TEST_CASE("pipelined_passes_confirm_and_publish_only_what_an_fdatasync_covered", "[log][writer][relay]") {
  // The relay's group commit pipelining (docs/relay.md "Overlapping decoding with the fdatasync"):
  // each pass appends and submits its transactions and never waits; the next pass appends while
  // the previous group's fdatasync is in flight. What it confirms is AckTracker's answer for the
  // writer's durable end after a non-blocking Poll. At every step: a confirmed transaction's
  // completing frame survives power loss, readers see nothing past the durable end, and after a
  // power loss the restart rule (DecideRestart) resumes with the log covering the confirmed LSN.
  const uint64_t seed = GENERATE(11u, 2024u, 77777u, 314159u, 9001u, 424242u);
  INFO("simulated device seed " << seed);
  SimulatedDevice device(SimulatedDeviceOptions{seed, false});
  std::mt19937_64 rng(seed);
  const std::string dir = "/flow";
  WriterOptions options;
  options.batch_bytes_max = 700;
  options.segment_bytes_max = 16384;
  uint64_t confirmed = 0;  // the slot
  uint64_t next_lsn = 0x1000;
  uint64_t passes_over_inflight_frames = 0, power_losses = 0;
  for (int life = 0; life < 4; ++life) {
    auto writer = LogWriter::Open(device, dir, options);
    REQUIRE(writer.ok());
    // Restart: the log must cover what the slot confirmed.
    std::vector<TailFrame> newest_first;
    {
      auto reader = LogReader::Open(device, dir);
      REQUIRE(reader.ok());
      std::vector<LogRecord> records;
      for (;;) {
        auto next = (*reader)->Next();
        REQUIRE(next.ok());
        if (!next->has_value()) break;
        records.push_back(std::move(**next));
      }
      for (auto it = records.rbegin(); it != records.rend(); ++it) {
        newest_first.push_back(TailFrame{it->offset, it->type, it->commit_lsn});
        if (CompletesTransaction(it->type)) break;
      }
    }
    LogStartRecord start;
    if (life > 0) start.started_lsn = 0x1000;
    RestartDecision decision = DecideRestart(newest_first, confirmed, start, "flow");
    INFO("restart: " << decision.reason);
    REQUIRE(decision.kind != RestartDecision::Kind::kRefuse);
    REQUIRE(decision.covered_lsn >= confirmed);
    AckTracker ack(decision.covered_lsn);
    if (decision.kind == RestartDecision::Kind::kFreshLog) {
      // The relay's start marker at the slot's position, durable before anything else.
      const std::vector<uint8_t> marker = EncodeProgressMarker(0x1000, 0);
      auto appended = (*writer)->Append(kProgressRecordType, 0x1000, marker);
      REQUIRE(appended.ok());
      ack.Appended(*appended, kProgressRecordType, 0x1000);
      auto flushed = (*writer)->Flush();
      REQUIRE(flushed.ok());
      confirmed = ack.Durable(*flushed);
    }
    auto reader = LogReader::Open(device, dir);
    REQUIRE(reader.ok());
    uint64_t read_end = 0;
    const int passes = 20 + static_cast<int>(rng() % 40);
    for (int pass = 0; pass < passes; ++pass) {
      if ((*writer)->durable_end() < (*writer)->next_offset()) passes_over_inflight_frames += 1;
      const int transactions = 1 + static_cast<int>(rng() % 3);
      for (int t = 0; t < transactions; ++t) {
        next_lsn += 0x100;
        // An envelope, or a chunked transaction: chunks, manifest, commit marker.
        std::vector<RecordType> frames{RecordType::Envelope};
        if (rng() % 4 == 0) frames = {RecordType::Chunk, RecordType::Chunk, RecordType::Manifest, RecordType::CommitMarker};
        for (RecordType type : frames) {
          if ((*writer)->WouldRollSegment(200)) REQUIRE((*writer)->Flush().ok());  // the relay waits first too
          const uint64_t offset = (*writer)->next_offset();
          auto appended = (*writer)->Append(static_cast<uint8_t>(type), next_lsn, MakeTestRecord(seed, offset, 200));
          REQUIRE(appended.ok());
          ack.Appended(*appended, static_cast<uint8_t>(type), next_lsn);
        }
      }
      // End of the pass: submit, acknowledge what is durable, start the next pass at once; a few
      // completions may be reaped between passes (the relay's wait on the eventfd).
      const int polls = 1 + static_cast<int>(rng() % 3);
      for (int p = 0; p < polls; ++p) {
        auto durable = (*writer)->Poll();
        REQUIRE(durable.ok());
        const uint64_t confirmable = ack.Durable(*durable);
        // The slot moves only to a transaction whose completing frame is durable now.
        if (confirmable > confirmed) {
          bool covered = false;
          auto reader_now = LogReader::Open(device, dir);
          REQUIRE(reader_now.ok());
          for (;;) {
            auto next = (*reader_now)->Next();
            REQUIRE(next.ok());
            if (!next->has_value()) break;
            REQUIRE((*next)->offset < *durable);  // readers never see past the durable end
            if (CompletesTransaction((*next)->type) && (*next)->commit_lsn >= confirmable) covered = true;
          }
          REQUIRE(covered);
          confirmed = confirmable;
        }
      }
      // A follower reads exactly up to the durable end, never beyond it.
      for (;;) {
        auto next = (*reader)->Next();
        REQUIRE(next.ok());
        if (!next->has_value()) break;
        read_end = (*next)->offset + 1;
      }
      REQUIRE(read_end <= (*writer)->durable_end());
      if (rng() % 25 == 0) break;  // power loss mid-flight below
    }
    // Power loss with the last passes' writes and fdatasync possibly in flight (before the writer
    // is destroyed: its destructor would wait for them).
    device.PowerLoss();
    writer->reset();
    power_losses += 1;
  }
  CHECK(power_losses == 4);
  CHECK(passes_over_inflight_frames > 0);  // passes really appended while earlier frames were in flight
  CHECK(confirmed > 0x1000);
}

TEST_CASE("log_reader_follows_the_tail_across_segments", "[log][reader]") {
  TempDir dir;
  auto device = RealDevice();
  WriterOptions options;
  options.segment_bytes_max = 1500;  // 5 frames of 280 bytes per segment
  auto writer = LogWriter::Open(*device, dir.flow(), options);
  REQUIRE(writer.ok());
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  uint64_t read = 0;
  for (int step = 0; step < 12; ++step) {
    AppendTestRecords(**writer, 12, 3, 240, 3);
    for (;;) {
      auto record = (*reader)->Next();
      REQUIRE(record.ok());
      if (!record->has_value()) break;
      REQUIRE((*record)->offset == read);
      REQUIRE(TestRecordMatches(12, read, (*record)->payload));
      read += 1;
    }
    REQUIRE(read == (*writer)->durable_end());  // caught up with every acknowledged record
  }
  auto segments = ListSegments(*device, dir.flow());
  REQUIRE(segments.ok());
  CHECK(segments->size() >= 7);
}

// The reader's read-ahead buffer and its index refresh that reads only the index's new tail: records
// of mixed sizes (some larger than the read-ahead) followed while they are written, then sought back
// and forth within the segment — every record whole and in order.
TEST_CASE("log_reader_reads_ahead_and_refreshes_only_the_index_tail", "[log][reader]") {
  TempDir dir;
  auto device = RealDevice();
  WriterOptions options;
  options.segment_bytes_max = 4ull << 20;
  auto writer = LogWriter::Open(*device, dir.flow(), options);
  REQUIRE(writer.ok());
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  const size_t sizes[] = {100, 3000, 40, 300 * 1024, 700, 1, 64 * 1024};
  uint64_t read = 0;
  for (int step = 0; step < 40; ++step) {
    AppendTestRecords(**writer, 21, 1 + step % 5, sizes[step % 7], 2);
    for (;;) {
      auto record = (*reader)->Next();
      REQUIRE(record.ok());
      if (!record->has_value()) break;
      REQUIRE((*record)->offset == read);
      REQUIRE(TestRecordMatches(21, read, (*record)->payload));
      read += 1;
    }
    REQUIRE(read == (*writer)->durable_end());
  }
  for (uint64_t offset : {uint64_t{3}, read - 1, uint64_t{0}, read / 2, read / 2 - 1}) {
    REQUIRE((*reader)->Seek(offset).ok());
    auto record = (*reader)->Next();
    REQUIRE(record.ok());
    REQUIRE(record->has_value());
    CHECK((*record)->offset == offset);
    CHECK(TestRecordMatches(21, offset, (*record)->payload));
  }
}

// An index entry the reader already read that is different when it looks for new entries is an
// error naming the index, never a silently different view of the log.
TEST_CASE("log_reader_refuses_an_index_entry_changed_under_it", "[log][reader]") {
  TempDir dir;
  auto device = RealDevice();
  auto writer = LogWriter::Open(*device, dir.flow(), WriterOptions{});
  REQUIRE(writer.ok());
  AppendTestRecords(**writer, 22, 6, 200, 6);
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  for (uint64_t i = 0; i < 6; ++i) {
    auto record = (*reader)->Next();
    REQUIRE(record.ok());
    REQUIRE(record->has_value());
  }
  // Entry 5 (the last one read) rewritten with another commit LSN, its CRC valid.
  const std::string index_path = dir.flow() + "/" + IndexFileName(0);
  auto index = ReadIndexFile(*device, dir.flow(), 0);
  REQUIRE(index.ok());
  REQUIRE(index->entries.size() == 6);
  IndexEntry changed = index->entries[5];
  changed.commit_lsn += 1;
  uint8_t bytes[kIndexEntryBytes];
  EncodeIndexEntry(changed, bytes);
  {
    std::fstream f(index_path, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(f.good());
    f.seekp(static_cast<std::streamoff>(kIndexHeaderBytes + 5 * kIndexEntryBytes));
    f.write(reinterpret_cast<const char*>(bytes), sizeof bytes);
  }
  auto next = (*reader)->Next();
  REQUIRE_FALSE(next.ok());
  CHECK_THAT(next.error().message, Catch::Contains("changed under the reader at offset 5"));
}

TEST_CASE("log_record_larger_than_a_segment_gets_a_segment_of_its_own", "[log][writer]") {
  // A small segment size (trellara.log_segment_size) must never make a big record unwritable.
  TempDir dir;
  auto device = RealDevice();
  WriterOptions options;
  options.segment_bytes_max = 2048;
  {
    auto writer = LogWriter::Open(*device, dir.flow(), options);
    REQUIRE(writer.ok());
    for (size_t bytes : {100u, 5000u, 100u, 9000u}) {
      const uint64_t offset = (*writer)->next_offset();
      REQUIRE((*writer)->Append(static_cast<uint8_t>(RecordType::Test), TestRecordCommitLsn(offset),
                                MakeTestRecord(4, offset, bytes)).ok());
    }
    REQUIRE((*writer)->Flush().ok());
  }
  auto segments = ListSegments(*device, dir.flow());
  REQUIRE(segments.ok());
  CHECK(*segments == std::vector<uint64_t>{0, 1, 2, 3});
  RecoveryReport report;
  auto reopened = LogWriter::Open(*device, dir.flow(), options, &report);
  REQUIRE(reopened.ok());
  CHECK(report.next_offset == 4);
  CHECK(report.torn_tail_bytes == 0);
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  for (uint64_t offset = 0; offset < 4; ++offset) {
    auto record = (*reader)->Next();
    REQUIRE(record.ok());
    REQUIRE(record->has_value());
    CHECK((**record).offset == offset);
    CHECK(TestRecordMatches(4, offset, (**record).payload));
  }
}

namespace {

// Forwards every call to a SimulatedDevice and, when a segment file is about to be created, looks
// at what a reader listing the directory would find for it at that instant.
class SegmentCreationProbe final : public LogDevice {
 public:
  explicit SegmentCreationProbe(SimulatedDevice& inner) : inner_(inner) {}
  std::vector<std::string> problems;
  uint64_t segments_created = 0;

  Result<FileId> OpenFile(const std::string& path, bool create) override {
    const std::string name = path.substr(path.rfind('/') + 1);
    auto first = ParseSegmentFileName(name);
    if (create && first && !inner_.Exists(path).value()) {
      segments_created += 1;
      const std::string index = path.substr(0, path.rfind('/') + 1) + IndexFileName(*first);
      const std::vector<uint8_t>* visible = inner_.MutableFileBytes(index);
      if (visible == nullptr || visible->size() < kIndexHeaderBytes || DecodeIndexHeader(visible->data()) != *first) {
        problems.push_back(name + ": index missing or without its header when the segment was created");
      }
    }
    return inner_.OpenFile(path, create);
  }
  Status MakeDirectory(const std::string& p) override { return inner_.MakeDirectory(p); }
  Result<std::vector<std::string>> ListDirectory(const std::string& p) override { return inner_.ListDirectory(p); }
  Result<bool> Exists(const std::string& p) override { return inner_.Exists(p); }
  Result<FileId> OpenFileReadOnly(const std::string& p) override { return inner_.OpenFileReadOnly(p); }
  void CloseFile(FileId f) override { inner_.CloseFile(f); }
  Result<uint64_t> FileSize(FileId f) override { return inner_.FileSize(f); }
  Result<size_t> ReadAt(FileId f, uint64_t pos, void* buf, size_t len) override { return inner_.ReadAt(f, pos, buf, len); }
  Status WriteAt(FileId f, uint64_t pos, const void* d, size_t len) override { return inner_.WriteAt(f, pos, d, len); }
  Status SyncData(FileId f) override { return inner_.SyncData(f); }
  Status Truncate(FileId f, uint64_t size) override { return inner_.Truncate(f, size); }
  Status Rename(const std::string& from, const std::string& to) override { return inner_.Rename(from, to); }
  Status Remove(const std::string& p) override { return inner_.Remove(p); }
  Status SyncDirectory(const std::string& p) override { return inner_.SyncDirectory(p); }
  Result<std::optional<FileId>> TryLockFile(const std::string& p) override { return inner_.TryLockFile(p); }
  void UnlockFile(FileId l) override { inner_.UnlockFile(l); }
  Status QueueWrite(FileId f, uint64_t pos, const void* d, size_t len, uint64_t tag) override {
    return inner_.QueueWrite(f, pos, d, len, tag);
  }
  Status QueueSyncData(FileId f, uint64_t pos, uint64_t len, uint64_t tag) override {
    return inner_.QueueSyncData(f, pos, len, tag);
  }
  Status SubmitQueued() override { return inner_.SubmitQueued(); }
  size_t ReapCompletions(std::vector<Completion>& out) override { return inner_.ReapCompletions(out); }
  Status WaitForCompletion() override { return inner_.WaitForCompletion(); }
  int completion_event_fd() const override { return inner_.completion_event_fd(); }
  size_t in_flight_max() const override { return inner_.in_flight_max(); }

 private:
  SimulatedDevice& inner_;
};

}  // namespace

TEST_CASE("a_segment_file_appears_only_after_its_index_has_its_header", "[log][writer]") {
  // Readers find segments by their segment files. A segment visible before its index had a header
  // once stopped a daemon applier ("index ... of the active segment is corrupt"); the writer, and
  // recovery creating the first segment of an empty log, now create the index whole first (both
  // names become durable at the directory fsync that follows; recovery rebuilds a lost index).
  SimulatedDevice device(SimulatedDeviceOptions{7, false});
  SegmentCreationProbe probe(device);
  WriterOptions options;
  options.segment_bytes_max = 1500;
  auto writer = LogWriter::Open(probe, "/flow", options);
  REQUIRE(writer.ok());
  AppendTestRecords(**writer, 7, 30, 240, 3);
  std::string problems;
  for (const auto& problem : probe.problems) problems += problem + "\n";
  INFO(problems);
  CHECK(probe.problems.empty());
  CHECK(probe.segments_created >= 6);  // the first segment (recovery) and every roll (writer)
  // A reader opening at any offset now finds every record (Seek no longer races the roll).
  for (uint64_t offset = 0; offset < 30; offset += 5) {
    auto reader = LogReader::Open(device, "/flow");
    REQUIRE(reader.ok());
    REQUIRE((*reader)->Seek(offset).ok());
    auto record = (*reader)->Next();
    REQUIRE(record.ok());
    REQUIRE(record->has_value());
    CHECK((*record)->offset == offset);
  }
}

}  // namespace unit_log_writer_test
