// failover/failover.h — keeping flows alive across a promotion of a physical standby (issue 41,
// first slice; docs/decisions.md "Flow slots on physical standbys"): the standby's slot sync
// worker (slot_sync.cpp) and the relay's check of its log's timeline at start (log_timeline.cpp).
#pragma once

#include <cstddef>

namespace trellara::failover {

// trellara.standby_slot_sync (postmaster): registers the slot sync worker. Only when preloaded.
void DefineFailoverGucs();
// Registers the slot sync worker when trellara.standby_slot_sync is on; nothing otherwise.
void RegisterSlotSync();

enum class LogTimeline {
  kOwn,                 // the log is this server's own (or new): use it as it is
  kNewLogAfterPromotion,  // the log of an earlier timeline was moved aside; the directory now holds
                          // an empty log: start it from the slot's confirmed position
  kRefuse,              // `refusal` says why the relay must not run
};
// Called by the relay at start, before it opens its log. Plain C frame: may raise ERROR (I/O).
LogTimeline PrepareLogForTimeline(const char* flow_name, const char* log_directory, char* refusal,
                                  size_t refusal_bytes);

}  // namespace trellara::failover
