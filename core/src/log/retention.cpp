// retention.cpp — segment retention and consumer registration (see retention.h). Never deletes a
// segment a live consumer needs without first marking that consumer lost durably, never the
// active segment, and nothing while no consumer is registered (unless a ceiling is set).
#include "trellara/log/retention.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "trellara/log/crc32c.h"
#include "trellara/base/fault.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/format.h"
#include "trellara/log/atomic_file.h"
#include "trellara/log/scan.h"

namespace trellara::log {
namespace {

std::string LostFileName(const std::string& name) { return "." + name + ".lost"; }
std::string LockFileName(const std::string& name) { return "." + name + ".lock"; }

std::string LostFileText(uint64_t next_offset, uint64_t retained_from) {
  char body[128];
  std::snprintf(body, sizeof body, "trellara-consumer-lost v1 next_offset=%" PRIu64 " log_starts_at=%" PRIu64,
                next_offset, retained_from);
  const uint32_t crc = Crc32c(body, std::strlen(body));
  char line[160];
  std::snprintf(line, sizeof line, "%s crc32c=%08x\n", body, crc);
  return line;
}

// True when another process holds the consumer's lock (a running applier). Never writes.
bool ConsumerLockHeld(const std::string& dir, const std::string& name) {
  const std::string path = JoinPath(JoinPath(dir, kConsumersDirName), LockFileName(name));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases the shared lock we may have taken
  return held;
}

}  // namespace

RetentionPlan PlanRetention(const std::vector<SegmentSize>& segments,
                            const std::map<std::string, ConsumerState>& consumers, uint64_t ceiling_bytes,
                            uint64_t keep_from_segment) {
  RetentionPlan plan;
  if (segments.empty()) return plan;
  plan.retained_from_offset = segments.front().first_offset;
  // The bound below which no live consumer needs anything. No consumer at all: nothing (the log
  // waits for its first consumer). Only lost consumers: they need nothing, but with nobody live
  // only the ceiling deletes (a reseeded consumer registers again).
  std::optional<uint64_t> live_minimum;
  for (const auto& [name, state] : consumers) {
    if (state.lost) continue;
    live_minimum = std::min(live_minimum.value_or(UINT64_MAX), state.next_offset);
  }
  uint64_t total = 0;
  for (const auto& segment : segments) total += segment.bytes;
  size_t deleted = 0;
  // Segment i holds offsets [first_i, first_{i+1}); the last segment is never deleted.
  auto deletable = [&](size_t i) { return i + 1 < segments.size() && segments[i].first_offset < keep_from_segment; };
  if (live_minimum) {
    while (deletable(deleted) && segments[deleted + 1].first_offset <= *live_minimum) {
      total -= segments[deleted].bytes;
      plan.bytes_deleted += segments[deleted].bytes;
      plan.delete_segments.push_back(segments[deleted].first_offset);
      deleted += 1;
    }
  }
  if (ceiling_bytes > 0) {
    while (total > ceiling_bytes && deletable(deleted)) {
      const uint64_t segment_end = segments[deleted + 1].first_offset;
      for (const auto& [name, state] : consumers) {
        if (state.lost || state.next_offset >= segment_end) continue;
        if (std::find(plan.mark_lost.begin(), plan.mark_lost.end(), name) == plan.mark_lost.end()) {
          plan.mark_lost.push_back(name);
        }
      }
      total -= segments[deleted].bytes;
      plan.bytes_deleted += segments[deleted].bytes;
      plan.delete_segments.push_back(segments[deleted].first_offset);
      deleted += 1;
    }
  }
  plan.retained_from_offset = segments[deleted].first_offset;
  return plan;
}

Result<std::map<std::string, ConsumerState>> ReadConsumerStates(LogDevice& device, const std::string& dir) {
  auto offsets = ReadConsumerOffsets(device, dir);
  if (!offsets.ok()) return offsets.error();
  std::map<std::string, ConsumerState> states;
  const std::string consumers = JoinPath(dir, kConsumersDirName);
  for (const auto& [name, offset] : *offsets) {
    ConsumerState state;
    state.next_offset = offset;
    const std::string lost_path = JoinPath(consumers, LostFileName(name));
    auto exists = device.Exists(lost_path);
    if (!exists.ok()) return exists.error();
    if (*exists) {
      state.lost = true;
      auto file = device.OpenFileReadOnly(lost_path);
      if (!file.ok()) {
        // Seen, then removed with its consumer (unregistered) before it was opened.
        auto still = device.Exists(lost_path);
        if (still.ok() && !*still) continue;
        return file.error();
      }
      char buf[192] = {};
      auto n = device.ReadAt(*file, 0, buf, sizeof buf - 1);
      device.CloseFile(*file);
      if (!n.ok()) return n.error();
      unsigned long long next = 0, from = 0;
      unsigned crc = 0;
      // A damaged mark still means lost: it is never written except to say so.
      if (std::sscanf(buf, "trellara-consumer-lost v1 next_offset=%llu log_starts_at=%llu crc32c=%8x", &next, &from,
                      &crc) == 3 &&
          LostFileText(next, from) == std::string(buf, *n)) {
        state.lost_at_offset = from;
      }
    }
    states[name] = state;
  }
  return states;
}

// A reader (trellara log consumers, status) lists the segments while the relay may delete the
// oldest ones (retention deletes from the front only, off the append path): a listed segment that
// is gone when opened was reclaimed in between, so the listing is taken again. Only a segment that
// still exists but cannot be opened, or one that keeps vanishing, is an error.
Result<std::vector<SegmentSize>> ListSegmentSizes(LogDevice& device, const std::string& dir) {
  constexpr int kAttempts = 20;
  for (int attempt = 1;; ++attempt) {
    auto firsts = ListSegments(device, dir);
    if (!firsts.ok()) return firsts.error();
    std::vector<SegmentSize> segments;
    bool reclaimed = false;
    for (uint64_t first : *firsts) {
      const std::string path = JoinPath(dir, SegmentFileName(first));
      auto file = device.OpenFileReadOnly(path);
      if (!file.ok()) {
        auto exists = device.Exists(path);
        if (attempt < kAttempts && exists.ok() && !*exists) {
          reclaimed = true;
          break;
        }
        return file.error();
      }
      auto size = device.FileSize(*file);
      device.CloseFile(*file);
      if (!size.ok()) return size.error();
      segments.push_back(SegmentSize{first, *size});
    }
    if (!reclaimed) return segments;
  }
}

Result<RetentionReport> ApplyRetention(LogDevice& device, const std::string& dir, uint64_t ceiling_bytes,
                                       bool (*restart_anchor)(uint8_t type)) {
  RetentionReport report;
  auto consumers = ReadConsumerStates(device, dir);
  if (!consumers.ok()) return consumers.error();
  auto segments = ListSegmentSizes(device, dir);
  if (!segments.ok()) return segments.error();
  RetentionPlan plan = PlanRetention(*segments, *consumers, ceiling_bytes);
  if (restart_anchor != nullptr && !plan.delete_segments.empty()) {
    // Find the segment of the last published anchor record, newest segment first; usually the
    // active one, so this reads one index file once per rolled segment.
    uint64_t keep_from = segments->front().first_offset;  // none found: keep everything
    for (auto it = segments->rbegin(); it != segments->rend(); ++it) {
      auto index = ReadIndexFile(device, dir, it->first_offset);
      if (!index.ok()) return index.error();
      const bool found = std::any_of(index->entries.rbegin(), index->entries.rend(),
                                     [&](const IndexEntry& e) { return restart_anchor(e.type); });
      if (found) {
        keep_from = it->first_offset;
        break;
      }
    }
    plan = PlanRetention(*segments, *consumers, ceiling_bytes, keep_from);
  }
  // Negative control (tests only, defect.log_reclaim_past_consumer): also delete the next
  // segment, which a consumer still needs — the tests' readers must catch it.
  if (fault::Hit("defect.log_reclaim_past_consumer") == fault::Action::Defect &&
      plan.delete_segments.size() + 1 < segments->size()) {
    const SegmentSize& extra = (*segments)[plan.delete_segments.size()];
    plan.delete_segments.push_back(extra.first_offset);
    plan.bytes_deleted += extra.bytes;
    plan.retained_from_offset = (*segments)[plan.delete_segments.size()].first_offset;
  }
  report.retained_from_offset = plan.retained_from_offset;
  // Lost marks are durable before any segment such a consumer needs disappears.
  const std::string consumers_dir = JoinPath(dir, kConsumersDirName);
  for (const auto& name : plan.mark_lost) {
    Status marked = WriteFileAtomically(device, consumers_dir, LostFileName(name), LostFileName(name) + ".tmp",
                                        LostFileText(consumers->at(name).next_offset, plan.retained_from_offset));
    if (!marked.ok()) {
      return MakeError("marking consumer " + name + " of " + dir + " lost (log ceiling reached) failed: " +
                       marked.error().message + "; no segment was deleted");
    }
    report.marked_lost.push_back(name);
  }
  for (uint64_t first : plan.delete_segments) {
    // Segment first, then its index: an index without a segment is an orphan recovery removes.
    TRELLARA_TRY(device.Remove(JoinPath(dir, SegmentFileName(first))));
    TRELLARA_TRY(device.Remove(JoinPath(dir, IndexFileName(first))));
    report.segments_deleted += 1;
  }
  report.bytes_deleted = plan.bytes_deleted;
  if (report.segments_deleted > 0) TRELLARA_TRY(device.SyncDirectory(dir));
  return report;
}

Status RegisterConsumer(LogDevice& device, const std::string& dir, const std::string& name) {
  TRELLARA_TRY(ValidateConsumerName(name));
  auto exists = device.Exists(dir);
  if (!exists.ok()) return exists.error();
  if (!*exists) {
    return MakeError("cannot register consumer " + name + ": log directory " + dir +
                     " does not exist; the relay creates it when the flow starts (trellara.create_flow), so check "
                     "the configured log directory");
  }
  auto states = ReadConsumerStates(device, dir);
  if (!states.ok()) return states.error();
  // The lost mark counts even when the offset file was removed by hand: only unregistering (which
  // removes both) clears it.
  auto marked = device.Exists(JoinPath(JoinPath(dir, kConsumersDirName), LostFileName(name)));
  if (!marked.ok()) return marked.error();
  if (*marked && !states->count(name)) (*states)[name] = ConsumerState{0, true, 0};
  if (auto it = states->find(name); it != states->end()) {
    if (!it->second.lost) return Status::Ok();
    const bool known = it->second.lost_at_offset > 0;  // 0: mark damaged or offset file removed
    return MakeError("consumer " + name + " of log " + dir + " was marked lost: the log's size ceiling " +
                     "(trellara.log_retention_max_size) deleted records it had not applied" +
                     (known ? " (it needed offset " + std::to_string(it->second.next_offset) +
                                  ", the log now starts at offset " + std::to_string(it->second.lost_at_offset) + ")"
                            : std::string()) +
                     ". It cannot continue: reseed the target (trellara reseed), then unregister the lost consumer "
                     "(trellara log unregister-consumer " + name + " --dir " + dir +
                     ", or SELECT trellara.unregister_consumer(flow, '" + name + "')) and start it again");
  }
  auto segments = ListSegments(device, dir);
  if (!segments.ok()) return segments.error();
  const uint64_t first = segments->empty() ? 0 : segments->front();
  Status written = WriteConsumerOffset(device, dir, name, first);
  if (!written.ok()) {
    return MakeError("cannot register consumer " + name + " of log " + dir + ": " + written.error().message +
                     "; the consumer needs write access to " + JoinPath(dir, kConsumersDirName));
  }
  return Status::Ok();
}

Result<bool> UnregisterConsumer(LogDevice& device, const std::string& dir, const std::string& name) {
  TRELLARA_TRY(ValidateConsumerName(name));
  const std::string consumers_dir = JoinPath(dir, kConsumersDirName);
  // Hold the consumer's lock while removing its files, so no applier of it starts in between.
  // flock() needs no write permission: the applier may run as another OS user than the caller
  // (the postgres server, for trellara.unregister_consumer()), so the lock file is opened read-only.
  const std::string lock_path = JoinPath(consumers_dir, LockFileName(name));
  const int lock_fd = ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock_fd < 0 && errno != ENOENT)
    return MakeError("cannot open the lock " + lock_path + " of consumer " + name + ": " + std::strerror(errno));
  struct LockGuard {
    int fd;
    ~LockGuard() {
      if (fd >= 0) ::close(fd);
    }
  } guard{lock_fd};
  if (lock_fd >= 0 && ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return MakeError("cannot lock " + lock_path + ": " + std::strerror(errno));
    char holder[32] = {};
    const ssize_t n = ::pread(lock_fd, holder, sizeof holder - 1, 0);
    std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string();
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return MakeError("consumer " + name + " of " + dir + " is in use by a running process" +
                     (pid.empty() ? std::string() : " (pid " + pid + ")") + "; stop that applier first");
  }
  bool existed = false;
  for (const std::string& file : {name, LostFileName(name)}) {
    const std::string path = JoinPath(consumers_dir, file);
    auto exists = device.Exists(path);
    if (!exists.ok()) return exists.error();
    if (!*exists) continue;
    existed = true;
    TRELLARA_TRY(device.Remove(path));
  }
  if (existed) TRELLARA_TRY(device.SyncDirectory(consumers_dir));
  return existed;
}

Result<RetentionStatus> DescribeRetention(LogDevice& device, const std::string& dir) {
  RetentionStatus status;
  auto segments = ListSegmentSizes(device, dir);
  if (!segments.ok()) return segments.error();
  auto consumers = ReadConsumerStates(device, dir);
  if (!consumers.ok()) return consumers.error();
  auto end = PublishedEndOffset(device, dir);
  if (!end.ok()) return end.error();
  status.segments = segments->size();
  status.first_offset = segments->empty() ? 0 : segments->front().first_offset;
  status.end_offset = *end;
  for (const auto& segment : *segments) status.log_bytes += segment.bytes;
  status.held_bytes = status.log_bytes;
  bool any_live = false;
  uint64_t held_offset = 0;
  for (const auto& [name, state] : *consumers) {
    ConsumerRetention c;
    c.name = name;
    c.state = state;
    c.lag_records = status.end_offset > state.next_offset ? status.end_offset - state.next_offset : 0;
    for (size_t i = 0; i < segments->size(); ++i) {
      const bool after = i + 1 < segments->size() && (*segments)[i + 1].first_offset <= state.next_offset;
      if (!after) c.retained_bytes += (*segments)[i].bytes;
    }
    c.active = ConsumerLockHeld(dir, name);
    if (state.lost) {
      status.lost_consumers += 1;
    } else if (!any_live || state.next_offset < held_offset) {  // the slowest live consumer
      status.held_by = name;
      status.held_bytes = c.retained_bytes;
      held_offset = state.next_offset;
      any_live = true;
    }
    status.consumers.push_back(std::move(c));
  }
  return status;
}

std::string RetentionStatusJson(const RetentionStatus& status) {
  auto quote = [](const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  };
  std::string json = "{\"log_bytes\":" + std::to_string(status.log_bytes) +
                     ",\"segments\":" + std::to_string(status.segments) +
                     ",\"first_offset\":" + std::to_string(status.first_offset) +
                     ",\"end_offset\":" + std::to_string(status.end_offset) +
                     ",\"held_by\":" + (status.held_by.empty() ? std::string("null") : quote(status.held_by)) +
                     ",\"held_bytes\":" + std::to_string(status.held_bytes) +
                     ",\"lost_consumers\":" + std::to_string(status.lost_consumers) + ",\"consumers\":[";
  for (size_t i = 0; i < status.consumers.size(); ++i) {
    const auto& c = status.consumers[i];
    if (i > 0) json += ",";
    json += "{\"name\":" + quote(c.name) + ",\"next_offset\":" + std::to_string(c.state.next_offset) +
            ",\"lag_records\":" + std::to_string(c.lag_records) +
            ",\"retained_bytes\":" + std::to_string(c.retained_bytes) +
            ",\"active\":" + (c.active ? "true" : "false") + ",\"lost\":" + (c.state.lost ? "true" : "false") +
            (c.state.lost ? ",\"log_starts_at\":" + std::to_string(c.state.lost_at_offset) : std::string()) + "}";
  }
  return json + "]}";
}

}  // namespace trellara::log
