// format.h — the on-disk format of the local log: frame header, index file, file names.
//
// Responsible for encoding and decoding bytes only; it never performs I/O and never decides
// whether a frame is a torn tail or corruption (segment_scan.h does). All integers are
// little-endian. Layouts (byte offsets):
//
//   frame header (kFrameHeaderBytes = 40), followed by `payload_bytes` of payload:
//     0  u32 magic 0x464C5254 ("TRLF")   4  u8 format version (1)   5  u8 record type
//     6  u16 flags (0)                    8  u32 payload_bytes       12 u32 crc32c
//     16 u64 offset                       24 u64 commit_lsn
//     32 u64 durable_end_at_write: every offset below it was durable when this frame was written
//   crc32c covers header bytes [0,12) and [16,40), then the payload.
//
//   index file: 32-byte header, then one 32-byte entry per frame of the segment, dense (entry i
//   describes offset first_offset + i):
//     header: 0 u64 magic "TRLIDX01"  8 u64 segment first offset  16 u32 entry bytes (32)
//             20 u32 version (1)  24 u32 reserved (0)  28 u32 crc32c of bytes [0,28)
//     entry:  0 u64 offset  8 u64 frame position  16 u64 commit_lsn  24 u8 record type
//             25..27 zero  28 u32 crc32c of bytes [0,28)
#pragma once

#include "trellara/record/record_type.h"
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace trellara::log {

inline constexpr uint32_t kFrameMagic = 0x464C5254;  // "TRLF" little-endian
inline constexpr uint8_t kFrameFormatVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 40;
// 1 GiB: the largest record a decoding session can hand over (PostgreSQL's MaxAllocSize bounds
// the output buffer of a logical decoding plugin). A frame larger than segment_bytes_max sits
// alone in its own, oversized segment (writer.cpp), so one large value never needs splitting.
inline constexpr uint32_t kPayloadBytesMax = 1u << 30;

inline constexpr uint64_t kIndexMagic = 0x31305844494C5254ull;  // "TRLIDX01"
inline constexpr size_t kIndexHeaderBytes = 32;
inline constexpr size_t kIndexEntryBytes = 32;

inline constexpr uint64_t kSegmentBytesDefault = 64ull << 20;

// Record types: the one enumeration (record/record_type.h), named here for the log's readers.
using RecordType = trellara::RecordType;

struct FrameHeader {
  uint8_t version = kFrameFormatVersion;
  uint8_t type = 0;
  uint16_t flags = 0;
  uint32_t payload_bytes = 0;
  uint32_t crc = 0;
  uint64_t offset = 0;
  uint64_t commit_lsn = 0;
  uint64_t durable_end_at_write = 0;
};

// Writes header (with crc computed over header and payload) followed by payload into `out`,
// which must hold kFrameHeaderBytes + payload.size() bytes.
void EncodeFrame(uint8_t type, uint64_t offset, uint64_t commit_lsn, uint64_t durable_end_at_write,
                 std::span<const uint8_t> payload, uint8_t* out);

// Decodes a header. Returns nullopt unless the magic, version, flags and payload bound are
// plausible; the CRC is not checked here (the payload is needed).
std::optional<FrameHeader> DecodeFrameHeader(const uint8_t* header);

// True when `crc` in `header` matches header bytes and `payload`.
bool FrameCrcMatches(const uint8_t* header, const FrameHeader& decoded, std::span<const uint8_t> payload);

struct IndexEntry {
  uint64_t offset = 0;
  uint64_t position = 0;
  uint64_t commit_lsn = 0;
  uint8_t type = 0;
};

void EncodeIndexHeader(uint64_t segment_first_offset, uint8_t* out);
// Returns the segment first offset recorded in a valid header, nullopt when invalid.
std::optional<uint64_t> DecodeIndexHeader(const uint8_t* header);
void EncodeIndexEntry(const IndexEntry& entry, uint8_t* out);
std::optional<IndexEntry> DecodeIndexEntry(const uint8_t* bytes);

std::string SegmentFileName(uint64_t first_offset);  // segment-00000000000000000000.log
std::string IndexFileName(uint64_t first_offset);    // index-00000000000000000000.idx
std::optional<uint64_t> ParseSegmentFileName(const std::string& name);
std::optional<uint64_t> ParseIndexFileName(const std::string& name);

// Little-endian helpers shared by the log code.
void PutU16(uint8_t* p, uint16_t v);
void PutU32(uint8_t* p, uint32_t v);
void PutU64(uint8_t* p, uint64_t v);
uint16_t GetU16(const uint8_t* p);
uint32_t GetU32(const uint8_t* p);
uint64_t GetU64(const uint8_t* p);

}  // namespace trellara::log
