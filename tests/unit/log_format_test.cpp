// log_format_test.cpp — frame and index encoding, file names, and offset monotonicity across
// segment rollover and reopen. Must fail if a frame's CRC stops covering any header field.
#include <catch2/catch.hpp>

#include "log_support/log_test_support.h"
#include "trellara/log/format.h"
#include "trellara/log/reader.h"
#include "trellara/log/scan.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_log_format_test {

using namespace trellara::log;
using namespace trellara::log::testing;

TEST_CASE("log_frame_round_trips_and_crc_covers_every_header_field", "[log]") {
  std::vector<uint8_t> payload = MakeTestRecord(9, 42, 100);
  std::vector<uint8_t> frame(kFrameHeaderBytes + payload.size());
  EncodeFrame(3, 42, 0xABCDEF, 40, payload, frame.data());
  auto header = DecodeFrameHeader(frame.data());
  REQUIRE(header);
  CHECK(header->type == 3);
  CHECK(header->offset == 42);
  CHECK(header->commit_lsn == 0xABCDEF);
  CHECK(header->durable_end_at_write == 40);
  CHECK(header->payload_bytes == payload.size());
  CHECK(FrameCrcMatches(frame.data(), *header, std::span<const uint8_t>(frame.data() + kFrameHeaderBytes, payload.size())));
  // Flip one bit in every byte except the CRC field itself: each flip must be detected.
  for (size_t i = 0; i < frame.size(); ++i) {
    if (i >= 12 && i < 16) continue;
    auto damaged = frame;
    damaged[i] ^= 0x10;
    auto h = DecodeFrameHeader(damaged.data());
    bool detected = !h || h->payload_bytes != payload.size() ||
                    !FrameCrcMatches(damaged.data(), *h, std::span<const uint8_t>(damaged.data() + kFrameHeaderBytes, payload.size()));
    INFO("flipped byte " << i);
    CHECK(detected);
  }
}

TEST_CASE("log_index_entry_and_file_names_round_trip", "[log]") {
  uint8_t bytes[kIndexEntryBytes];
  EncodeIndexEntry(IndexEntry{7, 4096, 99, 1}, bytes);
  auto entry = DecodeIndexEntry(bytes);
  REQUIRE(entry);
  CHECK(entry->offset == 7);
  CHECK(entry->position == 4096);
  CHECK(entry->commit_lsn == 99);
  bytes[9] ^= 1;
  CHECK_FALSE(DecodeIndexEntry(bytes));
  CHECK(SegmentFileName(14) == "segment-00000000000000000014.log");
  CHECK(IndexFileName(14) == "index-00000000000000000014.idx");
  CHECK(ParseSegmentFileName("segment-00000000000000000014.log") == std::optional<uint64_t>(14));
  CHECK_FALSE(ParseSegmentFileName("segment-0000000000000000014.log"));
  CHECK_FALSE(ParseSegmentFileName("segment-0000000000000000001x.log"));
  CHECK_FALSE(ParseIndexFileName("segment-00000000000000000014.log"));
}

TEST_CASE("log_offsets_increase_across_segment_rollover_and_reopen", "[log]") {
  TempDir dir;
  auto device = RealDevice();
  WriterOptions options;
  options.segment_bytes_max = 4096;  // ~12 records of 300 bytes per segment
  uint64_t expected_next = 0;
  for (int round = 0; round < 3; ++round) {
    RecoveryReport report;
    auto writer = LogWriter::Open(*device, dir.flow(), options, &report);
    REQUIRE(writer.ok());
    CHECK(report.next_offset == expected_next);
    CHECK(report.torn_tail_bytes == 0);
    AppendTestRecords(**writer, 5, 40, 300, 7);
    expected_next += 40;
    CHECK((*writer)->durable_end() == expected_next);
    CHECK((*writer)->durable_tail().offset == std::optional<uint64_t>(expected_next - 1));
    CHECK((*writer)->durable_tail().commit_lsn == TestRecordCommitLsn(expected_next - 1));
  }
  auto segments = ListSegments(*device, dir.flow());
  REQUIRE(segments.ok());
  CHECK(segments->size() >= 10);
  for (uint64_t first : *segments) {
    auto file = ReadFileBytes(dir.flow() + "/" + SegmentFileName(first));
    CHECK(file.size() <= 4096);
  }
  // Reading back: every offset once, in order, across all segments.
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  uint64_t next = 0;
  for (;;) {
    auto record = (*reader)->Next();
    REQUIRE(record.ok());
    if (!record->has_value()) break;
    REQUIRE((*record)->offset == next);
    REQUIRE(TestRecordMatches(5, next, (*record)->payload));
    next += 1;
  }
  CHECK(next == expected_next);
  // Seek by offset lands on the right record in a middle segment.
  REQUIRE((*reader)->Seek(57).ok());
  auto record = (*reader)->Next();
  REQUIRE(record.ok());
  REQUIRE(record->has_value());
  CHECK((*record)->offset == 57);
}

TEST_CASE("log_writer_is_exclusive_per_directory", "[log]") {
  TempDir dir;
  auto device = RealDevice();
  auto first = LogWriter::Open(*device, dir.flow(), WriterOptions{});
  REQUIRE(first.ok());
  auto second = LogWriter::Open(*device, dir.flow(), WriterOptions{});
  REQUIRE_FALSE(second.ok());
  CHECK_THAT(second.error().message, Catch::Contains("locked by another writer"));
}

}  // namespace unit_log_format_test
