// failover/failover.h — keeping flows alive across a promotion of a physical standby (issue 41,
// first slice; docs/decisions.md "Flow slots on physical standbys"): the standby's slot sync
// worker (slot_sync.cpp) and the relay's check of its log's timeline at start (log_timeline.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace trellara::failover {

// trellara.standby_slot_sync (postmaster): registers the slot sync worker. Only when preloaded.
void DefineFailoverGucs();
// Registers the slot sync worker when trellara.standby_slot_sync is on; nothing otherwise.
void RegisterSlotSync();

// trellara.standby_slot_names (sighup, standby_hold.cpp): physical slots whose flushed WAL bounds
// capture on this primary.
void DefineStandbyHoldGuc();
bool StandbyHoldConfigured();
// The LSN the relays may decode up to: UINT64_MAX when no slot is named; else the least restart_lsn
// of the named physical slots, or 0 when one is missing, logical or invalidated. `why` names the
// slot that holds (empty when none is named). Plain C frame.
uint64_t StandbyHoldLsn(char* why, size_t why_bytes);

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
