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
#include <map>
#include <optional>
#include <string>

#include "trellara/base/result.h"
#include "trellara/log/retention.h"

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

// The TIMELINE file of a log directory: the timeline the log was started on and, for a log started
// on a timeline that branched off another (a promoted standby's), where it branched. Text:
//   "<timeline>\n"                                   (timeline 1, or no branch point known)
//   "<timeline>\nbranched_from <parent> at <X/X>\n"  (the server's timeline history, at start)
// Files of the first slice hold only the first line; they still parse.
struct LogTimeline {
  uint32_t timeline = 0;
  uint32_t parent_timeline = 0;  // 0: no branch point recorded
  uint64_t branch_lsn = 0;       // the switch point: WAL up to it is the same on both timelines
};
std::string FormatLogTimeline(const LogTimeline& timeline);
// An error names what is wrong with `text` (the caller names the file).
Result<LogTimeline> ParseLogTimeline(const std::string& text);

// What the target says about a flow's timelines (sql/trellara_target.sql trellara.source_timelines
// and trellara.applied_transactions), read by the applier before it applies from a log.
struct TargetTimelineFacts {
  std::optional<uint32_t> applied_timeline;  // the latest timeline the target recorded applying from
  uint64_t applied_past_branch = 0;          // transactions applied with commit LSN past the log's branch point
  uint64_t first_past_branch = 0;            // their least and greatest commit LSN
  uint64_t last_past_branch = 0;
  uint64_t max_applied_lsn = 0;              // the greatest commit LSN applied (0: none)
};

struct TimelineContinuity {
  enum class Kind {
    kProceed,     // the target follows this log's timeline already (or the log records none)
    kRecord,      // apply, recording first that the target now follows the log's timeline
    kFailClosed,  // the target holds what this log's server never had, or follows a later timeline
  };
  Kind kind = Kind::kProceed;
  std::string reason;     // kFailClosed: what, on which flow, with the range; kRecord: the switch
  std::string next_step;  // kFailClosed: what the operator does
};

// The rule (issue 41, "Promotion"): a commit LSN names a transaction only on one timeline's
// history. A log started on timeline N that branched off N-1 at B holds, from B on, transactions the
// old primary never had, and lacks what the old primary committed past B. So:
//  * the log records no timeline: proceed (nothing to compare; a log of an older version);
//  * the target already follows this timeline: proceed;
//  * the target follows a LATER timeline: fail closed — this log is a server that was superseded
//    (an old primary come back, or its copy);
//  * otherwise (an earlier timeline, or none recorded): if the target applied any transaction with
//    a commit LSN past B, those transactions are not on this server: fail closed naming their count
//    and range, never apply on top of them; else record the new timeline and proceed. A log of
//    timeline N with no branch point recorded (N > 1 from a first-slice relay) cannot be checked
//    when the target has applied anything: fail closed rather than guess.
TimelineContinuity DecideTimelineContinuity(const std::optional<LogTimeline>& log, const TargetTimelineFacts& target,
                                            const std::string& flow);

// source_ack = 'applied' (docs/decisions.md "A standby's slot at the target's position"): the next
// log offset every downstream consumer has made durable on its target — the least next offset of
// the log's registered consumers, not counting the forwarder (it holds records in a broker, not on a
// target) and consumers marked lost (they are reseeded; the log no longer holds their offsets). No
// such consumer: 0 (nothing is confirmable past what was confirmed before).
uint64_t AppliedConsumerOffset(const std::map<std::string, log::ConsumerState>& consumers);

}  // namespace trellara
