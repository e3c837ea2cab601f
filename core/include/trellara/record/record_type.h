// record_type.h — the type byte of a log frame, and which types belong to and end a transaction.
// One definition: the log format, the codec, the relay, the applier and the inspectors use it.
#pragma once

#include <cstdint>

namespace trellara {

// The log itself treats the type as an opaque byte; these are the values the product writes.
enum class RecordType : uint8_t {
  Envelope = 1,      // a whole source transaction
  Chunk = 2,         // part of a large transaction's changes
  Manifest = 3,      // a large transaction's list of chunks
  CommitMarker = 4,  // a large transaction's commit: it is whole once this is durable
  Progress = 5,      // no transaction: an LSN the relay has passed (capture/relay_progress.h)
  Test = 200,        // written only by `trellara log write-test` and benchmarks
};

// A frame of a source transaction (envelope, chunk, manifest or commit marker).
constexpr bool IsTransactionRecord(uint8_t type) {
  return type >= static_cast<uint8_t>(RecordType::Envelope) && type <= static_cast<uint8_t>(RecordType::CommitMarker);
}

// The frame that completes a source transaction: its envelope, or a chunked one's commit marker.
constexpr bool EndsTransaction(uint8_t type) {
  return type == static_cast<uint8_t>(RecordType::Envelope) || type == static_cast<uint8_t>(RecordType::CommitMarker);
}

}  // namespace trellara
