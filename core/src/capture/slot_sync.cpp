// slot_sync.cpp — the standby slot sync and post-promotion log rules (slot_sync.h). Pure functions.
#include "trellara/capture/slot_sync.h"

#include "trellara/log/consumer_offsets.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

namespace trellara {

namespace {
std::string SlotSyncLsnText(uint64_t lsn) {
  char text[32];
  std::snprintf(text, sizeof text, "%X/%X", static_cast<unsigned>(lsn >> 32), static_cast<unsigned>(lsn));
  return text;
}
}  // namespace

bool XidPrecedes(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }

SlotSyncDecision DecideSlotSync(const PrimarySlot& primary, const std::optional<LocalSlot>& local,
                                bool local_is_new, uint64_t replay_lsn, const std::string& slot_name) {
  SlotSyncDecision d;
  if (primary.restart_lsn == 0 || primary.confirmed_flush_lsn == 0 || primary.catalog_xmin == 0) {
    d.reason = "slot \"" + slot_name + "\" on the primary has no restart, confirmed position or catalog horizon yet";
    return d;
  }
  if (primary.restart_lsn > replay_lsn) {
    d.reason = "slot \"" + slot_name + "\" on the primary restarts at " + SlotSyncLsnText(primary.restart_lsn) +
               ", beyond what this standby has replayed (" + SlotSyncLsnText(replay_lsn) + ")";
    return d;
  }
  const uint64_t confirmed = primary.confirmed_flush_lsn < replay_lsn ? primary.confirmed_flush_lsn : replay_lsn;
  if (local.has_value()) {
    const bool behind = primary.restart_lsn < local->restart_lsn ||
                        XidPrecedes(primary.catalog_xmin, local->catalog_xmin);
    if (behind && local_is_new) {
      d.reason = "slot \"" + slot_name + "\" on the primary (restart " + SlotSyncLsnText(primary.restart_lsn) + ", catalog_xmin " +
                 std::to_string(primary.catalog_xmin) + ") is behind what this standby can reserve (restart " +
                 SlotSyncLsnText(local->restart_lsn) + ", catalog_xmin " + std::to_string(local->catalog_xmin) +
                 "); waiting for the primary's slot to pass it";
      return d;
    }
    if (behind || confirmed < local->confirmed_flush_lsn) {
      d.kind = SlotSyncDecision::Kind::kKeep;
      d.reason = "slot \"" + slot_name + "\" on the primary is behind this standby's copy; positions never move back";
      return d;
    }
    if (!local_is_new && primary.restart_lsn == local->restart_lsn && primary.catalog_xmin == local->catalog_xmin &&
        confirmed == local->confirmed_flush_lsn) {
      d.kind = SlotSyncDecision::Kind::kKeep;
      d.reason = "slot \"" + slot_name + "\" is in step with the primary";
      return d;
    }
  }
  d.kind = SlotSyncDecision::Kind::kSet;
  d.restart_lsn = primary.restart_lsn;
  d.catalog_xmin = primary.catalog_xmin;
  d.confirmed_flush_lsn = confirmed;
  return d;
}

LogTimelineDecision DecideLogTimeline(std::optional<uint32_t> recorded_timeline, uint32_t current_timeline) {
  if (!recorded_timeline.has_value()) return LogTimelineDecision::kRecord;
  if (*recorded_timeline == current_timeline) return LogTimelineDecision::kUse;
  if (*recorded_timeline < current_timeline) return LogTimelineDecision::kSetAside;
  return LogTimelineDecision::kRefuse;
}

std::string SetAsideLogDirectory(const std::string& log_directory, uint32_t written_timeline) {
  std::string dir = log_directory;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir + ".timeline" + std::to_string(written_timeline);
}

std::string FormatLogTimeline(const LogTimeline& timeline) {
  std::string text = std::to_string(timeline.timeline) + "\n";
  if (timeline.parent_timeline != 0)
    text += "branched_from " + std::to_string(timeline.parent_timeline) + " at " + SlotSyncLsnText(timeline.branch_lsn) +
            "\n";
  return text;
}

Result<LogTimeline> ParseLogTimeline(const std::string& text) {
  LogTimeline out;
  unsigned long tli = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%lu%n", &tli, &consumed) != 1 || tli == 0 || tli > UINT32_MAX)
    return MakeError("does not start with a timeline number (\"" + text.substr(0, 40) + "\")");
  out.timeline = static_cast<uint32_t>(tli);
  std::string rest = text.substr(static_cast<size_t>(consumed));
  size_t start = rest.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return out;
  rest = rest.substr(start);
  unsigned long parent = 0;
  unsigned hi = 0, lo = 0;
  char tail[8] = {0};
  int n = std::sscanf(rest.c_str(), "branched_from %lu at %X/%X %7s", &parent, &hi, &lo, tail);
  if (n != 3 || parent == 0 || parent >= tli)
    return MakeError("has a second line that is not \"branched_from <parent timeline> at <LSN>\" with a parent "
                     "below timeline " + std::to_string(tli) + " (\"" + rest.substr(0, 60) + "\")");
  out.parent_timeline = static_cast<uint32_t>(parent);
  out.branch_lsn = (static_cast<uint64_t>(hi) << 32) | lo;
  return out;
}

TimelineContinuity DecideTimelineContinuity(const std::optional<LogTimeline>& log, const TargetTimelineFacts& target,
                                            const std::string& flow) {
  TimelineContinuity d;
  if (!log.has_value()) return d;
  const uint32_t n = log->timeline;
  const std::string on_flow = "flow \"" + flow + "\": ";
  if (target.applied_timeline.has_value() && *target.applied_timeline == n) return d;
  if (target.applied_timeline.has_value() && *target.applied_timeline > n) {
    d.kind = TimelineContinuity::Kind::kFailClosed;
    d.reason = on_flow + "the log was written on source timeline " + std::to_string(n) +
               ", but the target already applied from timeline " + std::to_string(*target.applied_timeline) +
               ": this log's server was superseded by a promotion (an old primary, or a copy of its log)";
    d.next_step = "point the applier at the log of the current primary (its timeline is " +
                  std::to_string(*target.applied_timeline) + " or later); never apply this log";
    return d;
  }
  const bool applied_anything = target.max_applied_lsn != 0;
  if (n > 1 && log->parent_timeline == 0 && applied_anything) {
    d.kind = TimelineContinuity::Kind::kFailClosed;
    d.reason = on_flow + "the log was written on source timeline " + std::to_string(n) +
               " and records no branch point, and the target has applied transactions (through " +
               SlotSyncLsnText(target.max_applied_lsn) +
               ") from an earlier timeline or from logs that recorded none: whether they are all on this server "
               "cannot be checked";
    d.next_step = "compare the target with the source (trellara verify --config <flow>); if it matches, record the "
                  "timeline on the target (INSERT INTO trellara.source_timelines (flow, timeline) VALUES ('" +
                  flow + "', " + std::to_string(n) + ")) and rerun; otherwise reseed (trellara repair-plan)";
    return d;
  }
  if (log->parent_timeline != 0 && target.applied_past_branch > 0) {
    d.kind = TimelineContinuity::Kind::kFailClosed;
    d.reason = on_flow + "the target holds " + std::to_string(target.applied_past_branch) +
               " transaction(s) with commit LSN " + SlotSyncLsnText(target.first_past_branch) + " .. " +
               SlotSyncLsnText(target.last_past_branch) + " applied from timeline " +
               (target.applied_timeline ? std::to_string(*target.applied_timeline) : std::string("(unrecorded)")) +
               " past " + SlotSyncLsnText(log->branch_lsn) + ", where timeline " + std::to_string(n) +
               " (this log's server, promoted) branched off timeline " + std::to_string(log->parent_timeline) +
               ": the promoted server never had them, so the target is ahead of its source";
    d.next_step = "do not apply: reseed the target from the promoted server (trellara repair-plan --config <flow> "
                  "gives the steps), or, to keep the target, remove those transactions' effects by hand first";
    return d;
  }
  d.kind = TimelineContinuity::Kind::kRecord;
  d.reason = on_flow + "the target now follows source timeline " + std::to_string(n) +
             (log->parent_timeline != 0 ? " (branched off timeline " + std::to_string(log->parent_timeline) + " at " +
                                              SlotSyncLsnText(log->branch_lsn) + "; nothing applied past it)"
                                        : std::string());
  return d;
}

uint64_t AppliedConsumerOffset(const std::map<std::string, log::ConsumerState>& consumers) {
  uint64_t least = UINT64_MAX;
  for (const auto& [name, state] : consumers) {
    if (name == log::kForwarderConsumer || state.lost) continue;
    least = std::min(least, state.next_offset);
  }
  return least == UINT64_MAX ? 0 : least;
}

}  // namespace trellara
