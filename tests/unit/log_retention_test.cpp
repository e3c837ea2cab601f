// log_retention_test.cpp — the retention decision (PlanRetention) and its execution: which
// segments go, never the active one, never past the slowest live consumer, nothing without a
// consumer, and the ceiling deletes what a consumer needs only after marking it lost durably; a
// lost consumer is refused at registration with the reseed remedy; unregistering releases.
#include <catch2/catch.hpp>

#include "log_support/log_test_support.h"
#include "trellara/base/fault.h"
#include "trellara/log/consumer_lock.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/reader.h"
#include "trellara/log/retention.h"
#include "trellara/log/simulated_device.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_log_retention_test {

using namespace trellara::log;
using namespace trellara::log::testing;

namespace {

// Five segments of 100 bytes holding offsets [0,10) [10,20) [20,30) [30,40) [40,...) (active).
std::vector<SegmentSize> FiveSegments() { return {{0, 100}, {10, 100}, {20, 100}, {30, 100}, {40, 100}}; }

}  // namespace

TEST_CASE("retention_deletes_nothing_without_a_registered_consumer", "[log][retention]") {
  RetentionPlan plan = PlanRetention(FiveSegments(), {}, 0);
  CHECK(plan.delete_segments.empty());
  CHECK(plan.retained_from_offset == 0);
}

TEST_CASE("retention_deletes_only_segments_wholly_below_the_slowest_consumer", "[log][retention]") {
  std::map<std::string, ConsumerState> consumers{{"fast", {45}}, {"slow", {25}}};
  RetentionPlan plan = PlanRetention(FiveSegments(), consumers, 0);
  // Segment [20,30) holds offset 25, which "slow" still needs: kept.
  CHECK(plan.delete_segments == std::vector<uint64_t>{0, 10});
  CHECK(plan.retained_from_offset == 20);
  CHECK(plan.bytes_deleted == 200);
  CHECK(plan.mark_lost.empty());
  // Exactly at a segment boundary: the segment ending there is no longer needed.
  consumers["slow"].next_offset = 30;
  CHECK(PlanRetention(FiveSegments(), consumers, 0).delete_segments == std::vector<uint64_t>{0, 10, 20});
}

TEST_CASE("retention_never_deletes_the_active_segment", "[log][retention]") {
  std::map<std::string, ConsumerState> consumers{{"applier", {1000}}};
  RetentionPlan plan = PlanRetention(FiveSegments(), consumers, 0);
  CHECK(plan.delete_segments == std::vector<uint64_t>{0, 10, 20, 30});
  CHECK(plan.retained_from_offset == 40);
  CHECK(PlanRetention({{0, 100}}, consumers, 1).delete_segments.empty());  // even over a ceiling
}

TEST_CASE("retention_ceiling_marks_the_consumer_it_overtakes_lost", "[log][retention]") {
  std::map<std::string, ConsumerState> consumers{{"fast", {45}}, {"slow", {5}}};
  // Without a ceiling the slow consumer holds everything.
  CHECK(PlanRetention(FiveSegments(), consumers, 0).delete_segments.empty());
  // Ceiling 250 bytes: three segments must go; "slow" needs them, "fast" does not.
  RetentionPlan plan = PlanRetention(FiveSegments(), consumers, 250);
  CHECK(plan.delete_segments == std::vector<uint64_t>{0, 10, 20});
  CHECK(plan.mark_lost == std::vector<std::string>{"slow"});
  CHECK(plan.retained_from_offset == 30);
  // Under the ceiling nobody is marked lost.
  CHECK(PlanRetention(FiveSegments(), consumers, 500).mark_lost.empty());
  // A lost consumer holds nothing: the live one decides.
  consumers["slow"].lost = true;
  CHECK(PlanRetention(FiveSegments(), consumers, 0).delete_segments == std::vector<uint64_t>{0, 10, 20, 30});
  // Only lost consumers: nothing is deleted except by the ceiling.
  std::map<std::string, ConsumerState> only_lost{{"slow", {5, true}}};
  CHECK(PlanRetention(FiveSegments(), only_lost, 0).delete_segments.empty());
  CHECK(PlanRetention(FiveSegments(), only_lost, 250).mark_lost.empty());
}

TEST_CASE("retention_ceiling_applies_without_consumers_marking_nobody", "[log][retention]") {
  RetentionPlan plan = PlanRetention(FiveSegments(), {}, 300);
  CHECK(plan.delete_segments == std::vector<uint64_t>{0, 10});
  CHECK(plan.mark_lost.empty());
}

TEST_CASE("apply_retention_marks_lost_before_deleting_and_applier_registration_refuses", "[log][retention]") {
  TempDir dir;
  auto device = RealDevice();
  WriterOptions options;
  options.segment_bytes_max = 2048;  // 8 frames of 240 bytes per segment
  auto writer = LogWriter::Open(*device, dir.flow(), options);
  REQUIRE(writer.ok());
  AppendTestRecords(**writer, 8, 50, 200, 10);  // 50 records: segments 0, 8, 16, 24, 32, 40, 48
  auto segments = ListSegmentSizes(*device, dir.flow());
  REQUIRE(segments.ok());
  REQUIRE(segments->size() == 7);

  // A missing directory is named, with where it comes from.
  trellara::Status no_dir = RegisterConsumer(*device, dir.flow() + "-missing", "applier");
  REQUIRE_FALSE(no_dir.ok());
  CHECK_THAT(no_dir.error().message, Catch::Contains("does not exist") && Catch::Contains("create_flow"));
  // Registration of a new consumer: at the log's first offset; nothing is deleted before it.
  auto report = ApplyRetention(*device, dir.flow(), 0);
  REQUIRE(report.ok());
  CHECK(report->segments_deleted == 0);
  REQUIRE(RegisterConsumer(*device, dir.flow(), "applier").ok());
  CHECK(ReadConsumerOffsets(*device, dir.flow())->at("applier") == 0);
  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "applier", 20).ok());
  REQUIRE(RegisterConsumer(*device, dir.flow(), "applier").ok());  // existing: unchanged
  CHECK(ReadConsumerOffsets(*device, dir.flow())->at("applier") == 20);

  report = ApplyRetention(*device, dir.flow(), 0);
  REQUIRE(report.ok());
  CHECK(report->segments_deleted == 2);  // [0,8) [8,16); [16,24) holds offset 20
  CHECK(report->retained_from_offset == 16);
  CHECK(report->marked_lost.empty());

  // A second consumer far behind would have kept them; add one at 16 and a ceiling of 3 segments.
  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "audit", 16).ok());
  auto status = DescribeRetention(*device, dir.flow());
  REQUIRE(status.ok());
  CHECK(status->held_by == "audit");
  CHECK(status->segments == 5);
  const uint64_t ceiling = 3 * 1920 + 100;  // three full segments of 8 x 240 bytes
  report = ApplyRetention(*device, dir.flow(), ceiling);
  REQUIRE(report.ok());
  CHECK(report->segments_deleted == 2);  // [16,24) and [24,32)
  CHECK(report->marked_lost == std::vector<std::string>{"applier", "audit"});
  auto states = ReadConsumerStates(*device, dir.flow());
  REQUIRE(states.ok());
  CHECK(states->at("audit").lost);
  CHECK(states->at("audit").lost_at_offset == 32);
  // The lost consumer's applier refuses to continue and says to reseed.
  trellara::Status refused = RegisterConsumer(*device, dir.flow(), "audit");
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("marked lost") && Catch::Contains("reseed") &&
                                          Catch::Contains("unregister-consumer audit"));
  // Removing its offset file by hand does not clear the mark either.
  const std::string audit_offset_file = dir.flow() + "/consumers/audit";
  REQUIRE(std::filesystem::remove(audit_offset_file));
  CHECK_FALSE(RegisterConsumer(*device, dir.flow(), "audit").ok());
  // The applier's offset writes never erase the mark.
  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "audit", 40).ok());
  CHECK(ReadConsumerStates(*device, dir.flow())->at("audit").lost);

  // Unregister refuses while the consumer runs, then releases.
  {
    auto lock = ConsumerLock::Acquire(dir.flow(), "audit");
    REQUIRE(lock.ok());
    auto busy = UnregisterConsumer(*device, dir.flow(), "audit");
    REQUIRE_FALSE(busy.ok());
    CHECK_THAT(busy.error().message, Catch::Contains("stop that applier first") &&
                                         Catch::Contains("pid " + std::to_string(::getpid())));
    CHECK(DescribeRetention(*device, dir.flow())->consumers.front().active == false);  // "applier" sorts first
    CHECK(DescribeRetention(*device, dir.flow())->consumers.back().active == true);
  }
  auto removed = UnregisterConsumer(*device, dir.flow(), "audit");
  REQUIRE(removed.ok());
  CHECK(*removed);
  CHECK(ReadConsumerStates(*device, dir.flow())->count("audit") == 0);
  REQUIRE(UnregisterConsumer(*device, dir.flow(), "applier").ok());
  auto again = UnregisterConsumer(*device, dir.flow(), "nobody");
  REQUIRE(again.ok());
  CHECK_FALSE(*again);
  // Unregistered, a new consumer registers at the log's first offset and reads from there.
  REQUIRE(RegisterConsumer(*device, dir.flow(), "applier").ok());
  CHECK(ReadConsumerOffsets(*device, dir.flow())->at("applier") == 32);
  auto reader = LogReader::Open(*device, dir.flow());
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Seek(32).ok());
  CHECK_FALSE((*reader)->Seek(31).ok());  // reclaimed, refused by name
}

// Reads every offset from `from` to the end; false when any is missing or unreadable.
static bool EveryOffsetReadableFrom(LogDevice& device, const std::string& dir, uint64_t from, uint64_t end) {
  auto reader = LogReader::Open(device, dir);
  if (!reader.ok() || !(*reader)->Seek(from).ok()) return false;
  for (uint64_t expected = from; expected < end; ++expected) {
    auto record = (*reader)->Next();
    if (!record.ok() || !record->has_value() || (**record).offset != expected) return false;
  }
  return true;
}

TEST_CASE("retention_keeps_every_offset_a_consumer_needs_and_the_defect_is_caught", "[log][retention]") {
  for (bool defect : {false, true}) {
    INFO("defect.log_reclaim_past_consumer " << (defect ? "on" : "off"));
    TempDir dir;
    auto device = RealDevice();
    WriterOptions options;
    options.segment_bytes_max = 2048;  // 8 frames of 240 bytes per segment
    auto writer = LogWriter::Open(*device, dir.flow(), options);
    REQUIRE(writer.ok());
    AppendTestRecords(**writer, 8, 50, 200, 10);
    REQUIRE(WriteConsumerOffset(*device, dir.flow(), "applier", 19).ok());
    // Defects need the explicit test-only switch (fault.h); a unit test is such a switch.
    trellara::fault::AllowDefects(defect, defect ? "unit test" : "");
    if (defect) REQUIRE(trellara::fault::Configure("defect.log_reclaim_past_consumer:1:defect").ok());
    auto report = ApplyRetention(*device, dir.flow(), 0);
    trellara::fault::Clear();
    REQUIRE(report.ok());
    const bool readable = EveryOffsetReadableFrom(*device, dir.flow(), 19, 50);
    if (!defect) {
      CHECK(report->segments_deleted == 2);
      CHECK(readable);
    } else {
      CHECK(report->segments_deleted == 3);
      CHECK_FALSE(readable);  // the negative control: the check above catches the defect
    }
  }
}

TEST_CASE("retention_keeps_the_segment_of_the_writers_restart_anchor", "[log][retention]") {
  // Pure rule: nothing at or after keep_from_segment is deleted, not even by the ceiling.
  std::map<std::string, ConsumerState> consumers{{"applier", {1000}}};
  CHECK(PlanRetention(FiveSegments(), consumers, 0, 20).delete_segments == std::vector<uint64_t>{0, 10});
  CHECK(PlanRetention(FiveSegments(), consumers, 1, 20).delete_segments == std::vector<uint64_t>{0, 10});

  // On disk: the last transaction-completing record (type 1 here) is in segment 16; segments 24
  // and 32 hold only chunks of a transaction that has not completed (type 2). Every consumer is
  // past all of it, yet segment 16 stays: a restarting relay reads back to that record.
  TempDir dir;
  auto device = RealDevice();
  WriterOptions options;
  options.segment_bytes_max = 2048;  // 8 frames of 240 bytes per segment
  auto writer = LogWriter::Open(*device, dir.flow(), options);
  REQUIRE(writer.ok());
  std::vector<uint8_t> payload(200, 7);
  for (int i = 0; i < 40; ++i) REQUIRE((*writer)->Append(i < 20 ? 1 : 2, 100 + i, payload).ok());
  REQUIRE((*writer)->Flush().ok());
  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "applier", 40).ok());
  auto report = ApplyRetention(*device, dir.flow(), 0, [](uint8_t type) { return type == 1; });
  REQUIRE(report.ok());
  CHECK(report->segments_deleted == 2);
  CHECK(report->retained_from_offset == 16);
  // Without an anchor (the CLI's ReclaimSegments) the same log loses segments 16 and 24 too.
  auto plain = ReclaimSegments(*device, dir.flow());
  REQUIRE(plain.ok());
  CHECK(plain->retained_from_offset == 32);
}

namespace {
// A device whose first read-only open of `victim` finds it deleted first, as when the relay's
// retention reclaims the oldest segment between a reader's listing and its open.
class ReclaimingDevice final : public LogDevice {
 public:
  ReclaimingDevice(LogDevice& inner, std::string victim) : inner_(inner), victim_(std::move(victim)) {}
  trellara::Status MakeDirectory(const std::string& p) override { return inner_.MakeDirectory(p); }
  trellara::Result<std::vector<std::string>> ListDirectory(const std::string& p) override { return inner_.ListDirectory(p); }
  trellara::Result<bool> Exists(const std::string& p) override { return inner_.Exists(p); }
  trellara::Result<FileId> OpenFile(const std::string& p, bool c) override { return inner_.OpenFile(p, c); }
  trellara::Result<FileId> OpenFileReadOnly(const std::string& p) override {
    if (p == victim_ && !reclaimed_) {
      reclaimed_ = true;
      REQUIRE(inner_.Remove(p).ok());
    }
    return inner_.OpenFileReadOnly(p);
  }
  void CloseFile(FileId f) override { inner_.CloseFile(f); }
  trellara::Result<uint64_t> FileSize(FileId f) override { return inner_.FileSize(f); }
  trellara::Result<size_t> ReadAt(FileId f, uint64_t pos, void* b, size_t n) override { return inner_.ReadAt(f, pos, b, n); }
  trellara::Status WriteAt(FileId f, uint64_t pos, const void* d, size_t n) override { return inner_.WriteAt(f, pos, d, n); }
  trellara::Status SyncData(FileId f) override { return inner_.SyncData(f); }
  trellara::Status Truncate(FileId f, uint64_t s) override { return inner_.Truncate(f, s); }
  trellara::Status Rename(const std::string& a, const std::string& b) override { return inner_.Rename(a, b); }
  trellara::Status Remove(const std::string& p) override { return inner_.Remove(p); }
  trellara::Status SyncDirectory(const std::string& p) override { return inner_.SyncDirectory(p); }
  trellara::Result<std::optional<FileId>> TryLockFile(const std::string& p) override { return inner_.TryLockFile(p); }
  void UnlockFile(FileId l) override { inner_.UnlockFile(l); }
  trellara::Status QueueWrite(FileId f, uint64_t pos, const void* d, size_t n, uint64_t t) override {
    return inner_.QueueWrite(f, pos, d, n, t);
  }
  trellara::Status QueueSyncData(FileId f, uint64_t pos, uint64_t n, uint64_t t) override {
    return inner_.QueueSyncData(f, pos, n, t);
  }
  trellara::Status SubmitQueued() override { return inner_.SubmitQueued(); }
  size_t ReapCompletions(std::vector<Completion>& out) override { return inner_.ReapCompletions(out); }
  trellara::Status WaitForCompletion() override { return inner_.WaitForCompletion(); }
  int completion_event_fd() const override { return inner_.completion_event_fd(); }
  size_t in_flight_max() const override { return inner_.in_flight_max(); }
  bool reclaimed() const { return reclaimed_; }

 private:
  LogDevice& inner_;
  std::string victim_;
  bool reclaimed_ = false;
};
}  // namespace

TEST_CASE("describing_retention_while_the_oldest_segment_is_reclaimed_lists_again", "[log][retention]") {
  // `trellara log consumers` lists the segments while the relay reclaims the oldest: the segment
  // gone between the listing and its open is not an error, the listing is taken again.
  TempDir dir;
  auto device = RealDevice();
  WriterOptions options;
  options.segment_bytes_max = 2048;
  auto writer = LogWriter::Open(*device, dir.flow(), options);
  REQUIRE(writer.ok());
  AppendTestRecords(**writer, 8, 50, 200, 10);  // segments 0, 8, 16, 24, 32, 40, 48
  ReclaimingDevice racing(*device, JoinPath(dir.flow(), SegmentFileName(0)));
  auto status = DescribeRetention(racing, dir.flow());
  REQUIRE(racing.reclaimed());
  INFO((status.ok() ? std::string() : status.error().message));
  REQUIRE(status.ok());
  CHECK(status->segments == 6);
  CHECK(status->first_offset == 8);
}

TEST_CASE("a_consumer_unregistered_while_its_file_is_read_is_no_longer_listed", "[log][retention]") {
  // The relay's retention pass, `trellara log consumers` and status() list the consumers while
  // trellara.unregister_consumer() removes one: its file (or its lost mark) gone between the listing
  // and the open means it is no longer a consumer, not a damaged directory.
  TempDir dir;
  auto device = RealDevice();
  auto writer = LogWriter::Open(*device, dir.flow(), WriterOptions{});
  REQUIRE(writer.ok());
  AppendTestRecords(**writer, 4, 50, 200, 10);
  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "applier", 2).ok());
  REQUIRE(WriteConsumerOffset(*device, dir.flow(), "audit", 1).ok());
  const std::string consumers = JoinPath(dir.flow(), "consumers");
  ReclaimingDevice unregistering(*device, JoinPath(consumers, "audit"));
  auto offsets = ReadConsumerOffsets(unregistering, dir.flow());
  REQUIRE(unregistering.reclaimed());
  INFO((offsets.ok() ? std::string() : offsets.error().message));
  REQUIRE(offsets.ok());
  CHECK(offsets->size() == 1);
  CHECK(offsets->at("applier") == 2);

  // The lost mark removed after the offset was read: that consumer is gone too.
  auto lost = device->OpenFile(JoinPath(consumers, ".applier.lost"), true);
  REQUIRE(lost.ok());
  device->CloseFile(*lost);
  ReclaimingDevice unmarking(*device, JoinPath(consumers, ".applier.lost"));
  auto states = ReadConsumerStates(unmarking, dir.flow());
  REQUIRE(unmarking.reclaimed());
  INFO((states.ok() ? std::string() : states.error().message));
  REQUIRE(states.ok());
  CHECK(states->empty());
}

}  // namespace unit_log_retention_test
