// format.cpp — byte-level encoding of frames, index files and log file names (see format.h).
// Never performs I/O and never interprets what a bad frame means.
#include "trellara/log/format.h"

#include <cstdio>
#include <cstring>

#include "trellara/log/crc32c.h"

namespace trellara::log {

void PutU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t GetU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

namespace {

uint32_t FrameCrc(const uint8_t* header, std::span<const uint8_t> payload) {
  uint32_t crc = Crc32c(header, 12);
  crc = Crc32c(header + 16, kFrameHeaderBytes - 16, crc);
  return Crc32c(payload.data(), payload.size(), crc);
}

}  // namespace

void EncodeFrame(uint8_t type, uint64_t offset, uint64_t commit_lsn, uint64_t durable_end_at_write,
                 std::span<const uint8_t> payload, uint8_t* out) {
  PutU32(out + 0, kFrameMagic);
  out[4] = kFrameFormatVersion;
  out[5] = type;
  PutU16(out + 6, 0);
  PutU32(out + 8, static_cast<uint32_t>(payload.size()));
  PutU32(out + 12, 0);
  PutU64(out + 16, offset);
  PutU64(out + 24, commit_lsn);
  PutU64(out + 32, durable_end_at_write);
  if (!payload.empty()) std::memcpy(out + kFrameHeaderBytes, payload.data(), payload.size());
  PutU32(out + 12, FrameCrc(out, payload));
}

std::optional<FrameHeader> DecodeFrameHeader(const uint8_t* header) {
  if (GetU32(header) != kFrameMagic) return std::nullopt;
  FrameHeader h;
  h.version = header[4];
  h.type = header[5];
  h.flags = GetU16(header + 6);
  h.payload_bytes = GetU32(header + 8);
  h.crc = GetU32(header + 12);
  h.offset = GetU64(header + 16);
  h.commit_lsn = GetU64(header + 24);
  h.durable_end_at_write = GetU64(header + 32);
  if (h.version != kFrameFormatVersion || h.flags != 0 || h.payload_bytes > kPayloadBytesMax) {
    return std::nullopt;
  }
  return h;
}

bool FrameCrcMatches(const uint8_t* header, const FrameHeader& decoded, std::span<const uint8_t> payload) {
  return payload.size() == decoded.payload_bytes && FrameCrc(header, payload) == decoded.crc;
}

void EncodeIndexHeader(uint64_t segment_first_offset, uint8_t* out) {
  std::memset(out, 0, kIndexHeaderBytes);
  PutU64(out + 0, kIndexMagic);
  PutU64(out + 8, segment_first_offset);
  PutU32(out + 16, kIndexEntryBytes);
  PutU32(out + 20, 1);
  PutU32(out + 28, Crc32c(out, 28));
}

std::optional<uint64_t> DecodeIndexHeader(const uint8_t* header) {
  if (GetU64(header) != kIndexMagic || GetU32(header + 16) != kIndexEntryBytes ||
      GetU32(header + 20) != 1 || GetU32(header + 28) != Crc32c(header, 28)) {
    return std::nullopt;
  }
  return GetU64(header + 8);
}

void EncodeIndexEntry(const IndexEntry& entry, uint8_t* out) {
  std::memset(out, 0, kIndexEntryBytes);
  PutU64(out + 0, entry.offset);
  PutU64(out + 8, entry.position);
  PutU64(out + 16, entry.commit_lsn);
  out[24] = entry.type;
  PutU32(out + 28, Crc32c(out, 28));
}

std::optional<IndexEntry> DecodeIndexEntry(const uint8_t* bytes) {
  if (GetU32(bytes + 28) != Crc32c(bytes, 28)) return std::nullopt;
  if (bytes[25] != 0 || bytes[26] != 0 || bytes[27] != 0) return std::nullopt;
  return IndexEntry{GetU64(bytes), GetU64(bytes + 8), GetU64(bytes + 16), bytes[24]};
}

namespace {

std::optional<uint64_t> ParseNumberedName(const std::string& name, const char* prefix, const char* suffix) {
  const size_t prefix_len = std::strlen(prefix), suffix_len = std::strlen(suffix);
  if (name.size() != prefix_len + 20 + suffix_len) return std::nullopt;
  if (name.compare(0, prefix_len, prefix) != 0) return std::nullopt;
  if (name.compare(prefix_len + 20, suffix_len, suffix) != 0) return std::nullopt;
  uint64_t value = 0;
  for (size_t i = prefix_len; i < prefix_len + 20; ++i) {
    char c = name[i];
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

std::string NumberedName(const char* prefix, uint64_t value, const char* suffix) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%020llu%s", prefix, static_cast<unsigned long long>(value), suffix);
  return buf;
}

}  // namespace

std::string SegmentFileName(uint64_t first_offset) { return NumberedName("segment-", first_offset, ".log"); }
std::string IndexFileName(uint64_t first_offset) { return NumberedName("index-", first_offset, ".idx"); }
std::optional<uint64_t> ParseSegmentFileName(const std::string& name) {
  return ParseNumberedName(name, "segment-", ".log");
}
std::optional<uint64_t> ParseIndexFileName(const std::string& name) {
  return ParseNumberedName(name, "index-", ".idx");
}

}  // namespace trellara::log
