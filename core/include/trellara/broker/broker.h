// broker.h — the rules of the broker hop (DESIGN §9, docs/broker.md): how a log record is named
// in a NATS JetStream stream, and where `trellara forward` resumes.
//
// The forwarder publishes every record of a flow's local log unchanged (frame payload, checksum
// intact) to the flow's stream. Each message carries a deduplication id naming the flow, the log's
// identity and the record's offset, so the broker drops a republished record inside its
// duplicate window, and anyone reading the stream can tell which log and offset a message holds
// without trusting the stream's own sequence numbers. The broker is a transport that may lose,
// duplicate or reorder what it acknowledged; these rules never rely on it not doing so.
//
// A log's identity is the source system identifier and the LSN its log was started at
// (trellara.flows.log_started_lsn): a flow whose log was re-created gets another identity, so
// records of two logs with the same offsets are never taken for each other.
//
// Talks to no broker and no database.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trellara/base/result.h"

namespace trellara::broker {

// The identity of one local log of a flow: "<system identifier>-<log start LSN as %X/%X>".
std::string LogIdentity(uint64_t system_identifier, uint64_t log_started_lsn);

// One record's place: which flow, which of its logs, which offset.
struct RecordName {
  std::string flow;
  std::string log_identity;
  uint64_t offset = 0;
  bool operator==(const RecordName&) const = default;
};

// The message's deduplication id (JetStream's Nats-Msg-Id): "<flow>/<log identity>/<offset>".
std::string MessageId(const RecordName& name);
// Parses a deduplication id; an error names what is malformed.
Result<RecordName> ParseMessageId(const std::string& id);

// The subjects of a flow's stream. The forwarder publishes every record in offset order on
// "trellara.<flow>.log.records"; what it publishes again for a remote applier that found a hole
// goes on "trellara.<flow>.log.refill" (named apart, so the records subject's last record stays the
// forwarder's resume point). The stream holds "trellara.<flow>.log.*"; a remote applier reads both.
std::string FlowSubject(const std::string& flow);
std::string RefillSubject(const std::string& flow);
std::string StreamSubjects(const std::string& flow);
// Plain (not stored) NATS subjects between remote appliers and the forwarder: refill requests
// (answered) and the appliers' durable positions. Outside the stream's subjects.
std::string RefillRequestSubject(const std::string& flow);
std::string PositionSubject(const std::string& flow);

// A refilled record's deduplication id: the record's name and the refill that published it, so
// the broker's duplicate window (which still remembers the lost original) does not drop it.
std::string RefillMessageId(const RecordName& name, uint64_t refill);
// The name in a delivered message's id, first publish or refill alike.
Result<RecordName> ParseDeliveredId(const std::string& id);

// What a remote applier does with a record the stream delivered (core of the receiver; docs/broker.md).
// `expected` is the next offset the applier's replica of the log needs: everything below it is
// held durably, in order, with nothing missing.
enum class Arrival : uint8_t {
  Next,                  // offset == expected: verified and appended
  Duplicate,             // below expected, same content as held: skipped and counted
  ConflictingDuplicate,  // below expected, other content than held: the flow stops (quarantine)
  UncheckedDuplicate,    // below expected, no longer held to compare (reclaimed): skipped and counted
  Hole,                  // above expected: records are missing; never skipped, a refill is asked
  OtherLog,              // another flow's or another log's record: refused
};
const char* ArrivalName(Arrival arrival);
// `held_same`: for an offset below `expected`, whether the replica still holds it and with the
// same type, commit LSN and payload (nullopt: reclaimed).
Arrival DecideArrival(const RecordName& arrived, const std::string& flow, const std::string& log_identity,
                      uint64_t expected, std::optional<bool> held_same);

// A remote applier's request for everything from `from` on (`to`: the record that showed the hole,
// for the message), and the forwarder's answer.
struct RefillRequest {
  std::string log_identity;
  uint64_t from = 0;
  uint64_t to = 0;
};
std::string EncodeRefillRequest(const RefillRequest& request);
Result<RefillRequest> ParseRefillRequest(const std::string& text);
// "ok <first> <end>": republishing [first, end) on the refill subject; "gone <first retained>":
// the local log no longer holds `from` (the records are lost on both sides); "other-log <identity>".
struct RefillAnswer {
  enum class Kind : uint8_t { Ok, Gone, OtherLog } kind = Kind::Ok;
  uint64_t first = 0;
  uint64_t end = 0;
  std::string detail;
};
std::string EncodeRefillAnswer(const RefillAnswer& answer);
Result<RefillAnswer> ParseRefillAnswer(const std::string& text);

// A remote applier's durable position: every offset below `next_offset` of log `log_identity` is
// committed on its target. The forwarder records it as consumer "remote.<applier>" of the local log
// (retention keeps what a remote applier may still ask to be refilled).
struct AppliedPosition {
  std::string applier;
  std::string log_identity;
  uint64_t next_offset = 0;
};
std::string EncodePosition(const AppliedPosition& position);
Result<AppliedPosition> ParsePosition(const std::string& text);
// The local consumer that holds the log for remote applier `applier`.
std::string RemoteConsumerName(const std::string& applier);

// Where the forwarder resumes: the offset after the stream's last record of the flow. Never after
// anything the forwarder recorded itself: its own progress can be ahead of the stream (a broker
// that lost acknowledged records) and would leave a hole behind. Refused, with what to do:
//  - the stream's last record belongs to another flow or another log of this flow;
//  - the stream is ahead of the local log (the log lost records the broker holds);
//  - the stream stops below what the local log still holds (retention reclaimed the records the
//    stream lacks: they can never be published).
// With an empty stream the forwarder starts at the log's first retained offset.
Result<uint64_t> DecideForwardStart(const std::optional<RecordName>& last_in_stream, const std::string& flow,
                                    const std::string& log_identity, uint64_t log_first_offset,
                                    uint64_t log_end_offset, const std::string& stream);

}  // namespace trellara::broker
