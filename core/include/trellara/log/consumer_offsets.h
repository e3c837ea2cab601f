// consumer_offsets.h — registered consumers of a log directory and the retention they imply.
//
// A consumer's offset is the next offset it needs: every offset below it is applied durably on
// the consumer's side and may be deleted from the log. `consumers/<name>` is replaced atomically
// (write a temporary file, fdatasync, rename, fsync the directory), so a crash leaves either the
// old or the new offset, never a torn one. Retention never deletes a segment that any registered
// consumer still needs, never the last (active) segment, and nothing at all when no consumer is
// registered (an unregistered log is kept, not emptied).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "trellara/log/device.h"
#include "trellara/base/result.h"

namespace trellara::log {

// The consumer `trellara apply` registers for a flow (consumers/applier); one definition.
inline constexpr const char* kApplierConsumer = "applier";
// The consumer `trellara forward` registers (consumers/forwarder): it holds records in a broker,
// not on a target. One definition.
inline constexpr const char* kForwarderConsumer = "forwarder";
// What a running `trellara apply` says about its retries and reconnects, for `trellara status`
// (relative to the log directory; its leading '.' keeps it out of the consumer names). One
// definition: the applier writes it, status reads it.
inline constexpr const char* kApplierStateFile = "consumers/.applier.state";

// Names are 1..64 characters of [A-Za-z0-9_.-], not starting with '.'.
Status ValidateConsumerName(const std::string& name);

// Atomically records that consumer `name` needs offsets >= next_offset.
Status WriteConsumerOffset(LogDevice& device, const std::string& dir, const std::string& name, uint64_t next_offset);

// Every registered consumer and its next offset. A damaged consumer file is an error naming it.
Result<std::map<std::string, uint64_t>> ReadConsumerOffsets(LogDevice& device, const std::string& dir);

struct ReclaimReport {
  uint64_t segments_deleted = 0;
  uint64_t bytes_deleted = 0;
  uint64_t retained_from_offset = 0;  // first offset still in the log
};

// Deletes segments (and their index files) whose every offset is below the minimum consumer
// offset. Safe to run while a writer appends: it never touches the last segment.
Result<ReclaimReport> ReclaimSegments(LogDevice& device, const std::string& dir);

}  // namespace trellara::log
