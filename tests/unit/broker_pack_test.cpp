// broker_pack_test.cpp — several log records in one broker message (pack.h): packing limits, the
// body, what a delivered message names, and the split at the replica's next offset.
#include <catch2/catch.hpp>

#include "trellara/broker/pack.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_broker_pack_test {

using namespace trellara::broker;
using trellara::log::LogRecord;

std::vector<LogRecord> Run(uint64_t first, size_t n, size_t payload_bytes) {
  std::vector<LogRecord> records;
  for (size_t i = 0; i < n; i++) {
    LogRecord r;
    r.offset = first + i;
    r.type = static_cast<uint8_t>(1 + i % 4);
    r.commit_lsn = 0x1000 + 16 * i;
    r.payload.assign(payload_bytes + i % 3, static_cast<uint8_t>(i));
    records.push_back(std::move(r));
  }
  return records;
}

TEST_CASE("packs_stop_at_the_record_or_byte_limit_whichever_comes_first", "[broker]") {
  CHECK(PlanPacks({}).empty());
  const auto small = Run(0, 600, 10);
  CHECK(PlanPacks(small) == std::vector<size_t>{256, 256, 88});
  // 64 KiB records: at most 7 fit in 512 KiB with their entry headers.
  const auto large = Run(10, 20, 64 << 10);
  const auto counts = PlanPacks(large);
  CHECK(counts == std::vector<size_t>{7, 7, 6});
  // A record larger than the byte limit goes alone, never split and never refused.
  const auto huge = Run(0, 3, kPackBytesMax + 1);
  CHECK(PlanPacks(huge) == std::vector<size_t>{1, 1, 1});
  CHECK(PlanPacks(small, PackLimits{4, kPackBytesMax}) .size() == 150);
}

TEST_CASE("a_packed_body_gives_back_each_record_unchanged", "[broker]") {
  const auto records = Run(41, 5, 7);
  const auto body = EncodePack(records);
  auto decoded = DecodePack(41, 5, body);
  REQUIRE(decoded.ok());
  REQUIRE(decoded->size() == 5);
  for (size_t i = 0; i < 5; i++) {
    CHECK((*decoded)[i].offset == records[i].offset);
    CHECK((*decoded)[i].type == records[i].type);
    CHECK((*decoded)[i].commit_lsn == records[i].commit_lsn);
    CHECK((*decoded)[i].payload == records[i].payload);
  }
  // An empty payload is a record too.
  auto empty = Run(0, 1, 0);
  REQUIRE(DecodePack(0, 1, EncodePack(empty)).ok());
}

TEST_CASE("a_torn_or_altered_packed_message_is_refused_whole", "[broker]") {
  const auto body = EncodePack(Run(100, 4, 20));
  // Torn at every length short of the whole body.
  for (size_t len = 0; len < body.size(); len++) {
    INFO(len);
    CHECK_FALSE(DecodePack(100, 4, std::span<const uint8_t>(body.data(), len)).ok());
  }
  // Bytes past the last record.
  auto longer = body;
  longer.push_back(0);
  CHECK(DecodePack(100, 4, longer).error().message.find("past its last record") != std::string::npos);
  // Any byte altered (magic, count, an entry's header, checksum or payload).
  for (size_t i = 0; i < body.size(); i++) {
    auto altered = body;
    altered[i] ^= 0x40;
    INFO(i);
    CHECK_FALSE(DecodePack(100, 4, altered).ok());
  }
  // The header's count must be the body's.
  CHECK(DecodePack(100, 3, body).error().message.find("says 4 records in its body and 3") != std::string::npos);
  CHECK_FALSE(DecodePack(100, 0, body).ok());
}

std::vector<LogRecord> Incompressible(uint64_t first, size_t n, size_t payload_bytes) {
  std::vector<LogRecord> records = Run(first, n, payload_bytes);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& r : records)
    for (auto& b : r.payload) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = static_cast<uint8_t>(x);
    }
  return records;
}

void CheckSame(const std::vector<LogRecord>& got, const std::vector<LogRecord>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); i++) {
    CHECK(got[i].offset == want[i].offset);
    CHECK(got[i].type == want[i].type);
    CHECK(got[i].commit_lsn == want[i].commit_lsn);
    CHECK(got[i].payload == want[i].payload);
  }
}

TEST_CASE("a_compressible_message_goes_compressed_and_gives_back_each_record_unchanged", "[broker]") {
  const auto records = Run(41, 50, 300);  // repeated bytes: compresses many times over
  const auto message = EncodePackMessage(records);
  CHECK(std::string(message.format) == kPackFormatZstd);
  CHECK(message.bytes.size() < EncodePack(records).size() / 4);
  auto decoded = DecodePackMessage(message.format, 41, 50, message.bytes);
  REQUIRE(decoded.ok());
  CheckSame(*decoded, records);
  // The count and first offset are still checked against the decompressed body.
  CHECK_FALSE(DecodePackMessage(message.format, 41, 49, message.bytes).ok());
}

TEST_CASE("an_incompressible_message_goes_plain_as_format_1", "[broker]") {
  const auto records = Incompressible(7, 20, 200);
  const auto message = EncodePackMessage(records);
  CHECK(std::string(message.format) == kPackFormat);
  CHECK(message.bytes == EncodePack(records));
  auto decoded = DecodePackMessage(message.format, 7, 20, message.bytes);
  REQUIRE(decoded.ok());
  CheckSame(*decoded, records);
}

TEST_CASE("a_torn_or_altered_compressed_message_is_refused_whole", "[broker]") {
  const auto records = Run(100, 30, 100);
  const auto message = EncodePackMessage(records);
  REQUIRE(std::string(message.format) == kPackFormatZstd);
  const auto& body = message.bytes;
  for (size_t len = 0; len < body.size(); len++) {
    INFO(len);
    CHECK_FALSE(DecodePackMessage(kPackFormatZstd, 100, 30, std::span<const uint8_t>(body.data(), len)).ok());
  }
  auto longer = body;
  longer.push_back(0);
  CHECK(DecodePackMessage(kPackFormatZstd, 100, 30, longer).error().message.find("past its zstd frame") !=
        std::string::npos);
  // Any byte altered: the frame is refused, or what it decompresses to fails the pack's checks
  // (its records' CRC32Cs), or — a bit zstd does not use for this frame — it decompresses to the
  // very same records. Never other records.
  size_t refused = 0;
  for (size_t i = 0; i < body.size(); i++) {
    auto altered = body;
    altered[i] ^= 0x40;
    INFO(i);
    auto decoded = DecodePackMessage(kPackFormatZstd, 100, 30, altered);
    if (!decoded.ok()) {
      refused++;
      continue;
    }
    CheckSame(*decoded, records);
  }
  CHECK(refused > body.size() * 9 / 10);
  // A plain body under format 2, a compressed one under format 1, an unknown format: refused.
  CHECK_FALSE(DecodePackMessage(kPackFormatZstd, 100, 30, EncodePack(records)).ok());
  CHECK_FALSE(DecodePackMessage(kPackFormat, 100, 30, body).ok());
  CHECK_FALSE(DecodePackMessage("3", 100, 30, body).ok());
}

TEST_CASE("a_delivered_message_names_its_first_offset_and_count_and_old_single_records_still_read", "[broker]") {
  const std::string id = LogIdentity(7, 0x10);
  const RecordName first{"app", id, 40};
  CHECK(PackMessageId(first, 8) == "app/7-0/10/40+8");
  CHECK(PackRefillMessageId(first, 8, 9) == "app/7-0/10/40+8/refill-9");
  auto packed = ParseDeliveredSpan(PackMessageId(first, 8), "40", "1", "8");
  REQUIRE(packed.ok());
  CHECK(packed->packed);
  CHECK(packed->first == first);
  CHECK(packed->count == 8);
  CHECK(packed->end() == 48);
  CHECK(packed->last_offset() == 47);
  CHECK(packed->last() == RecordName{"app", id, 47});
  // A refill names its first offset and count the same way.
  auto refill = ParseDeliveredSpan(PackRefillMessageId(first, 3, 9), "40", "1", "3");
  REQUIRE(refill.ok());
  CHECK(refill->first == first);
  CHECK(refill->count == 3);
  // An older forwarder's message: one record, no count in its id, no format or count header.
  for (const std::string& old_id : {MessageId(first), RefillMessageId(first, 4)}) {
    auto single = ParseDeliveredSpan(old_id, "40", std::nullopt, std::nullopt);
    REQUIRE(single.ok());
    CHECK_FALSE(single->packed);
    CHECK(single->count == 1);
    CHECK(single->last_offset() == 40);
  }
  // Malformed: a count without a format (or the reverse), another format, the id's count and the
  // header's differing, counts out of range, an offset header naming another offset.
  CHECK_FALSE(ParseDeliveredSpan(PackMessageId(first, 8), "40", std::nullopt, "8").ok());
  CHECK_FALSE(ParseDeliveredSpan(PackMessageId(first, 8), "40", "1", std::nullopt).ok());
  CHECK_FALSE(ParseDeliveredSpan(MessageId(first), "40", "1", "8").ok());
  CHECK_FALSE(ParseDeliveredSpan(MessageId(first), "40", std::nullopt, "8").ok());
  CHECK(ParseDeliveredSpan(PackMessageId(first, 8), "40", "3", "8").error().message.find("upgrade") !=
        std::string::npos);
  // Format 2 (the body compressed) names its records the same way, and says so.
  auto compressed = ParseDeliveredSpan(PackMessageId(first, 8), "40", "2", "8");
  REQUIRE(compressed.ok());
  CHECK(compressed->format == kPackFormatZstd);
  CHECK(packed->format == kPackFormat);
  CHECK(ParsePublishedSpan(PackMessageId(first, 8), "2", "8")->last_offset() == 47);
  CHECK_FALSE(ParseDeliveredSpan(PackMessageId(first, 8), "40", "1", "7").ok());
  for (const char* bad : {"", "0", "x", "-1", "1048577", "123456789012345678901"}) {
    INFO(bad);
    CHECK_FALSE(ParseDeliveredSpan(MessageId(first) + "+" + bad, "40", "1", std::string(bad)).ok());
  }
  CHECK_FALSE(ParseDeliveredSpan(PackMessageId(first, 8), "41", "1", "8").ok());
  // The forwarder's resume point is never a refill.
  CHECK_FALSE(ParsePublishedSpan(PackRefillMessageId(first, 3, 9), "1", "3").ok());
  CHECK(ParsePublishedSpan(PackMessageId(first, 3), "1", "3")->last_offset() == 42);
  CHECK(ParsePublishedSpan(MessageId(first), std::nullopt, std::nullopt)->last_offset() == 40);
}

TEST_CASE("a_message_overlapping_the_replica_is_split_at_its_next_offset", "[broker]") {
  // Wholly held: every record compared as a duplicate, nothing left.
  auto held = SplitDelivery(10, 5, 20);
  CHECK(held.held_first == 10);
  CHECK(held.held_end == 15);
  CHECK(held.rest_first == held.rest_end);
  CHECK_FALSE(held.hole);
  // Overlapping: 10..14 compared, 15..19 appended in order.
  auto overlap = SplitDelivery(10, 10, 15);
  CHECK(overlap.held_end == 15);
  CHECK(overlap.rest_first == 15);
  CHECK(overlap.rest_end == 20);
  CHECK_FALSE(overlap.hole);
  // Exactly next: nothing held.
  auto next = SplitDelivery(15, 3, 15);
  CHECK(next.held_first == next.held_end);
  CHECK(next.rest_first == 15);
  CHECK_FALSE(next.hole);
  // Above: a hole before the whole message, nothing appended.
  auto above = SplitDelivery(17, 3, 15);
  CHECK(above.held_first == above.held_end);
  CHECK(above.rest_first == 17);
  CHECK(above.rest_end == 20);
  CHECK(above.hole);
}

}  // namespace unit_broker_pack_test
