// nats_stream.h — the NATS JetStream adapter (libnats, Debian's libnats-dev): one flow's stream on
// a JetStream cluster, as `trellara forward` publishes to it. The rules (record names, where to
// resume) are core's (trellara/broker/broker.h); this file only talks to the broker.
//
// Every call returns a Result: the broker's failures (no quorum, a timeout, a connection lost) are
// values the caller retries, never exceptions. It never reports a record published unless the
// stream acknowledged it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trellara/base/result.h"

namespace trellara::cli::broker {

struct StreamSettings {
  std::vector<std::string> servers;  // nats://host:port, one per cluster node
  std::string stream;                // the stream's name
  std::string subject;               // the flow's subject (core FlowSubject)
  std::string credentials;           // a .creds file, or empty
  int replicas = 3;                  // R3: a record is acknowledged once a quorum stored it
  int64_t publish_wait_ms = 5000;    // how long a publish waits for its acknowledgement
};

struct PublishAck {
  uint64_t sequence = 0;   // the stream's sequence of the record
  bool duplicate = false;  // the broker had it already (deduplication id inside its window)
};

// Why a publish was not acknowledged.
enum class PublishFailure : uint8_t {
  Unavailable,   // no acknowledgement: no quorum, a timeout, the connection down — retry
  WrongLast,     // the stream's last record on the subject is not the one expected — resync
  Refused,       // the broker refused it for another reason (named in the message)
};
struct PublishError {
  PublishFailure kind = PublishFailure::Unavailable;
  std::string message;
};

class NatsStream {
 public:
  // Connects to the cluster (reconnecting on its own for as long as the object lives) and makes
  // sure the stream exists: created with file storage, `replicas` replicas, the subject and a
  // two-minute duplicate window; an existing stream must hold the subject and that many replicas.
  static Result<std::unique_ptr<NatsStream>> Open(const StreamSettings& settings);
  ~NatsStream();
  NatsStream(const NatsStream&) = delete;
  NatsStream& operator=(const NatsStream&) = delete;

  // The deduplication id and stream sequence of the subject's last record; nullopt when the
  // subject holds none.
  struct Last {
    std::string message_id;
    uint64_t sequence = 0;
  };
  Result<std::optional<Last>> LastRecord();

  // Publishes `payload` with deduplication id `message_id` and the headers given, expecting the
  // subject's last record to be at `expected_last_sequence` (0: no record yet), and waits for the
  // acknowledgement: `ack` when the stream acknowledged it, else `error` saying why not.
  struct Published {
    std::optional<PublishAck> ack;
    std::optional<PublishError> error;
  };
  Published Publish(const std::string& message_id, uint64_t expected_last_sequence,
                    const std::vector<std::pair<std::string, std::string>>& headers, std::span<const uint8_t> payload);

  // Whether the connection is up right now (a quorum is a different question: see Publish).
  bool Connected() const;
  const StreamSettings& settings() const { return settings_; }

 private:
  explicit NatsStream(StreamSettings settings);
  Status Connect();
  Status EnsureStream();

  StreamSettings settings_;
  struct Handles;
  std::unique_ptr<Handles> handles_;
};

}  // namespace trellara::cli::broker
