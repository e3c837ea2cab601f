// pack.cpp — several log records in one broker message (pack.h).
#include "trellara/broker/pack.h"

#include <algorithm>
#include <cstring>

#include "trellara/base/assert.h"
#include "trellara/log/crc32c.h"
#include "trellara/log/format.h"

namespace trellara::broker {

size_t PackEntryBytes(size_t payload_bytes) { return kPackEntryHeaderBytes + payload_bytes; }

std::vector<size_t> PlanPacks(std::span<const log::LogRecord> records, const PackLimits& limits) {
  TRELLARA_ASSERT(limits.records_max >= 1, "a message holds at least one record");
  std::vector<size_t> counts;
  size_t count = 0, bytes = kPackHeaderBytes;
  for (const log::LogRecord& record : records) {
    const size_t entry = PackEntryBytes(record.payload.size());
    if (count > 0 && (count >= limits.records_max || bytes + entry > limits.bytes_max)) {
      counts.push_back(count);
      count = 0;
      bytes = kPackHeaderBytes;
    }
    count++;
    bytes += entry;
  }
  if (count > 0) counts.push_back(count);
  return counts;
}

namespace {

uint32_t EntryChecksum(const uint8_t* entry_header, const uint8_t* payload, size_t payload_bytes) {
  uint32_t crc = Crc32c(entry_header, 13);
  return Crc32c(payload, payload_bytes, crc);
}

}  // namespace

std::vector<uint8_t> EncodePack(std::span<const log::LogRecord> records) {
  TRELLARA_ASSERT(!records.empty(), "a packed message holds at least one record");
  size_t total = kPackHeaderBytes;
  for (size_t i = 0; i < records.size(); i++) {
    TRELLARA_ASSERT(records[i].offset == records[0].offset + i, "a packed message holds contiguous offsets");
    TRELLARA_ASSERT(records[i].payload.size() <= UINT32_MAX, "a record's payload fits its u32 length");
    total += PackEntryBytes(records[i].payload.size());
  }
  std::vector<uint8_t> body(total);
  uint8_t* p = body.data();
  std::memcpy(p, kPackMagic, 4);
  log::PutU32(p + 4, static_cast<uint32_t>(records.size()));
  p += kPackHeaderBytes;
  for (const log::LogRecord& record : records) {
    p[0] = record.type;
    log::PutU64(p + 1, record.commit_lsn);
    log::PutU32(p + 9, static_cast<uint32_t>(record.payload.size()));
    if (!record.payload.empty()) std::memcpy(p + kPackEntryHeaderBytes, record.payload.data(), record.payload.size());
    log::PutU32(p + 13, EntryChecksum(p, p + kPackEntryHeaderBytes, record.payload.size()));
    p += PackEntryBytes(record.payload.size());
  }
  TRELLARA_ASSERT(p == body.data() + body.size(), "the packed body is exactly its planned size");
  return body;
}

Result<std::vector<log::LogRecord>> DecodePack(uint64_t first_offset, uint64_t count, std::span<const uint8_t> body) {
  const std::string what = "packed message of offsets " + std::to_string(first_offset) + ".." +
                           std::to_string(first_offset + count - 1) + " (" + std::to_string(body.size()) + " bytes)";
  if (count == 0 || count > kPackCountMax) return MakeError(what + ": a count of " + std::to_string(count) + " records");
  if (body.size() < kPackHeaderBytes || std::memcmp(body.data(), kPackMagic, 4) != 0)
    return MakeError(what + " does not start with the pack format's magic \"TRP1\"");
  if (log::GetU32(body.data() + 4) != count)
    return MakeError(what + " says " + std::to_string(log::GetU32(body.data() + 4)) + " records in its body and " +
                     std::to_string(count) + " in its header");
  std::vector<log::LogRecord> records;
  records.reserve(count);
  size_t at = kPackHeaderBytes;
  for (uint64_t i = 0; i < count; i++) {
    const uint64_t offset = first_offset + i;
    if (body.size() - at < kPackEntryHeaderBytes)
      return MakeError(what + " is torn: offset " + std::to_string(offset) + "'s entry ends past the body");
    const uint8_t* entry = body.data() + at;
    const size_t payload_bytes = log::GetU32(entry + 9);
    if (body.size() - at - kPackEntryHeaderBytes < payload_bytes)
      return MakeError(what + " is torn: offset " + std::to_string(offset) + "'s payload of " +
                       std::to_string(payload_bytes) + " bytes ends past the body");
    const uint8_t* payload = entry + kPackEntryHeaderBytes;
    if (EntryChecksum(entry, payload, payload_bytes) != log::GetU32(entry + 13))
      return MakeError(what + ": offset " + std::to_string(offset) + " fails its checksum");
    log::LogRecord record;
    record.offset = offset;
    record.type = entry[0];
    record.commit_lsn = log::GetU64(entry + 1);
    record.payload.assign(payload, payload + payload_bytes);
    records.push_back(std::move(record));
    at += PackEntryBytes(payload_bytes);
  }
  if (at != body.size())
    return MakeError(what + " holds " + std::to_string(body.size() - at) + " bytes past its last record");
  return records;
}

namespace {

std::optional<uint64_t> Count(const std::string& text) {
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  try {
    const uint64_t n = std::stoull(text);
    if (n == 0 || n > kPackCountMax) return std::nullopt;
    return n;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Splits "<...>/<first>+<count>[/refill-<n>]" into the id without "+<count>" and the count text.
std::pair<std::string, std::optional<std::string>> TakeCount(const std::string& id) {
  const auto marker = id.rfind("/refill-");
  const std::string base = marker == std::string::npos ? id : id.substr(0, marker);
  const std::string tail = marker == std::string::npos ? std::string() : id.substr(marker);
  const auto plus = base.rfind('+');
  const auto slash = base.rfind('/');
  if (plus == std::string::npos || (slash != std::string::npos && plus < slash)) return {id, std::nullopt};
  return {base.substr(0, plus) + tail, base.substr(plus + 1)};
}

Result<DeliveredSpan> Span(const std::string& message_id, bool refill_allowed,
                           const std::optional<std::string>& format_header,
                           const std::optional<std::string>& count_header) {
  const auto [id, count_in_id] = TakeCount(message_id);
  auto name = refill_allowed ? ParseDeliveredId(id) : ParseMessageId(id);
  if (!name) return MakeError("broker message id \"" + message_id + "\" is not <flow>/<log identity>/<first>+<count>" +
                              (refill_allowed ? "[/refill-<n>]" : "") + " or <flow>/<log identity>/<offset>");
  DeliveredSpan span;
  span.first = *name;
  if (!count_in_id && !format_header && !count_header) return span;  // an older forwarder's single record
  if (!format_header || (*format_header != kPackFormat && *format_header != kPackFormatZstd))
    return MakeError("broker message \"" + message_id + "\" has " + std::string(kFormatHeader) + " \"" +
                     format_header.value_or("") + "\" (this trellara reads formats " + kPackFormat + " and " +
                     kPackFormatZstd + "): published by another version of trellara forward; upgrade this one");
  const auto count = count_in_id ? Count(*count_in_id) : std::nullopt;
  if (!count || !count_header || *count_header != *count_in_id)
    return MakeError("broker message \"" + message_id + "\" has " + std::string(kCountHeader) + " \"" +
                     count_header.value_or("") + "\": a packed message names the same count of 1.." +
                     std::to_string(kPackCountMax) + " records in its id and in this header");
  if (span.first.offset > UINT64_MAX - *count)
    return MakeError("broker message \"" + message_id + "\" names offsets past the largest offset");
  span.count = *count;
  span.packed = true;
  span.format = *format_header;
  return span;
}

}  // namespace

std::string PackMessageId(const RecordName& first, uint64_t count) {
  return MessageId(first) + "+" + std::to_string(count);
}

std::string PackRefillMessageId(const RecordName& first, uint64_t count, uint64_t refill) {
  return PackMessageId(first, count) + "/refill-" + std::to_string(refill);
}

Result<DeliveredSpan> ParseDeliveredSpan(const std::string& message_id, const std::optional<std::string>& offset_header,
                                         const std::optional<std::string>& format_header,
                                         const std::optional<std::string>& count_header) {
  auto span = Span(message_id, true, format_header, count_header);
  if (span && offset_header && *offset_header != std::to_string(span->first.offset))
    return MakeError("broker message \"" + message_id + "\" has " + std::string(kOffsetHeader) + " \"" + *offset_header +
                     "\", not the offset its id names");
  return span;
}

Result<DeliveredSpan> ParsePublishedSpan(const std::string& message_id, const std::optional<std::string>& format_header,
                                         const std::optional<std::string>& count_header) {
  return Span(message_id, false, format_header, count_header);
}

DeliverySplit SplitDelivery(uint64_t first, uint64_t count, uint64_t expected) {
  TRELLARA_ASSERT(count >= 1, "a delivered message holds at least one record");
  const uint64_t end = first + count;
  DeliverySplit split;
  split.held_first = first;
  split.held_end = std::min(end, std::max(first, expected));
  split.rest_first = split.held_end;
  split.rest_end = end;
  split.hole = split.rest_first < split.rest_end && split.rest_first > expected;
  return split;
}

}  // namespace trellara::broker
