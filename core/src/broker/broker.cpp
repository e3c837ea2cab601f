// broker.cpp — record names in the stream and the forwarder's resume point (broker.h).
#include "trellara/broker/broker.h"

#include <cinttypes>
#include <cstdio>
#include <vector>

namespace trellara::broker {

std::string LogIdentity(uint64_t system_identifier, uint64_t log_started_lsn) {
  char lsn[40];
  std::snprintf(lsn, sizeof lsn, "%" PRIX64 "/%" PRIX64, log_started_lsn >> 32, log_started_lsn & 0xffffffffu);
  return std::to_string(system_identifier) + "-" + lsn;
}

std::string MessageId(const RecordName& name) {
  return name.flow + "/" + name.log_identity + "/" + std::to_string(name.offset);
}

Result<RecordName> ParseMessageId(const std::string& id) {
  // The identity holds one '/' (the LSN): flow / sysid-hi/lo / offset.
  const auto first = id.find('/');
  const auto last = id.rfind('/');
  if (first == std::string::npos || last == first)
    return MakeError("broker message id \"" + id + "\" is not <flow>/<log identity>/<offset>");
  RecordName name;
  name.flow = id.substr(0, first);
  name.log_identity = id.substr(first + 1, last - first - 1);
  const std::string offset = id.substr(last + 1);
  // The identity as LogIdentity writes it: "<digits>-<HEX>/<HEX>".
  const std::string& identity = name.log_identity;
  const auto dash = identity.find('-');
  const auto slash = identity.find('/');
  const bool identity_ok = dash != std::string::npos && dash > 0 && slash != std::string::npos && slash > dash + 1 &&
                           slash + 1 < identity.size() &&
                           identity.find_first_not_of("0123456789") == dash &&
                           identity.find_first_not_of("0123456789ABCDEF", dash + 1) == slash &&
                           identity.find_first_not_of("0123456789ABCDEF", slash + 1) == std::string::npos;
  if (name.flow.empty() || !identity_ok || offset.empty() || offset.size() > 20 ||
      offset.find_first_not_of("0123456789") != std::string::npos)
    return MakeError("broker message id \"" + id + "\" is not <flow>/<log identity>/<offset>");
  try {
    name.offset = std::stoull(offset);
  } catch (const std::exception&) {
    return MakeError("broker message id \"" + id + "\": offset " + offset + " is out of range");
  }
  return name;
}

std::string FlowSubject(const std::string& flow) { return "trellara." + flow + ".log.records"; }
std::string RefillSubject(const std::string& flow) { return "trellara." + flow + ".log.refill"; }
std::string StreamSubjects(const std::string& flow) { return "trellara." + flow + ".log.*"; }
std::string RefillRequestSubject(const std::string& flow) { return "_trellara." + flow + ".refill"; }
std::string PositionSubject(const std::string& flow) { return "_trellara." + flow + ".position"; }

std::string RefillMessageId(const RecordName& name, uint64_t refill) {
  return MessageId(name) + "/refill-" + std::to_string(refill);
}

Result<RecordName> ParseDeliveredId(const std::string& id) {
  const auto marker = id.rfind("/refill-");
  if (marker == std::string::npos) return ParseMessageId(id);
  const std::string refill = id.substr(marker + 8);
  if (refill.empty() || refill.size() > 20 || refill.find_first_not_of("0123456789") != std::string::npos)
    return MakeError("broker message id \"" + id + "\" is not <flow>/<log identity>/<offset>/refill-<n>");
  return ParseMessageId(id.substr(0, marker));
}

const char* ArrivalName(Arrival arrival) {
  switch (arrival) {
    case Arrival::Next: return "next";
    case Arrival::Duplicate: return "duplicate";
    case Arrival::ConflictingDuplicate: return "conflicting_duplicate";
    case Arrival::UncheckedDuplicate: return "unchecked_duplicate";
    case Arrival::Hole: return "hole";
    case Arrival::OtherLog: return "other_log";
  }
  return "unknown";
}

Arrival DecideArrival(const RecordName& arrived, const std::string& flow, const std::string& log_identity,
                      uint64_t expected, std::optional<bool> held_same) {
  if (arrived.flow != flow || arrived.log_identity != log_identity) return Arrival::OtherLog;
  if (arrived.offset == expected) return Arrival::Next;
  if (arrived.offset > expected) return Arrival::Hole;
  if (!held_same) return Arrival::UncheckedDuplicate;
  return *held_same ? Arrival::Duplicate : Arrival::ConflictingDuplicate;
}

namespace {

// Splits `text` at single spaces; every word non-empty.
std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  size_t start = 0;
  for (;;) {
    const size_t space = text.find(' ', start);
    words.push_back(text.substr(start, space == std::string::npos ? std::string::npos : space - start));
    if (space == std::string::npos) break;
    start = space + 1;
  }
  for (const auto& w : words)
    if (w.empty()) return {};
  return words;
}

std::optional<uint64_t> Number(const std::string& text) {
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string EncodeRefillRequest(const RefillRequest& request) {
  return "refill " + request.log_identity + " " + std::to_string(request.from) + " " + std::to_string(request.to);
}

Result<RefillRequest> ParseRefillRequest(const std::string& text) {
  const auto w = Words(text);
  RefillRequest request;
  std::optional<uint64_t> from, to;
  if (w.size() != 4 || w[0] != "refill" || !(from = Number(w[2])) || !(to = Number(w[3])) || *from > *to)
    return MakeError("refill request \"" + text + "\" is not \"refill <log identity> <from> <to>\" with from <= to");
  request.log_identity = w[1];
  request.from = *from;
  request.to = *to;
  return request;
}

std::string EncodeRefillAnswer(const RefillAnswer& answer) {
  switch (answer.kind) {
    case RefillAnswer::Kind::Ok: return "ok " + std::to_string(answer.first) + " " + std::to_string(answer.end);
    case RefillAnswer::Kind::Gone: return "gone " + std::to_string(answer.first);
    case RefillAnswer::Kind::OtherLog: return "other-log " + answer.detail;
  }
  return "";
}

Result<RefillAnswer> ParseRefillAnswer(const std::string& text) {
  const auto w = Words(text);
  RefillAnswer answer;
  std::optional<uint64_t> a, b;
  if (w.size() == 3 && w[0] == "ok" && (a = Number(w[1])) && (b = Number(w[2])) && *a <= *b) {
    answer.first = *a;
    answer.end = *b;
    return answer;
  }
  if (w.size() == 2 && w[0] == "gone" && (a = Number(w[1]))) {
    answer.kind = RefillAnswer::Kind::Gone;
    answer.first = *a;
    return answer;
  }
  if (w.size() == 2 && w[0] == "other-log") {
    answer.kind = RefillAnswer::Kind::OtherLog;
    answer.detail = w[1];
    return answer;
  }
  return MakeError("refill answer \"" + text + "\" is not \"ok <first> <end>\", \"gone <first>\" or \"other-log <identity>\"");
}

std::string EncodePosition(const AppliedPosition& position) {
  return "position " + position.applier + " " + position.log_identity + " " + std::to_string(position.next_offset);
}

Result<AppliedPosition> ParsePosition(const std::string& text) {
  const auto w = Words(text);
  std::optional<uint64_t> next;
  if (w.size() != 4 || w[0] != "position" || !(next = Number(w[3])))
    return MakeError("applied position \"" + text + "\" is not \"position <applier> <log identity> <next offset>\"");
  return AppliedPosition{w[1], w[2], *next};
}

std::string RemoteConsumerName(const std::string& applier) { return "remote." + applier; }

Result<uint64_t> DecideForwardStart(const std::optional<RecordName>& last_in_stream, const std::string& flow,
                                    const std::string& log_identity, uint64_t log_first_offset,
                                    uint64_t log_end_offset, const std::string& stream) {
  if (!last_in_stream) return log_first_offset;
  const RecordName& last = *last_in_stream;
  if (last.flow != flow)
    return MakeError("stream " + stream + " holds records of flow " + last.flow + " on the subject of flow " + flow +
                     "; give flow " + flow + " its own stream ([transport] stream)");
  if (last.log_identity != log_identity)
    return MakeError("stream " + stream + " holds records of another log of flow " + flow + " (log " +
                     last.log_identity + "; the local log is " + log_identity +
                     ": it was created again); a remote applier cannot tell the two apart: give the new log a new "
                     "stream ([transport] stream), or purge this one once every remote applier has applied it");
  if (last.offset >= log_end_offset)
    return MakeError("stream " + stream + " holds offset " + std::to_string(last.offset) + " of flow " + flow +
                     " but the local log ends at " + std::to_string(log_end_offset) +
                     ": the local log lost records the broker holds; stop the flow's appliers and run trellara "
                     "check --config <flow.toml>");
  if (last.offset + 1 < log_first_offset)
    return MakeError("stream " + stream + " ends at offset " + std::to_string(last.offset) + " of flow " + flow +
                     " but the local log starts at " + std::to_string(log_first_offset) + ": offsets " +
                     std::to_string(last.offset + 1) + ".." + std::to_string(log_first_offset - 1) +
                     " were reclaimed before they were published and can never be; re-seed the remote targets "
                     "(trellara snapshot) from a new stream");
  return last.offset + 1;
}

}  // namespace trellara::broker
