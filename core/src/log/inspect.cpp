// log/inspect.cpp — builds the inspection report of a log directory (see inspect.h).
#include "trellara/log/inspect.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "trellara/log/consumer_offsets.h"
#include "trellara/log/recovery.h"
#include "trellara/log/writer_failure.h"
#include "trellara/log/scan.h"

namespace trellara::log {

namespace {

using nlohmann::json;

json OptionalOffset(const std::optional<uint64_t>& value) { return value ? json(*value) : json(nullptr); }

json SegmentJson(const SegmentScan& s) {
  json j;
  j["segment"] = s.segment_name;
  j["first_offset"] = s.first_offset;
  j["records"] = s.frames.size();
  j["bytes"] = s.file_bytes;
  j["valid_end_position"] = s.valid_end_position;
  j["invalid_bytes"] = s.invalid_bytes();
  j["index_status"] = IndexStatusName(s.index_status);
  if (!s.index_detail.empty()) j["index_detail"] = s.index_detail;
  if (!s.invalid_reason.empty()) j["invalid_frame"] = s.invalid_reason;
  if (s.pending_frames > 0) j["pending_records"] = s.pending_frames;
  return j;
}

// Holds the writer lock while inspecting when no writer runs, so the log cannot change meanwhile.
class InspectionLock {
 public:
  // A reader without write access to the directory (the applier's user) cannot take the lock;
  // it then inspects as if a writer were active, which is the conservative reading.
  static Result<InspectionLock> Take(LogDevice& device, const std::string& dir) {
    auto lock = device.TryLockFile(JoinPath(dir, kLockFileName));
    if (!lock.ok()) {
      InspectionLock unlocked(device, std::nullopt);
      unlocked.lock_error_ = lock.error().message;
      return unlocked;
    }
    return InspectionLock(device, *lock);
  }
  const std::string& lock_error() const { return lock_error_; }
  InspectionLock(InspectionLock&& other) noexcept
      : device_(other.device_), lock_(other.lock_), lock_error_(std::move(other.lock_error_)) {
    other.lock_.reset();
  }
  InspectionLock(const InspectionLock&) = delete;
  ~InspectionLock() {
    if (lock_) device_.UnlockFile(*lock_);
  }
  bool writer_active() const { return !lock_.has_value(); }

 private:
  InspectionLock(LogDevice& device, std::optional<FileId> lock) : device_(device), lock_(lock) {}
  LogDevice& device_;
  std::optional<FileId> lock_;
  std::string lock_error_;
};

}  // namespace

Result<InspectReport> InspectLog(LogDevice& device, const std::string& dir, const InspectOptions& options) {
  auto exists = device.Exists(dir);
  if (!exists.ok()) return exists.error();
  if (!*exists) return MakeError("log directory " + dir + " does not exist; check the flow's log_directory");
  auto lock = InspectionLock::Take(device, dir);
  if (!lock.ok()) return lock.error();
  std::optional<IndexStatus> found_before_repair;
  uint64_t rebuilt = 0;
  if (options.repair_index) {
    if (!lock->lock_error().empty()) {
      return MakeError("cannot repair indexes of " + dir + ": " + lock->lock_error() +
                       "; run the repair as the user that owns the log directory");
    }
    if (lock->writer_active())
      return MakeError("cannot repair indexes of " + dir +
                       ": a writer holds the log (LOCK); its recovery rebuilds indexes on open — stop it first or "
                       "inspect without repairing");
    RecoveryOptions recovery;
    recovery.truncate_torn_tail = false;  // inspection reports the torn tail; the writer truncates it
    recovery.trust_index = false;
    auto report = RecoverLog(device, dir, recovery);
    if (!report.ok()) return report.error();
    found_before_repair = report->index_found;
    rebuilt = report->indexes_rebuilt;
  }
  ScanOptions scan_options;
  scan_options.writer_active = lock->writer_active();
  auto scan = ScanLog(device, dir, scan_options);
  if (!scan.ok()) return scan.error();
  json report;
  report["dir"] = dir;
  report["segments"] = scan->segments.size();
  report["records"] = scan->records();
  report["first_offset"] = OptionalOffset(scan->first_offset());
  report["last_valid_offset"] = OptionalOffset(scan->last_valid_offset());
  report["torn_tail_bytes"] = scan->torn_tail_bytes();
  IndexStatus status = scan->index_status();
  if (found_before_repair && rebuilt > 0 && status == IndexStatus::kOk) status = IndexStatus::kRebuilt;
  report["index_status"] = IndexStatusName(status);
  if (found_before_repair) {
    report["index_found"] = IndexStatusName(*found_before_repair);
    report["indexes_rebuilt"] = rebuilt;
  }
  report["writer_active"] = lock->writer_active();
  if (!lock->lock_error().empty()) report["lock_unavailable"] = lock->lock_error();
  uint64_t pending = 0;
  uint64_t bytes = 0;
  for (const auto& s : scan->segments) {
    pending += s.pending_frames;
    bytes += s.file_bytes;
  }
  report["pending_records"] = pending;
  report["log_bytes"] = bytes;
  auto corruption = scan->corruption();
  report["corruption"] = corruption ? json(*corruption) : json(nullptr);
  auto consumers = ReadConsumerOffsets(device, dir);
  json consumers_json = json::object();
  if (consumers.ok()) {
    for (const auto& [name, offset] : *consumers) consumers_json[name] = offset;
  } else {
    report["consumers_error"] = consumers.error().message;
  }
  report["consumers"] = consumers_json;
  // An fdatasync failed and no writer has recovered yet: frames past this point may exist only in
  // the page cache; the writer's recovery drops them (writer_failure.h).
  auto failure = ReadWriterFailure(device, dir);
  if (!failure.ok()) {
    report["writer_failed"] = failure.error().message;
  } else if (failure->has_value()) {
    report["writer_failed"] = json{{"durable_end", (*failure)->durable_end},
                                   {"segment_first_offset", (*failure)->segment_first_offset},
                                   {"durable_position", (*failure)->durable_position}};
  } else {
    report["writer_failed"] = nullptr;
  }
  json segments = json::array();
  for (const auto& s : scan->segments) segments.push_back(SegmentJson(s));
  report["segment_list"] = segments;
  InspectReport out;
  out.json = report.dump(-1, ' ', false, json::error_handler_t::replace);
  out.corrupt = corruption.has_value();
  if (corruption) out.corruption = *corruption;
  return out;
}

}  // namespace trellara::log
