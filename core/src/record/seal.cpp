// seal.cpp — a record's checksums (codec.h): sealing what a producer built (fingerprints, counts,
// the changes' checksum) and verifying what a reader decoded, with fingerprints already verified
// remembered (VerifiedRelations).
#include "trellara/record/codec.h"


#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <set>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "trellara.pb-c.h"
#include "trellara/record/checksum.h"
#include "trellara/base/text.h"

namespace trellara {

bool VerifiedRelations::Matches(const RelationInfo& relation) {
  auto found = verified_.find(relation.fingerprint);
  if (found != verified_.end() && found->second == relation) return true;
  computed_++;
  if (ComputeFingerprint(relation) != relation.fingerprint) return false;
  if (verified_.size() >= kMaxRelations) verified_.clear();
  verified_.insert_or_assign(relation.fingerprint, relation);
  return true;
}

namespace {
Status VerifyRecordChecksumRaw(const Record& record, VerifiedRelations* verified) {
  const auto matches = [verified](const RelationInfo& r) {
    return verified != nullptr ? verified->Matches(r) : ComputeFingerprint(r) == r.fingerprint;
  };
  auto check = [&matches](const std::vector<Change>& changes, const std::vector<RelationInfo>& rels,
                  const Sha256& recorded, const std::string& what,
                  std::span<const uint32_t> positions = {}) -> Status {
    for (const auto& r : rels) {
      if (!matches(r))
        return MakeError(what + ": fingerprint of relation " + r.schema + "." + r.name +
                         " does not match its columns (recorded " + HexEncode(r.fingerprint) + ")");
    }
    auto computed = ComputeChangesChecksum(changes, rels);
    if (!computed.ok()) return MakeError(what + ": " + computed.error().message);
    *computed = PositionedChecksum(*computed, positions);
    if (*computed != recorded)
      return MakeError(what + ": checksum mismatch: recorded " + HexEncode(recorded) + ", computed " +
                       HexEncode(*computed) + "; the record was altered after it was sealed");
    return Status::Ok();
  };
  if (const auto* e = std::get_if<Envelope>(&record))
    return check(e->changes, e->relations, e->checksum,
                 "envelope of xid " + std::to_string(e->tx.xid) + " commit " + FormatLsn(e->tx.commit_lsn));
  if (const auto* c = std::get_if<Chunk>(&record))
    return check(c->changes, c->relations, c->checksum,
                 "chunk " + std::to_string(c->seq) + " of xid " + std::to_string(c->tx.xid) + " commit " +
                     FormatLsn(c->tx.commit_lsn),
                 c->positions);
  if (const auto* m = std::get_if<Manifest>(&record)) {
    for (const auto& r : m->relations)
      if (!matches(r))
        return MakeError("manifest of xid " + std::to_string(m->tx.xid) + ": fingerprint of relation " + r.schema +
                         "." + r.name + " does not match its columns");
  }
  return Status::Ok();
}
}  // namespace

Status VerifyRecordChecksum(const Record& record, VerifiedRelations& verified) {
  Status s = VerifyRecordChecksumRaw(record, &verified);
  if (s.ok()) return s;
  return MakeError(EscapeInvalidUtf8(s.error().message));
}

Status VerifyRecordChecksum(const Record& record) {
  Status s = VerifyRecordChecksumRaw(record, nullptr);
  if (s.ok()) return s;
  return MakeError(EscapeInvalidUtf8(s.error().message));
}

Status SealEnvelope(Envelope& envelope) {
  for (auto& r : envelope.relations) r.fingerprint = ComputeFingerprint(r);
  envelope.counts.clear();
  for (const auto& c : envelope.changes) CountChange(c, envelope.counts);
  envelope.boundary_mode = BoundaryMode::Whole;
  envelope.checksum = Sha256{};
  auto sum = ComputeChangesChecksum(envelope.changes, envelope.relations);
  if (!sum.ok())
    return MakeError("cannot seal envelope of xid " + std::to_string(envelope.tx.xid) + ": " + sum.error().message);
  envelope.checksum = *sum;
  return Status::Ok();
}

Status SealChunk(Chunk& chunk) {
  for (auto& r : chunk.relations) r.fingerprint = ComputeFingerprint(r);
  chunk.event_count = static_cast<uint32_t>(chunk.changes.size());
  chunk.checksum = Sha256{};
  auto sum = ComputeChangesChecksum(chunk.changes, chunk.relations);
  if (!sum.ok())
    return MakeError("cannot seal chunk " + std::to_string(chunk.seq) + " of xid " + std::to_string(chunk.tx.xid) +
                     ": " + sum.error().message);
  chunk.checksum = PositionedChecksum(*sum, chunk.positions);
  return Status::Ok();
}

}  // namespace trellara
