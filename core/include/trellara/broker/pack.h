// pack.h — several log records in one broker message (DESIGN §9, docs/broker.md "Message format").
//
// One JetStream message per log record cost the three nats-servers of an R3 stream more CPU than
// the rest of the broker path together (docs/performance.md, issue 38). So the forwarder packs a
// contiguous run of its log's records into one message: each record unchanged (type, commit LSN,
// payload byte for byte) with a CRC32C of its own, so a torn or altered message is found record
// by record, never applied. These are the rules of that format, for the forwarder, the remote
// applier's receiver and the simulator alike:
//  - PlanPacks: how a run of records read from the log is cut into messages (limits below). A
//    message is never held back waiting for more records: the forwarder packs what the log holds
//    when it reads, so a quiet flow's record leaves at once (the "flush on idle").
//  - EncodePack / DecodePack: the body. A body that does not decode exactly (magic, count, an
//    entry's length or checksum, bytes left over) is an invalid message: refused, never partly used.
//  - EncodePackMessage / DecodePackMessage: the body on the wire. Format "2" is a format-1 body
//    compressed as one zstd frame; the forwarder sends it whenever it is smaller (a pgbench log's
//    records shrink several times), which is most of what the three nats-servers of an R3 stream
//    spend their CPU on: every byte is received, replicated twice, written and hashed per node.
//    The records' own CRC32Cs are checked after decompression, as for format 1.
//  - PackMessageId: a message's deduplication id names flow, log identity, its FIRST offset and its
//    count ("<flow>/<log identity>/<first>+<count>"; the count is also in a header). The count is
//    in the id because the broker acknowledges a publish whose id it has seen as a duplicate
//    without storing it: keyed by the first offset alone, a forwarder that cut the same records
//    otherwise after a restart (or a stream that lost its last message) would have records the
//    broker never stored acknowledged as held — and with source_ack = broker_quorum the source's
//    slot confirmed past them. With the count, one id is one exact run of records.
//  - ParseDeliveredSpan: which offsets a delivered message holds, from its id and headers. A
//    message whose id has no count and that has no format header is a single record as an older
//    forwarder published it (body = the record's payload): still read.
//  - SplitDelivery: a message overlapping the replica's next offset is split there: the part below
//    is compared record by record (duplicates), the rest appended in order or, starting above, a hole.
// Talks to no broker and no database.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trellara/base/result.h"
#include "trellara/broker/broker.h"
#include "trellara/log/reader.h"

namespace trellara::broker {

// A message holds at most this many records, and its body at most this many bytes (a single
// record larger than that goes alone, as every record did before packing). nats-server's default
// max_payload is 1 MiB including headers: half of it leaves room and keeps one message's
// replication step short.
inline constexpr size_t kPackRecordsMax = 256;
inline constexpr size_t kPackBytesMax = 512u << 10;

// Headers of a packed message (besides Nats-Msg-Id = MessageId of its first record).
inline constexpr const char* kOffsetHeader = "Trellara-Offset";  // the first record's offset
inline constexpr const char* kCountHeader = "Trellara-Count";    // how many records it holds
// The header that says a message is packed (the body format's version): "1".
inline constexpr const char* kFormatHeader = "Trellara-Format";
inline constexpr const char* kPackFormat = "1";
// Format "2": the body is exactly one zstd frame that names its content size, whose content is a
// format-1 body of at most kPackZstdContentBytesMax bytes (a bound against a hostile frame; the
// forwarder compresses only bodies within it).
inline constexpr const char* kPackFormatZstd = "2";
inline constexpr size_t kPackZstdContentBytesMax = 64u << 20;
inline constexpr int kPackZstdLevel = 1;  // the fastest level: the forwarder's CPU shares the host

// Body: "TRP1", u32 count, then per record: u8 type, u64 commit LSN, u32 payload bytes,
// u32 CRC32C (of the entry's first 13 bytes, then the payload), the payload. Little-endian.
inline constexpr uint8_t kPackMagic[4] = {'T', 'R', 'P', '1'};
inline constexpr size_t kPackHeaderBytes = 8;
inline constexpr size_t kPackEntryHeaderBytes = 17;

struct PackLimits {
  size_t records_max = kPackRecordsMax;
  size_t bytes_max = kPackBytesMax;
};

// The body bytes a record with `payload_bytes` takes.
size_t PackEntryBytes(size_t payload_bytes);

// How `records` (contiguous offsets, in order) are cut into messages, front to back: the count of
// each message. Every message holds at least one record and, beyond its first, stays within both
// limits.
std::vector<size_t> PlanPacks(std::span<const log::LogRecord> records, const PackLimits& limits = {});

// The body of one message holding `records` (non-empty, contiguous offsets: asserted).
std::vector<uint8_t> EncodePack(std::span<const log::LogRecord> records);

// The records of a packed body whose id names `first_offset` and whose header says `count`; an
// error (what is wrong, at which record) when the body is torn or is not such a message.
Result<std::vector<log::LogRecord>> DecodePack(uint64_t first_offset, uint64_t count, std::span<const uint8_t> body);

// The body on the wire for `records` and its Trellara-Format: format 2 when compressing makes it
// smaller (and the plain body is within kPackZstdContentBytesMax), else format 1 (EncodePack).
struct PackMessageBody {
  std::vector<uint8_t> bytes;
  const char* format = kPackFormat;
};
PackMessageBody EncodePackMessage(std::span<const log::LogRecord> records);
// The records of a delivered body of `format` (kPackFormat or kPackFormatZstd): a format-2 body
// is refused unless it is exactly one zstd frame naming a content size within the bound that
// decompresses to exactly that size; then DecodePack's checks apply.
Result<std::vector<log::LogRecord>> DecodePackMessage(const std::string& format, uint64_t first_offset, uint64_t count,
                                                      std::span<const uint8_t> body);

// "<flow>/<log identity>/<first>+<count>", and a refill's "<...>+<count>/refill-<n>".
std::string PackMessageId(const RecordName& first, uint64_t count);
std::string PackRefillMessageId(const RecordName& first, uint64_t count, uint64_t refill);

// The offsets a delivered message holds: [first.offset, first.offset + count).
struct DeliveredSpan {
  RecordName first;     // from the deduplication id (first publish or refill alike)
  uint64_t count = 1;
  bool packed = false;  // false: a single record as an older forwarder published it
  std::string format;   // a packed message's Trellara-Format (kPackFormat or kPackFormatZstd)
  uint64_t end() const { return first.offset + count; }
  uint64_t last_offset() const { return first.offset + count - 1; }
  RecordName last() const { return RecordName{first.flow, first.log_identity, last_offset()}; }
};
// `offset_header` (Trellara-Offset) must name the id's offset when present. A packed message has a
// count in its id, `format_header` kPackFormat or kPackFormatZstd and `count_header` equal to that count; an older
// forwarder's record has none of the three.
// A count is 1..kPackCountMax (a bound against a malformed header, not the packing limit: a
// forwarder with other limits is still read).
inline constexpr uint64_t kPackCountMax = 1u << 20;
Result<DeliveredSpan> ParseDeliveredSpan(const std::string& message_id, const std::optional<std::string>& offset_header,
                                         const std::optional<std::string>& format_header,
                                         const std::optional<std::string>& count_header);
// The same for the forwarder's resume point: the records subject's last message, never a refill.
Result<DeliveredSpan> ParsePublishedSpan(const std::string& message_id, const std::optional<std::string>& format_header,
                                         const std::optional<std::string>& count_header);

// A delivered message [first, first + count) against the replica's next offset `expected`.
struct DeliverySplit {
  uint64_t held_first = 0, held_end = 0;  // below expected: duplicates, each compared with the replica
  uint64_t rest_first = 0, rest_end = 0;  // from expected on (or the whole message when above it)
  bool hole = false;                      // the rest starts above expected: records are missing before it
};
DeliverySplit SplitDelivery(uint64_t first, uint64_t count, uint64_t expected);

}  // namespace trellara::broker
