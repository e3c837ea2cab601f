// codec.h — encodes records to protobuf bytes and decodes untrusted bytes back, validated.
//
// DecodeRecord accepts anything (truncated, oversized, garbage, mutated) and either returns a
// structurally valid Record or an Error naming what is wrong; it never crashes and never returns
// a record that later code would have to second-guess (every value has a kind, every change
// resolves to a RelationInfo of the same record, tuple widths match the relation). It does NOT
// judge checksums: VerifyRecordChecksum does, so inspect can still render a tampered record.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "trellara/record/envelope.h"
#include "trellara/base/result.h"

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

// RelationInfos whose fingerprint was verified: every record of a flow repeats the RelationInfo of
// each relation it touches, so a reader that verifies many records (the applier's barrier) keeps
// one of these and recomputes a fingerprint only for a RelationInfo not equal, field for field
// (oid and fingerprint included), to one verified before. Bounded: forgets everything past
// kMaxRelations distinct ones and starts again.
class VerifiedRelations {
 public:
  static constexpr size_t kMaxRelations = 4096;
  // ComputeFingerprint(relation) == relation.fingerprint, remembered when true.
  bool Matches(const RelationInfo& relation);
  size_t computed() const { return computed_; }  // fingerprints actually computed (tests)

 private:
  std::map<Sha256, RelationInfo> verified_;
  size_t computed_ = 0;
};
// The same check, with fingerprints already verified in `verified` not computed again.
Status VerifyRecordChecksum(const Record& record, VerifiedRelations& verified);

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
