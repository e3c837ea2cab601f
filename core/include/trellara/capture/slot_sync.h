// slot_sync.h — decisions of the standby slot sync and of a relay starting after a promotion
// (issue 41, first slice; docs/decisions.md "Flow slots on physical standbys").
//
// A physical standby keeps a logical slot per flow with the primary's positions, so that after a
// promotion the flow resumes from it. What position the standby's slot may take, when the worker
// must wait and what it must refuse are decided here; the extension (extension/failover/) only
// reads the primary and the local slot and applies the answer. After the promotion, a relay that
// finds a log written on an earlier timeline (the standby's copy of the old primary's log, which
// pg_basebackup copied with PGDATA) must not append to it: DecideLogTimeline says so.
// Nothing here talks to Postgres or the disk.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trellara {

// A transaction id compared the way Postgres compares normal xids (modulo 2^32).
bool XidPrecedes(uint32_t a, uint32_t b);

// The primary's slot of a flow, as pg_replication_slots shows it.
struct PrimarySlot {
  uint64_t restart_lsn = 0;
  uint64_t confirmed_flush_lsn = 0;
  uint32_t catalog_xmin = 0;  // 0: none (the slot holds no catalog horizon yet)
};

// The standby's own slot of that flow when it exists (or the reservation a new one got when it
// was created: its restart_lsn and catalog_xmin are what this standby can still honour).
struct LocalSlot {
  uint64_t restart_lsn = 0;
  uint64_t confirmed_flush_lsn = 0;
  uint32_t catalog_xmin = 0;
};

struct SlotSyncDecision {
  enum class Kind {
    kSet,   // give the local slot restart_lsn / catalog_xmin / confirmed_flush below
    kWait,  // not now (the standby has not replayed far enough, or the primary's slot is behind
            // what this standby can honour): try again at the next round, change nothing
    kKeep,  // the local slot is already there (or ahead: positions never move backwards)
  };
  Kind kind = Kind::kWait;
  uint64_t restart_lsn = 0;
  uint64_t confirmed_flush_lsn = 0;
  uint32_t catalog_xmin = 0;
  std::string reason;  // kWait / kKeep: for the log and check(), names the positions
};

// The rule:
//  * the standby's slot is never ahead of what the standby has replayed (`replay_lsn`): wait while
//    the primary's restart_lsn is beyond it; cap confirmed_flush at it;
//  * the standby's slot is never ahead of what is durable downstream: this slice uses the
//    primary's confirmed_flush, which the relay moves only past what its local log made durable
//    (the target's position is not used yet: docs/decisions.md);
//  * a local slot never moves backwards (restart_lsn, catalog_xmin, confirmed_flush), and a new
//    slot is given the primary's positions only when they are at or ahead of the reservation the
//    standby could make (`local`, for a new slot: WAL from its restart_lsn is still here, catalog
//    rows from its catalog_xmin are not vacuumed); otherwise wait until the primary's slot passes it;
//  * a primary slot without a catalog_xmin or confirmed position (not yet consistent) is waited for.
SlotSyncDecision DecideSlotSync(const PrimarySlot& primary, const std::optional<LocalSlot>& local,
                                bool local_is_new, uint64_t replay_lsn, const std::string& slot_name);

// A relay starting on its log directory: `recorded_timeline` is the timeline the log was started
// on (its TIMELINE file; nullopt when the file is absent), `current_timeline` the server's.
enum class LogTimelineDecision {
  kUse,          // same timeline: the log is this server's own
  kRecord,       // no TIMELINE file: the log is empty (a new log) or was started before logs
                 // recorded their timeline; record the current one and use it
  kSetAside,     // the log was written on an earlier timeline: it is a copy of the old primary's
                 // log (or the old primary's own, rewound). Never append to it: move it aside and
                 // start a new log from the slot's confirmed position
  kRefuse,       // the log claims a later timeline than the server's: someone copied a log from
                 // elsewhere; stop and let a person look
};
LogTimelineDecision DecideLogTimeline(std::optional<uint32_t> recorded_timeline, uint32_t current_timeline);

// The directory a set-aside log moves to: "<dir>.timeline<N>" (N: the timeline it was written on).
std::string SetAsideLogDirectory(const std::string& log_directory, uint32_t written_timeline);

}  // namespace trellara
