// broker.cpp — record names in the stream and the forwarder's resume point (broker.h).
#include "trellara/broker/broker.h"

#include <cinttypes>
#include <cstdio>

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

std::string FlowSubject(const std::string& flow) { return "trellara." + flow + ".log"; }

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
