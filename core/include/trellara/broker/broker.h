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

// The subject a flow's records are published on: "trellara.<flow>.log".
std::string FlowSubject(const std::string& flow);

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
