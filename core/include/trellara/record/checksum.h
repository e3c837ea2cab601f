// checksum.h — canonical SHA-256 checksums of changes and relation schemas.
//
// The checksum is computed over Trellara's own canonical byte encoding, never over protobuf
// bytes (protobuf serialization is not canonical): same content => same bytes => same checksum;
// any changed value, value kind, column, op, relation or order => a different checksum.
// Changes are streamed into a ChangeHasher, so a chunked transaction's total checksum equals
// the checksum the same transaction would have as one Envelope, without holding it in memory.
#pragma once

#include <memory>
#include <span>

#include "trellara/record/envelope.h"
#include "trellara/base/result.h"

namespace trellara {

// SHA-256 over a relation's canonical schema: schema, name, replica identity, and every column's
// name, type name, typmod and key flag (type OIDs are excluded: they differ between clusters).
Sha256 ComputeFingerprint(const RelationInfo& relation);

class ChangeHasher {
 public:
  ChangeHasher();
  ~ChangeHasher();
  ChangeHasher(ChangeHasher&&) noexcept;
  ChangeHasher& operator=(ChangeHasher&&) noexcept;
  ChangeHasher(const ChangeHasher&) = delete;
  ChangeHasher& operator=(const ChangeHasher&) = delete;

  // Adds one change. `relation` is the RelationInfo the change refers to (nullptr for
  // Truncate/Message/Ddl); truncated relations are resolved through `lookup`.
  void Add(const Change& change, const RelationInfo* relation,
           const std::vector<RelationInfo>& relations);
  uint64_t count() const { return count_; }
  Sha256 Finish();  // may be called once

 private:
  struct State;
  std::unique_ptr<State> state_;
  uint64_t count_ = 0;
};

// Checksum of `changes` resolved against `relations`. Fails if a change refers to a relation
// that `relations` does not describe.
Result<Sha256> ComputeChangesChecksum(const std::vector<Change>& changes,
                                      const std::vector<RelationInfo>& relations);

// A partitioned chunk's checksum: its changes' checksum bound to each change's position in the
// source transaction, so a reordering of positions is as detectable as a changed value. Without
// positions (a strict chunk) it is the changes' checksum itself.
Sha256 PositionedChecksum(const Sha256& changes_checksum, std::span<const uint32_t> positions);

// SHA-256 of arbitrary bytes (used for the manifest checksum a CommitMarker binds to).
Sha256 Sha256Of(std::span<const uint8_t> bytes);

}  // namespace trellara
