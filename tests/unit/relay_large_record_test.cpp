// relay_large_record_test.cpp — records larger than a log segment (a single large value travels
// alone in one record, up to the 1 GiB frame limit): the writer gives such a frame a segment of
// its own, the offsets stay contiguous, recovery reopens the log, and a reader returns it whole.
#include <catch2/catch.hpp>

#include "log_support/log_test_support.h"
#include "trellara/log/reader.h"
#include "trellara/log/simulated_device.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_relay_large_record_test {

using namespace trellara;
using namespace trellara::log;
using namespace trellara::log::testing;

TEST_CASE("frame_larger_than_a_segment_gets_a_segment_of_its_own", "[relay][log][large]") {
  SimulatedDevice device(SimulatedDeviceOptions{7, false});
  const std::string dir = "/flow";
  WriterOptions options;
  options.segment_bytes_max = 4096;
  const std::vector<size_t> sizes = {300, 20000, 300, 300, 9000};
  {
    auto writer = LogWriter::Open(device, dir, options);
    REQUIRE(writer.ok());
    for (size_t i = 0; i < sizes.size(); i++) {
      const uint64_t offset = (*writer)->next_offset();
      CHECK((*writer)->WouldRollSegment(sizes[i]) == (offset > 0 && (sizes[i] > 4000 || sizes[i - 1] > 4000)));
      REQUIRE((*writer)->Append(static_cast<uint8_t>(RecordType::Test), TestRecordCommitLsn(offset),
                                MakeTestRecord(1, offset, sizes[i])).ok());
    }
    REQUIRE((*writer)->Flush().ok());
    CHECK((*writer)->durable_end() == sizes.size());
  }
  // Reopen (recovery) and read everything back.
  auto writer = LogWriter::Open(device, dir, options);
  REQUIRE(writer.ok());
  CHECK((*writer)->next_offset() == sizes.size());
  auto reader = LogReader::Open(device, dir);
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Seek(0).ok());
  for (size_t i = 0; i < sizes.size(); i++) {
    auto rec = (*reader)->Next();
    REQUIRE(rec.ok());
    REQUIRE(rec->has_value());
    CHECK((*rec)->offset == i);
    CHECK((*rec)->payload.size() == sizes[i]);
    CHECK((*rec)->payload == MakeTestRecord(1, i, sizes[i]));
  }
  // Oversized frames sit alone: segments start at 0, 1, 2 and 4.
  for (uint64_t first : {0, 1, 2, 4}) CHECK(device.DurableFileBytes(dir + "/" + SegmentFileName(first)));
}

TEST_CASE("frame_limit_is_one_gib", "[relay][log][large]") {
  CHECK(kPayloadBytesMax == (1u << 30));
  uint8_t header[kFrameHeaderBytes];
  std::vector<uint8_t> none;
  EncodeFrame(1, 0, 0, 0, std::span<const uint8_t>(none.data(), 0), header);
  header[8] = 0; header[9] = 0; header[10] = 0; header[11] = 0x40;  // payload_bytes = 1 GiB
  auto ok = DecodeFrameHeader(header);
  REQUIRE(ok);
  CHECK(ok->payload_bytes == (1u << 30));
  header[8] = 1;  // 1 GiB + 1
  CHECK_FALSE(DecodeFrameHeader(header));
}

}  // namespace unit_relay_large_record_test
