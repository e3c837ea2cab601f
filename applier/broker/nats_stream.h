// nats_stream.h — the NATS JetStream adapter (libnats, Debian's libnats-dev): one flow's stream on
// a JetStream cluster, as `trellara forward` publishes to it. The rules (record names, where to
// resume) are core's (trellara/broker/broker.h); this file only talks to the broker.
//
// Every call returns a Result: the broker's failures (no quorum, a timeout, a connection lost) are
// values the caller retries, never exceptions. It never reports a record published unless the
// stream acknowledged it.
#pragma once

#include <cstdint>
#include <map>
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
  std::string subject;               // the flow's records subject (core FlowSubject)
  std::string stream_subjects;       // what the stream holds (core StreamSubjects): records and refills
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
  // `misconfigured` (when given) is set when the failure will not pass by retrying: the stream
  // exists with other subjects or replicas, its subjects overlap another stream's, or the broker
  // refuses its configuration (not clustered for 3 replicas...). Other failures are the broker's
  // availability and are retried by the callers.
  static Result<std::unique_ptr<NatsStream>> Open(const StreamSettings& settings, bool* misconfigured = nullptr);
  ~NatsStream();
  NatsStream(const NatsStream&) = delete;
  NatsStream& operator=(const NatsStream&) = delete;

  // The deduplication id and stream sequence of the last record of `subject` (default: the
  // records subject); nullopt when the subject holds none.
  struct Last {
    std::string message_id;
    uint64_t sequence = 0;
    std::optional<std::string> format_header;  // Trellara-Format, Trellara-Count: a packed message
    std::optional<std::string> count_header;   // (core pack.h ParsePublishedSpan); absent: one record
  };
  Result<std::optional<Last>> LastRecord(const std::string& subject = "");

  // Publishes `payload` with deduplication id `message_id` and the headers given, expecting the
  // subject's last record to be at `expected_last_sequence` (0: no record yet), and waits for the
  // acknowledgement: `ack` when the stream acknowledged it, else `error` saying why not.
  struct Published {
    std::optional<PublishAck> ack;
    std::optional<PublishError> error;
  };
  // `subject` empty: the records subject. `expected_last_sequence` nullopt: no expectation (a refill).
  Published Publish(const std::string& message_id, std::optional<uint64_t> expected_last_sequence,
                    const std::vector<std::pair<std::string, std::string>>& headers, std::span<const uint8_t> payload,
                    const std::string& subject = "");

  // Publishes `records` in order, the first expecting the subject's last record at
  // `expected_last_sequence` (0: none), the others with no expectation, without waiting
  // between them (one connection keeps their order); then waits up to the publish wait for every
  // acknowledgement. One answer per record, in order: an ack, or why there is none.
  struct OutRecord {
    std::string message_id;
    std::vector<std::pair<std::string, std::string>> headers;
    std::span<const uint8_t> payload;
  };
  // `subject` empty: the records subject; `expected_last_sequence` nullopt: no expectation at all.
  std::vector<Published> PublishBatch(const std::vector<OutRecord>& records,
                                      std::optional<uint64_t> expected_last_sequence, const std::string& subject = "");

  // ---- reading (a remote applier) ------------------------------------------------------
  // One message of the stream as delivered: its stream sequence, subject, headers, payload.
  struct Delivered {
    uint64_t sequence = 0;
    std::string subject;
    std::string message_id;
    std::optional<std::string> offset_header;  // Trellara-Offset: the (first) record's offset
    std::optional<std::string> format_header;  // Trellara-Format and Trellara-Count: a packed message
    std::optional<std::string> count_header;   // (core pack.h); both absent: an older forwarder's record
    std::optional<uint64_t> offset;  // Trellara-Offset
    std::optional<uint8_t> type;     // Trellara-Type (a single-record message only)
    std::string commit_lsn;          // Trellara-Commit-Lsn as written (%X/%X) (a single-record message only)
    std::optional<std::string> timeline_header;  // Trellara-Timeline: the log's timeline (core replica_intake.h)
    std::vector<uint8_t> payload;    // the packed body, or the single record's payload
  };
  // Starts (or restarts) reading the stream's subjects from stream sequence `from_sequence`, in
  // stream order, through a pull consumer pulled in batches (no acknowledgements: the reader
  // decides what it holds). Replaces any earlier reading (its consumer is deleted).
  Status StartReading(uint64_t from_sequence);
  // The stream's last sequence (any subject): asks the stream's leader, and fails unless a
  // majority of the stream's replicas is current (a leader that has not noticed yet that its peers
  // are gone still answers).
  Result<uint64_t> LastSequence();
  // The next message, or nullopt when none arrived within `timeout_ms`. An error: reading must be
  // started again (the consumer was lost with the broker).
  Result<std::optional<Delivered>> Read(int64_t timeout_ms);

  // ---- plain NATS messages (not stored): refill requests and positions --------------------
  Status Send(const std::string& subject, const std::string& text);
  // A request and its answer within `timeout_ms` (an error when nobody answered).
  Result<std::string> Ask(const std::string& subject, const std::string& text, int64_t timeout_ms);
  // Listens on `subject` (once; later calls are no-ops) ...
  Status Listen(const std::string& subject);
  // ... and hands over what arrived on it, waiting at most `timeout_ms` (0: only what is there).
  struct Heard {
    std::string text;
    std::string reply;  // where to answer; empty when no answer is asked
  };
  Result<std::optional<Heard>> Hear(const std::string& subject, int64_t timeout_ms);

  // Whether the connection is up right now (a quorum is a different question: see Publish).
  bool Connected() const;
  const StreamSettings& settings() const { return settings_; }

 private:
  explicit NatsStream(StreamSettings settings);
  Status Connect();
  Status EnsureStream(bool* misconfigured);
  void StopReading();
  Status TopUpPullRequests();  // keeps pull requests outstanding while reading

  StreamSettings settings_;
  struct Handles;
  std::unique_ptr<Handles> handles_;
};

// At the end of the process, after every NatsStream is gone: stops the NATS client library's own
// threads (and waits up to 2 s for them), so none runs while the process tears down. A no-op when
// no connection was made.
void CloseClientLibrary();

}  // namespace trellara::cli::broker
