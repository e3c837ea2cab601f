// slot_sync.cpp — the standby slot sync and post-promotion log rules (slot_sync.h). Pure functions.
#include "trellara/capture/slot_sync.h"

#include <cstdio>

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

}  // namespace trellara
