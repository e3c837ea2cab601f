// retention.h — which segments of a log may be deleted, and the consumers that hold the rest
// (DESIGN §2 "log retention", §5; docs/log.md "Consumers and retention").
//
// Rules (PlanRetention is the one place they are decided; it does no I/O):
//  * A segment is deleted only when every live registered consumer's next offset is at or past
//    the segment's end, i.e. no live consumer needs any offset in it.
//  * The last (active) segment is never deleted.
//  * With no consumer registered at all, nothing is deleted (like an unused replication slot the
//    DBA has not dropped yet, the log waits for its first consumer) — unless a ceiling is set.
//  * A lost consumer (marked by the ceiling, below) holds nothing; it must be reseeded and
//    unregistered.
//  * Ceiling (optional, off by default, like max_slot_wal_keep_size): when the segments left after
//    the rule above still exceed `ceiling_bytes`, the oldest non-active segments are deleted until
//    the log fits — but only after every live consumer that still needs an offset in them has been
//    durably marked lost (ApplyRetention writes the marks first, then deletes). A lost consumer's
//    applier refuses to continue and says to reseed (RegisterConsumer).
//
// Lost marks live in `consumers/.<name>.lost` (names starting with '.' are not consumer offsets),
// so the applier's own atomic offset writes can never erase one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trellara/log/device.h"
#include "trellara/base/result.h"

namespace trellara::log {

struct SegmentSize {
  uint64_t first_offset = 0;
  uint64_t bytes = 0;  // segment file bytes (its index file is not counted)
};

struct ConsumerState {
  uint64_t next_offset = 0;  // the next offset it needs; everything below is applied durably
  bool lost = false;
  uint64_t lost_at_offset = 0;  // when lost: the first offset the log still held after the drop
};

struct RetentionPlan {
  std::vector<uint64_t> delete_segments;  // first offsets, oldest first (a prefix of the log)
  std::vector<std::string> mark_lost;     // consumers to mark lost before deleting anything
  uint64_t retained_from_offset = 0;      // first offset left after the deletions
  uint64_t bytes_deleted = 0;
};

// ceiling_bytes == 0: no ceiling. Segments whose first offset is >= keep_from_segment (the one
// holding the writer's restart anchor, below) are never deleted, not even by the ceiling.
RetentionPlan PlanRetention(const std::vector<SegmentSize>& segments,
                            const std::map<std::string, ConsumerState>& consumers, uint64_t ceiling_bytes,
                            uint64_t keep_from_segment = UINT64_MAX);

// Consumers with their lost marks (ReadConsumerOffsets plus the .lost files).
Result<std::map<std::string, ConsumerState>> ReadConsumerStates(LogDevice& device, const std::string& dir);

// Segments of `dir` with their sizes, oldest first.
Result<std::vector<SegmentSize>> ListSegmentSizes(LogDevice& device, const std::string& dir);

struct RetentionReport {
  uint64_t segments_deleted = 0;
  uint64_t bytes_deleted = 0;
  uint64_t retained_from_offset = 0;
  std::vector<std::string> marked_lost;
};

// Plans and carries out retention on `dir`: lost marks first (atomic, durable), then segment
// files, then their index files, then a directory fsync. Only the log's writer (the relay) calls
// this, off its append path. Safe while consumers read: they never need a deleted segment unless
// the ceiling marked them lost first.
// `restart_anchor` (optional): the record types the writer reads back on restart (the relay: the
// last frame completing a transaction, whose commit LSN is what the log covers). The segment
// holding the last published record of such a type is never deleted, so a restart can always
// find it — even when every consumer is past it and the active segment holds only chunks of one
// large transaction. When no such record is published, nothing is deleted.
Result<RetentionReport> ApplyRetention(LogDevice& device, const std::string& dir, uint64_t ceiling_bytes,
                                       bool (*restart_anchor)(uint8_t type) = nullptr);

// The applier's start (one call): refuses a consumer marked lost, with the reseed remedy, and
// registers a new consumer at the log's first offset so the relay retains from there on.
// Registering an existing consumer changes nothing.
Status RegisterConsumer(LogDevice& device, const std::string& dir, const std::string& name);

// Removes a consumer: its offset file and its lost mark (its lock file stays: it registers
// nothing). Refuses while a process holds the consumer's lock (a running applier): stop it
// first. Returns whether it existed.
Result<bool> UnregisterConsumer(LogDevice& device, const std::string& dir, const std::string& name);

// What retention looks like now, for `trellara log consumers`, trellara.consumers(),
// trellara.status() and trellara.check().
struct ConsumerRetention {
  std::string name;
  ConsumerState state;
  uint64_t lag_records = 0;     // published end offset minus next_offset (0 when ahead)
  uint64_t retained_bytes = 0;  // bytes of the segments from the one holding next_offset to the end
  bool active = false;          // a process holds its lock (an applier is running)
};
struct RetentionStatus {
  uint64_t log_bytes = 0;  // segment files
  uint64_t segments = 0;
  uint64_t first_offset = 0;
  uint64_t end_offset = 0;  // published end (next offset a reader will see)
  std::vector<ConsumerRetention> consumers;
  // The live consumer that holds the most log (the slowest), empty when none is registered.
  std::string held_by;
  uint64_t held_bytes = 0;  // what held_by retains (the whole log when no live consumer)
  uint64_t lost_consumers = 0;
};
Result<RetentionStatus> DescribeRetention(LogDevice& device, const std::string& dir);
std::string RetentionStatusJson(const RetentionStatus& status);

}  // namespace trellara::log
