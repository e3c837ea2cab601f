// log_consumer_test.cpp — consumer offset files are replaced atomically and survive power loss
// once written; retention deletes only segments wholly below every registered consumer.
#include <catch2/catch.hpp>

#include "log_support/log_test_support.h"
#include <unistd.h>

#include <filesystem>
#include <cstdlib>

#include "trellara/log/consumer_lock.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/uring_device.h"
#include "trellara/log/reader.h"
#include "trellara/log/scan.h"
#include "trellara/log/simulated_device.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_log_consumer_test {

using namespace trellara::log;
using namespace trellara::log::testing;

TEST_CASE("consumer_offset_is_replaced_atomically", "[log][consumer]") {
  SimulatedDevice device(SimulatedDeviceOptions{77, false});
  const std::string dir = "/flow";
  {
    auto writer = LogWriter::Open(device, dir, WriterOptions{});
    REQUIRE(writer.ok());
  }
  REQUIRE(WriteConsumerOffset(device, dir, "applier", 10).ok());
  REQUIRE(WriteConsumerOffset(device, dir, "applier", 25).ok());
  // A crash after writing a temporary file and before the rename leaves the old offset in force.
  auto tmp = device.OpenFile(dir + "/consumers/.applier.tmp", true);
  REQUIRE(tmp.ok());
  REQUIRE(device.WriteAt(*tmp, 0, "garbage", 7).ok());
  device.CloseFile(*tmp);
  device.PowerLoss();
  auto offsets = ReadConsumerOffsets(device, dir);
  REQUIRE(offsets.ok());
  REQUIRE(offsets->size() == 1);
  CHECK(offsets->at("applier") == 25);

  CHECK_FALSE(WriteConsumerOffset(device, dir, "../etc", 1).ok());
  CHECK_FALSE(WriteConsumerOffset(device, dir, ".hidden", 1).ok());
  // A damaged file is reported, not read as some offset.
  auto file = device.OpenFile(dir + "/consumers/applier", false);
  REQUIRE(file.ok());
  REQUIRE(device.WriteAt(*file, 40, "9", 1).ok());
  device.CloseFile(*file);
  auto damaged = ReadConsumerOffsets(device, dir);
  REQUIRE_FALSE(damaged.ok());
  CHECK_THAT(damaged.error().message, Catch::Contains("consumers/applier") && Catch::Contains("damaged"));
}

TEST_CASE("reclaim_deletes_only_segments_below_minimum_consumer_offset", "[log][consumer]") {
  TempDir dir;
  auto device = RealDevice();
  WriterOptions options;
  options.segment_bytes_max = 2048;  // 8 frames of 240 bytes per segment
  auto writer = LogWriter::Open(*device, dir.flow(), options);
  REQUIRE(writer.ok());
  AppendTestRecords(**writer, 8, 50, 200, 10);
  auto segments = ListSegments(*device, dir.flow());
  REQUIRE(segments.ok());
  REQUIRE(*segments == std::vector<uint64_t>{0, 8, 16, 24, 32, 40, 48});

  // No registered consumer: nothing is reclaimed.
  auto none = (*writer)->ReclaimSegments();
  REQUIRE(none.ok());
  CHECK(*none == 0);

  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "fast", 40).ok());
  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "slow", 16).ok());  // needs offset 16 onwards
  auto reclaimed = ReclaimSegments(*device, dir.flow());
  REQUIRE(reclaimed.ok());
  CHECK(reclaimed->segments_deleted == 2);  // [0,8) and [8,16): wholly below 16
  CHECK(reclaimed->retained_from_offset == 16);
  segments = ListSegments(*device, dir.flow());
  REQUIRE(segments.ok());
  CHECK(*segments == std::vector<uint64_t>{16, 24, 32, 40, 48});
  CHECK_FALSE(std::filesystem::exists(dir.flow() + "/" + IndexFileName(8)));

  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "slow", 23).ok());  // 23 is inside [16,24)
  reclaimed = ReclaimSegments(*device, dir.flow());
  REQUIRE(reclaimed.ok());
  CHECK(reclaimed->segments_deleted == 0);

  // Even when every consumer is past everything, the active segment stays.
  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "slow", 50).ok());
  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "fast", 50).ok());
  reclaimed = ReclaimSegments(*device, dir.flow());
  REQUIRE(reclaimed.ok());
  segments = ListSegments(*device, dir.flow());
  REQUIRE(segments.ok());
  CHECK(*segments == std::vector<uint64_t>{48});

  // Reclaimed offsets are refused by name; the rest replays; appending continues.
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  auto seek = (*reader)->Seek(3);
  REQUIRE_FALSE(seek.ok());
  CHECK_THAT(seek.error().message, Catch::Contains("reclaimed"));
  REQUIRE((*reader)->Seek(49).ok());
  auto record = (*reader)->Next();
  REQUIRE(record.ok());
  REQUIRE(record->has_value());
  CHECK((*record)->offset == 49);
  AppendTestRecords(**writer, 8, 1, 200, 1);
  CHECK((*writer)->durable_end() == 51);
}

TEST_CASE("one_process_per_consumer_through_the_directory_lock", "[log][consumer]") {
  char tmpl[] = "/tmp/trellara-lock-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  {
    auto first = ConsumerLock::Acquire(dir, "applier");
    REQUIRE(first.ok());
    CHECK((*first)->path() == dir + "/consumers/.applier.lock");
    // flock conflicts between open file descriptions, so a second open in this process stands in
    // for a second process.
    bool held = false;
    auto second = ConsumerLock::Acquire(dir, "applier", &held);
    REQUIRE_FALSE(second.ok());
    CHECK(held);
    CHECK_THAT(second.error().message, Catch::Contains("consumer applier of " + dir + " is held by another process") &&
                                           Catch::Contains("(pid " + std::to_string(::getpid()) + ")") &&
                                           Catch::Contains(".applier.lock"));
    // Another consumer of the same log is independent.
    CHECK(ConsumerLock::Acquire(dir, "audit").ok());
    // The lock file is not a consumer offset.
    auto device = OpenUringDevice();
    REQUIRE(device.ok());
    auto offsets = ReadConsumerOffsets(**device, dir);
    REQUIRE(offsets.ok());
    CHECK(offsets->empty());
  }
  // Released with its holder: the next one gets it.
  CHECK(ConsumerLock::Acquire(dir, "applier").ok());
  CHECK_FALSE(ConsumerLock::Acquire(dir, "../x").ok());
  // A log directory that does not exist (yet) is not "held by another process".
  bool held = true;
  auto missing = ConsumerLock::Acquire(dir + "/not-created-yet", "applier", &held);
  REQUIRE_FALSE(missing.ok());
  CHECK_FALSE(held);
  CHECK_THAT(missing.error().message, Catch::Contains("not-created-yet/consumers") && Catch::Contains("No such file"));
  std::filesystem::remove_all(dir);
}

}  // namespace unit_log_consumer_test
