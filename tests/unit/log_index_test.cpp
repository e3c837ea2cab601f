// log_index_test.cpp — the sidecar index is derived data: missing, stale and corrupt indexes are
// detected, reported by `trellara log inspect`, and rebuilt from durable frames; inspection
// reports a torn tail without truncating it. Seed-000 scenario names.
#include <catch2/catch.hpp>
#include <iostream>
#include <optional>

#include "log_support/log_test_support.h"
#include "trellara/base/fault.h"
#include "trellara/log/reader.h"
#include "trellara/log/scan.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_log_index_test {

using namespace trellara::log;
using namespace trellara::log::testing;

namespace {

// Writes `records` records of 200 bytes into small segments and closes the writer.
void WriteLog(const std::string& dir, uint64_t records, uint64_t segment_bytes = 2048) {
  auto device = RealDevice();
  WriterOptions options;
  options.segment_bytes_max = segment_bytes;
  auto writer = LogWriter::Open(*device, dir, options);
  REQUIRE(writer.ok());
  AppendTestRecords(**writer, 11, records, 200, 5);
}

}  // namespace

TEST_CASE("missing_index_is_rebuilt_for_offset_replay", "[log][index]") {
  TempDir dir;
  WriteLog(dir.flow(), 40);  // 8 frames of 240 bytes per segment: 5 segments
  const std::string sealed_index = dir.flow() + "/" + IndexFileName(8);
  const std::string last_index = dir.flow() + "/" + IndexFileName(32);
  REQUIRE(std::filesystem::remove(sealed_index));
  REQUIRE(std::filesystem::remove(last_index));
  auto device = RealDevice();

  auto scan = ScanLog(*device, dir.flow(), ScanOptions{});
  REQUIRE(scan.ok());
  CHECK(scan->index_status() == IndexStatus::kMissing);
  CHECK(scan->last_valid_offset() == std::optional<uint64_t>(39));

  // A reader replays a sealed segment through an index rebuilt in memory from its frames.
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Seek(12).ok());
  auto record = (*reader)->Next();
  REQUIRE(record.ok());
  REQUIRE(record->has_value());
  CHECK((*record)->offset == 12);
  CHECK(TestRecordMatches(11, 12, (*record)->payload));
  CHECK((*reader)->index_status() == IndexStatus::kMissing);
  // The active segment is published only through its index: no guessing from frames.
  auto tail_reader = LogReader::Open(*device, dir.flow());
  REQUIRE(tail_reader.ok());
  CHECK_FALSE((*tail_reader)->Seek(35).ok());

  // Recovery rebuilds both index files; replay from any offset then works through them.
  RecoveryReport report;
  {
    auto writer = LogWriter::Open(*device, dir.flow(), WriterOptions{2048}, &report);
    REQUIRE(writer.ok());
  }
  CHECK(report.index_found == IndexStatus::kMissing);
  CHECK(report.index_status == IndexStatus::kRebuilt);
  CHECK(report.indexes_rebuilt == 2);
  CHECK(report.next_offset == 40);
  CHECK(std::filesystem::exists(sealed_index));
  CHECK(std::filesystem::exists(last_index));
  auto rescan = ScanLog(*device, dir.flow(), ScanOptions{});
  REQUIRE(rescan.ok());
  CHECK(rescan->index_status() == IndexStatus::kOk);
  auto replay = LogReader::Open(*device, dir.flow());
  REQUIRE(replay.ok());
  for (uint64_t offset : {0u, 8u, 12u, 32u, 39u}) {
    REQUIRE((*replay)->Seek(offset).ok());
    auto r = (*replay)->Next();
    REQUIRE(r.ok());
    REQUIRE(r->has_value());
    CHECK((*r)->offset == offset);
    CHECK(TestRecordMatches(11, offset, (*r)->payload));
  }
  CHECK((*replay)->index_status() == IndexStatus::kOk);
}

TEST_CASE("stale_index_discovers_durable_tail_without_truncating", "[log][index]") {
  TempDir dir;
  WriteLog(dir.flow(), 20, 1 << 20);  // one segment
  const std::string index_path = dir.flow() + "/" + IndexFileName(0);
  const std::string segment_path = dir.flow() + "/" + SegmentFileName(0);
  // The index lags the frames: as after a crash between fdatasync and publishing index entries.
  std::filesystem::resize_file(index_path, kIndexHeaderBytes + 12 * kIndexEntryBytes);
  const auto segment_before = ReadFileBytes(segment_path);
  auto device = RealDevice();

  auto scan = ScanLog(*device, dir.flow(), ScanOptions{});
  REQUIRE(scan.ok());
  CHECK(scan->index_status() == IndexStatus::kStale);
  CHECK(scan->last_valid_offset() == std::optional<uint64_t>(19));
  CHECK(scan->torn_tail_bytes() == 0);
  // Readers see only what the index publishes until recovery has made the tail durable.
  {
    auto reader = LogReader::Open(*device, dir.flow());
    REQUIRE(reader.ok());
    uint64_t seen = 0;
    for (;;) {
      auto r = (*reader)->Next();
      REQUIRE(r.ok());
      if (!r->has_value()) break;
      seen += 1;
    }
    CHECK(seen == 12);
  }
  RecoveryReport report;
  {
    auto writer = LogWriter::Open(*device, dir.flow(), WriterOptions{}, &report);
    REQUIRE(writer.ok());
    CHECK(report.index_found == IndexStatus::kStale);
    CHECK(report.index_status == IndexStatus::kRebuilt);
    CHECK(report.torn_tail_bytes == 0);
    CHECK(report.last_valid_offset == std::optional<uint64_t>(19));
    CHECK(report.next_offset == 20);
    CHECK((*writer)->durable_tail().commit_lsn == TestRecordCommitLsn(19));
  }
  CHECK(ReadFileBytes(segment_path) == segment_before);  // nothing truncated
  CHECK(std::filesystem::file_size(index_path) == kIndexHeaderBytes + 20 * kIndexEntryBytes);
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Seek(19).ok());
  auto last = (*reader)->Next();
  REQUIRE(last.ok());
  REQUIRE(last->has_value());
  CHECK(TestRecordMatches(11, 19, (*last)->payload));
}

TEST_CASE("inspect_reports_corrupt_index_rebuild", "[log][index]") {
  TempDir dir;
  WriteLog(dir.flow(), 30, 1 << 20);
  const std::string index_path = dir.flow() + "/" + IndexFileName(0);
  auto index = ReadFileBytes(index_path);
  index[kIndexHeaderBytes + 5 * kIndexEntryBytes + 9] ^= 0x40;  // entry 5, position field
  WriteFileBytes(index_path, index);

  auto found = RunTrellaraJson({"log", "inspect", "--dir", dir.flow(), "--format", "json"});
  CHECK(found["index_status"] == "corrupt");
  CHECK(found["records"] == 30);
  CHECK(found["first_offset"] == 0);
  CHECK(found["last_valid_offset"] == 29);
  CHECK(found["torn_tail_bytes"] == 0);
  CHECK(found["segments"] == 1);
  CHECK(found["consumers"].is_object());
  CHECK(ReadFileBytes(index_path) == index);  // plain inspection never writes

  auto repaired = RunTrellaraJson({"log", "inspect", "--dir", dir.flow(), "--repair-index", "--format", "json"});
  CHECK(repaired["index_status"] == "rebuilt");
  CHECK(repaired["index_found"] == "corrupt");
  CHECK(repaired["last_valid_offset"] == 29);

  auto after = RunTrellaraJson({"log", "inspect", "--dir", dir.flow(), "--format", "json"});
  CHECK(after["index_status"] == "ok");
  auto verify = RunTrellaraJson({"log", "verify-test", "--dir", dir.flow(), "--seed", "11", "--format", "json"});
  CHECK(verify["records"] == 30);
  CHECK(verify["mismatches"] == 0);
}

TEST_CASE("inspect_reports_torn_tail_bytes_before_recovery_append", "[log][index]") {
  TempDir dir;
  WriteLog(dir.flow(), 10, 1 << 20);
  const std::string segment_path = dir.flow() + "/" + SegmentFileName(0);
  auto segment = ReadFileBytes(segment_path);
  const size_t clean_size = segment.size();
  // A torn write: the first 57 bytes of a frame for offset 10 that never became durable.
  std::vector<uint8_t> payload = MakeTestRecord(11, 10, 200);
  std::vector<uint8_t> frame(kFrameHeaderBytes + payload.size());
  EncodeFrame(static_cast<uint8_t>(RecordType::Test), 10, TestRecordCommitLsn(10), 10, payload, frame.data());
  segment.insert(segment.end(), frame.begin(), frame.begin() + 57);
  WriteFileBytes(segment_path, segment);

  auto before = RunTrellaraJson({"log", "inspect", "--dir", dir.flow(), "--format", "json"});
  CHECK(before["torn_tail_bytes"] == 57);
  CHECK(before["last_valid_offset"] == 9);
  CHECK(before["records"] == 10);
  CHECK(before["index_status"] == "ok");
  CHECK(before["corruption"].is_null());
  CHECK(std::filesystem::file_size(segment_path) == clean_size + 57);  // inspection did not truncate

  auto appended = RunTrellara({"log", "write-test", "--dir", dir.flow(), "--records", "3", "--record-bytes", "200",
                               "--seed", "11"});
  REQUIRE(appended.exit_code == 0);
  CHECK(appended.out == "acked 10\nacked 11\nacked 12\n");  // resumes at the next offset

  auto after = RunTrellaraJson({"log", "inspect", "--dir", dir.flow(), "--format", "json"});
  CHECK(after["torn_tail_bytes"] == 0);
  CHECK(after["last_valid_offset"] == 12);
  auto verify = RunTrellaraJson({"log", "verify-test", "--dir", dir.flow(), "--seed", "11", "--format", "json"});
  CHECK(verify["records"] == 13);
  CHECK(verify["mismatches"] == 0);
}

// The paired defect of local_stream_index_rebuild (docs/correctness.md): a scan that reads past an
// invalid frame (defect.log_read_past_invalid_frame, core/src/log/scan.cpp) indexes it under its
// header's word and resynchronises on the next frame magic. The clean checks of
// inspect_reports_torn_tail_bytes_before_recovery_append (57 torn bytes, last valid offset 9, the
// next append acknowledged at offset 10) fail: the torn write becomes durable offset 10 and the
// recovered writer appends after it. Rebuilding a missing index over a damaged frame then indexes
// the records after the hole as durable instead of refusing the log.
TEST_CASE("torn_tail_indexed_as_durable_by_a_scan_reading_past_an_invalid_frame_negative_control", "[log][index]") {
  namespace fault = trellara::fault;
  TempDir torn_dir, hole_dir;
  // The clean test's torn tail: 57 bytes of a frame for offset 10 that never became durable.
  WriteLog(torn_dir.flow(), 10, 1 << 20);
  const std::string segment_path = torn_dir.flow() + "/" + SegmentFileName(0);
  auto segment = ReadFileBytes(segment_path);
  std::vector<uint8_t> payload = MakeTestRecord(11, 10, 200);
  std::vector<uint8_t> frame(kFrameHeaderBytes + payload.size());
  EncodeFrame(static_cast<uint8_t>(RecordType::Test), 10, TestRecordCommitLsn(10), 10, payload, frame.data());
  segment.insert(segment.end(), frame.begin(), frame.begin() + 57);
  WriteFileBytes(segment_path, segment);
  // A hole: frame 5 of 10 damaged (one payload bit), the index gone so it must be rebuilt.
  WriteLog(hole_dir.flow(), 10, 1 << 20);
  const std::string hole_segment = hole_dir.flow() + "/" + SegmentFileName(0);
  uint64_t hole_position = 0;
  {
    auto device = RealDevice();
    auto index = ReadIndexFile(*device, hole_dir.flow(), 0);
    REQUIRE(index.ok());
    REQUIRE(index->entries.size() == 10);
    hole_position = index->entries[5].position;
  }
  auto hole_bytes = ReadFileBytes(hole_segment);
  hole_bytes[hole_position + kFrameHeaderBytes + 77] ^= 0x04;
  WriteFileBytes(hole_segment, hole_bytes);
  REQUIRE(std::filesystem::remove(hole_dir.flow() + "/" + IndexFileName(0)));

  fault::AllowDefects(true, "unit test");  // defects need the explicit test-only switch (fault.h)
  REQUIRE(fault::Configure("defect.log_read_past_invalid_frame:1:defect").ok());
  auto device = RealDevice();
  auto torn_scan = ScanLog(*device, torn_dir.flow(), ScanOptions{});
  RecoveryReport torn_report;
  std::optional<uint64_t> appended_at;
  {
    auto writer = LogWriter::Open(*device, torn_dir.flow(), WriterOptions{}, &torn_report);
    if (writer.ok()) {
      auto appended = (*writer)->Append(static_cast<uint8_t>(RecordType::Test), TestRecordCommitLsn(11),
                                        MakeTestRecord(11, 11, 200));
      if (appended.ok() && (*writer)->Flush().ok()) appended_at = *appended;
    }
  }
  auto hole_scan = ScanLog(*device, hole_dir.flow(), ScanOptions{});
  RecoveryReport hole_report;
  const bool hole_opened = LogWriter::Open(*device, hole_dir.flow(), WriterOptions{}, &hole_report).ok();
  const int fired = fault::FiredCount("defect.log_read_past_invalid_frame");
  fault::Clear();
  fault::AllowDefects(false, "");
  INFO("harness failure, not a caught defect, when defect.log_read_past_invalid_frame never fired");
  REQUIRE(fired > 0);
  REQUIRE(torn_scan.ok());
  REQUIRE(hole_scan.ok());

  // What the clean test asserts, caught failing under the defect.
  CHECK(torn_scan->torn_tail_bytes() == 0);                                 // clean: 57
  CHECK(torn_scan->last_valid_offset() == std::optional<uint64_t>(10));     // clean: 9
  CHECK(torn_report.next_offset == 11);                                     // clean: 10
  CHECK(appended_at == std::optional<uint64_t>(11));                        // clean: acked 10
  // Offset 10 is now published by the index although its frame never became durable.
  auto reader = LogReader::Open(*device, torn_dir.flow());
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Seek(10).ok());
  auto torn_record = (*reader)->Next();
  CHECK((!torn_record.ok() || !torn_record->has_value() || !TestRecordMatches(11, 10, (*torn_record)->payload)));

  // The hole: no corruption reported, the records after it indexed as durable.
  CHECK_FALSE(hole_scan->corruption().has_value());                         // clean: corruption at offset 5
  CHECK(hole_scan->last_valid_offset() == std::optional<uint64_t>(9));      // clean: 4
  CHECK(hole_opened);                                                       // clean: recovery refuses the log
  CHECK(hole_report.next_offset == 10);
  std::cout << "negative control (scan reads past an invalid frame): torn tail of 57 bytes indexed as offset "
            << (torn_scan->last_valid_offset() ? std::to_string(*torn_scan->last_valid_offset()) : "none")
            << ", next append at " << (appended_at ? std::to_string(*appended_at) : "none")
            << "; a damaged frame at offset 5 rebuilt into the index with "
            << (hole_scan->last_valid_offset() ? std::to_string(*hole_scan->last_valid_offset() + 1) : "0")
            << " records and " << (hole_opened ? "accepted by recovery" : "refused by recovery") << "\n";
}

TEST_CASE("a_reader_at_the_end_waits_for_a_successor_segment_being_created", "[log][index]") {
  // The writer creates a new segment's file, then its index file, then writes the index header
  // (LogWriter::StartSegment). A reader that finishes the previous segment in between must see
  // "nothing new yet", not a damaged index of the active segment (a daemon applier once stopped on
  // "index ... of the active segment is corrupt (... shorter than its header)").
  TempDir dir;
  WriteLog(dir.flow(), 40);  // segments at 0, 8, 16, 24, 32: offsets 32..39 in the last one
  const std::string segment = dir.flow() + "/" + SegmentFileName(40);
  const std::string index = dir.flow() + "/" + IndexFileName(40);
  auto device = RealDevice();
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Seek(32).ok());
  for (uint64_t offset = 32; offset < 40; offset++) {
    auto r = (*reader)->Next();
    REQUIRE(r.ok());
    REQUIRE(r->has_value());
    CHECK((*r)->offset == offset);
  }
  auto at_end = [&](const char* when) {
    INFO(when);
    auto r = (*reader)->Next();
    INFO((r.ok() ? std::string() : r.error().message));
    REQUIRE(r.ok());
    CHECK_FALSE(r->has_value());
  };
  // 1. The segment file exists, its index not yet.
  { std::ofstream(segment, std::ios::binary); }
  at_end("segment created, no index");
  // 2. The index exists, empty.
  { std::ofstream(index, std::ios::binary); }
  at_end("index created, no header");
  // 3. Half a header.
  uint8_t header[kIndexHeaderBytes];
  EncodeIndexHeader(40, header);
  {
    std::ofstream out(index, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header), sizeof header / 2);
  }
  at_end("half a header");
  // 4. The whole header, no entry yet: the segment is loaded and holds nothing yet.
  {
    std::ofstream out(index, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header), sizeof header);
  }
  at_end("header written");
}

TEST_CASE("an_active_segment_with_bytes_but_no_index_header_is_still_reported", "[log][index]") {
  // The wait above is only for an empty segment: bytes in the active segment with its index missing
  // or headerless are damage, reported as before.
  TempDir dir;
  WriteLog(dir.flow(), 40);
  auto device = RealDevice();
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Seek(39).ok());
  auto last = (*reader)->Next();
  REQUIRE(last.ok());
  REQUIRE(last->has_value());
  {
    std::ofstream out(dir.flow() + "/" + SegmentFileName(40), std::ios::binary);
    out << std::string(64, 'x');
  }
  { std::ofstream(dir.flow() + "/" + IndexFileName(40), std::ios::binary); }
  auto r = (*reader)->Next();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("of the active segment is corrupt") != std::string::npos);
}

}  // namespace unit_log_index_test
