// codec.h — encodes records to protobuf bytes and decodes untrusted bytes back, validated.
//
// DecodeRecord accepts anything (truncated, oversized, garbage, mutated) and either returns a
// structurally valid Record or an Error naming what is wrong; it never crashes and never returns
// a record that later code would have to second-guess (every value has a kind, every change
// resolves to a RelationInfo of the same record, tuple widths match the relation). It does NOT
// judge checksums: VerifyRecordChecksum does, so inspect can still render a tampered record.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "trellara/envelope.h"
#include "trellara/result.h"

namespace trellara {

// Largest record payload accepted or produced (the log frame limit is the same: 1 GiB, the most a
// PostgreSQL decoding session can hand over in one write).
inline constexpr size_t kMaxRecordBytes = size_t{1} << 30;

Result<std::string> EncodeRecord(const Record& record);
Result<Record> DecodeRecord(std::span<const uint8_t> bytes);
inline Result<Record> DecodeRecord(const std::string& bytes) {
  return DecodeRecord(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

// Checks what a record can prove on its own: Envelope and Chunk checksums are recomputed from
// their changes and every RelationInfo fingerprint from its columns. A Manifest's transaction
// checksum and a CommitMarker's manifest checksum bind to other records: the barrier checks those.
Status VerifyRecordChecksum(const Record& record);

// Fills fingerprints, counts, event count and checksum of a record built by a producer. Fails
// (and leaves the checksum zero) if a change refers to a relation the record does not describe.
Status SealEnvelope(Envelope& envelope);
Status SealChunk(Chunk& chunk);

// One Ddl alone (proto Ddl): what the extension's event trigger puts in the WAL as the content of
// a transactional logical message with prefix kDdlMessagePrefix, and what the plugin decodes.
inline constexpr char kDdlMessagePrefix[] = "trellara.ddl";
Result<std::string> EncodeDdl(const Ddl& ddl);
Result<Ddl> DecodeDdl(std::string_view bytes);

}  // namespace trellara
