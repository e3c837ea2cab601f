// log_corruption_test.cpp — a bad frame in the middle of the log is corruption: recovery refuses
// to open, inspect and readers report segment, position and offset, and nothing after it is ever
// read or truncated. Must fail if any code path skips past a bad frame.
#include <catch2/catch.hpp>

#include "log_support/log_test_support.h"
#include "trellara/log/reader.h"
#include "trellara/log/scan.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_log_corruption_test {

using namespace trellara::log;
using namespace trellara::log::testing;

namespace {

struct FlippedLog {
  uint64_t position = 0;
  size_t segment_bytes = 0;
};

// 100 records of 200 bytes in one segment (flushed in groups of 10), then one payload bit of
// `offset` flipped. Optionally deletes the index (so only frame evidence remains).
FlippedLog WriteAndFlip(const std::string& dir, uint64_t offset, bool delete_index, uint64_t flush_every = 10) {
  {
    auto device = RealDevice();
    auto writer = LogWriter::Open(*device, dir, WriterOptions{});
    REQUIRE(writer.ok());
    AppendTestRecords(**writer, 21, 100, 200, flush_every);
  }
  auto device = RealDevice();
  auto index = ReadIndexFile(*device, dir, 0);
  REQUIRE(index.ok());
  REQUIRE(index->entries.size() == 100);
  FlippedLog flipped;
  flipped.position = index->entries[offset].position;
  const std::string segment_path = dir + "/" + SegmentFileName(0);
  auto bytes = ReadFileBytes(segment_path);
  bytes[flipped.position + kFrameHeaderBytes + 77] ^= 0x04;
  WriteFileBytes(segment_path, bytes);
  flipped.segment_bytes = bytes.size();
  if (delete_index) REQUIRE(std::filesystem::remove(dir + "/" + IndexFileName(0)));
  return flipped;
}

// `open_refused`: recovery reads frames only after the last index entry (its fast path), so a flip
// in an already-indexed frame is found by readers and inspect, and by recovery when it scans.
void RequireCorruptionReported(const std::string& dir, const FlippedLog& flipped, uint64_t offset, bool open_refused) {
  auto device = RealDevice();
  const std::string position = "position " + std::to_string(flipped.position);
  const std::string offset_text = "offset " + std::to_string(offset);

  auto scan = ScanLog(*device, dir, ScanOptions{});
  REQUIRE(scan.ok());
  auto corruption = scan->corruption();
  REQUIRE(corruption);
  CHECK_THAT(*corruption, Catch::Contains(SegmentFileName(0)) && Catch::Contains(position) &&
                              Catch::Contains(offset_text));
  CHECK(scan->torn_tail_bytes() == 0);  // corruption is never reported as a torn tail
  CHECK(scan->last_valid_offset() == std::optional<uint64_t>(offset - 1));

  if (open_refused) {
    auto writer = LogWriter::Open(*device, dir, WriterOptions{});
    REQUIRE_FALSE(writer.ok());
    CHECK_THAT(writer.error().message, Catch::Contains(position) && Catch::Contains(offset_text));
    CHECK(std::filesystem::file_size(dir + "/" + SegmentFileName(0)) == flipped.segment_bytes);  // not truncated
  }

  auto inspect = RunTrellaraJson({"log", "inspect", "--dir", dir, "--format", "json"}, 3);
  CHECK(inspect["last_valid_offset"] == offset - 1);
  CHECK(inspect["torn_tail_bytes"] == 0);
  CHECK_THAT(inspect["corruption"].get<std::string>(), Catch::Contains(offset_text));
}

}  // namespace

TEST_CASE("mid_log_bit_flip_is_reported_as_corruption_and_never_skipped", "[log][corruption]") {
  TempDir dir;
  auto flipped = WriteAndFlip(dir.flow(), 50, false);
  RequireCorruptionReported(dir.flow(), flipped, 50, false);
  // A reader returns offsets 0..49, then an error naming the bad frame; never offset 51.
  auto device = RealDevice();
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  uint64_t read = 0;
  std::string error;
  for (int i = 0; i < 200; ++i) {
    auto record = (*reader)->Next();
    if (!record.ok()) {
      error = record.error().message;
      break;
    }
    REQUIRE(record->has_value());
    REQUIRE((*record)->offset == read);
    read += 1;
  }
  CHECK(read == 50);
  CHECK_THAT(error, Catch::Contains("offset 50") && Catch::Contains("CRC32C"));
  // Asking again does not move past it either.
  auto again = (*reader)->Next();
  CHECK_FALSE(again.ok());
  CHECK((*reader)->next_offset() == 50);
}

TEST_CASE("mid_log_bit_flip_without_index_is_still_corruption", "[log][corruption]") {
  // With the index gone, the evidence is the later frames: they were written after offset 50 was
  // durable (durable_end_at_write), so offset 50 cannot be a torn write.
  TempDir dir;
  auto flipped = WriteAndFlip(dir.flow(), 50, true);
  RequireCorruptionReported(dir.flow(), flipped, 50, true);
}

TEST_CASE("bit_flip_in_sealed_segment_is_corruption", "[log][corruption]") {
  TempDir dir;
  {
    auto device = RealDevice();
    WriterOptions options;
    options.segment_bytes_max = 2048;
    auto writer = LogWriter::Open(*device, dir.flow(), options);
    REQUIRE(writer.ok());
    AppendTestRecords(**writer, 21, 30, 200, 30);  // one group; 8 frames of 240 bytes per segment
  }
  // The last record of the first segment: at the segment's end, yet not a torn tail.
  const std::string segment_path = dir.flow() + "/" + SegmentFileName(0);
  auto bytes = ReadFileBytes(segment_path);
  bytes[bytes.size() - 3] ^= 0x01;
  WriteFileBytes(segment_path, bytes);
  std::filesystem::remove(dir.flow() + "/" + IndexFileName(0));
  auto device = RealDevice();
  auto writer = LogWriter::Open(*device, dir.flow(), WriterOptions{2048});
  REQUIRE_FALSE(writer.ok());
  CHECK_THAT(writer.error().message, Catch::Contains("offset 7") && Catch::Contains("not in the last segment"));
}

}  // namespace unit_log_corruption_test
