// replica_intake.h — the remote applier's rules for what the stream delivers and the forwarder's
// answer to a hole (DESIGN §9, docs/broker.md "Holes and refills").
//
// A remote applier keeps a replica of the flow's log, appended strictly in offset order. Which
// delivered record goes where is DecideArrival (broker.h); these are the rules around it:
//  - HoleWatch: a record above the replica's next offset shows a hole. The applier asks the
//    forwarder once for everything from the hole on, passes over what follows the hole while it
//    waits, and asks again when the refill does not come (a forwarder that restarted, an answer
//    lost), waiting longer each time up to a cap. The hole closes only when the replica itself
//    holds every offset it has seen — nothing else (no timeout, no later record) closes it. When
//    the missing record arrives but records after it were passed over meanwhile, the hole moves
//    to the first of those (still awaited, asked again on the same schedule).
//  - DecideRefill: the forwarder's answer, from its own log alone: republish from the hole up to
//    what the broker acknowledged of its publishing; "gone" when the log no longer holds the
//    hole's first offset; "other-log" when the request names another log.
//  - DecideTailRepublish: a lost tail, which shows as no hole, found by the forwarder itself.
//  - ReplicaCaughtUp: when `trellara apply --until-caught-up` may stop reading a stream.
//  - DecideReplicaTimeline: the timeline of the log a message came from (its Trellara-Timeline
//    header) against the replica's TIMELINE file, so that a remote applier makes the same
//    promotion check as one reading the local log (docs/broker.md "After a promotion").
// Time is passed in (milliseconds of a monotonic clock), so the simulator drives these rules
// with its own step counter. Talks to no broker and no database.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trellara/broker/broker.h"
#include "trellara/capture/slot_sync.h"

namespace trellara::broker {

class HoleWatch {
 public:
  static constexpr int64_t kRetryFirstMs = 1000;
  static constexpr int64_t kRetryMaxMs = 10000;

  // A record at `seen` (above `expected`, the replica's next offset) arrived. Returns the refill
  // to ask now when this is a new hole; nullopt when it is the hole already asked for (the
  // record is passed over: the refill brings it again in order).
  std::optional<RefillRequest> Seen(const std::string& log_identity, uint64_t expected, uint64_t seen, int64_t now_ms);
  // The replica appended offset `offset`. Returns whether that closed the hole (the replica now
  // holds everything seen); passing the hole with records seen beyond moves it past `offset`.
  bool Appended(uint64_t offset);
  // The refill to ask again now: the hole is still open and its wait has passed.
  std::optional<RefillRequest> Due(const std::string& log_identity, int64_t now_ms);

  std::optional<uint64_t> missing_from() const { return hole_; }
  uint64_t holes() const { return holes_; }
  uint64_t asks() const { return asks_; }

 private:
  RefillRequest Ask(const std::string& log_identity, uint64_t seen, int64_t now_ms);

  std::optional<uint64_t> hole_;
  uint64_t seen_end_ = 0;  // one past the highest offset seen
  int64_t asked_at_ms_ = 0;
  int64_t wait_ms_ = 0;
  uint64_t holes_ = 0;
  uint64_t asks_ = 0;
};

// The forwarder's answer to `request`: its log is `log_identity`, holds offsets from
// `log_first_offset` on, and the broker acknowledged its publishing below `published_end`.
// Ok with first == end (nothing to republish yet) when the hole lies beyond what was published:
// the forwarder's own publishing brings it.
RefillAnswer DecideRefill(const RefillRequest& request, const std::string& log_identity, uint64_t log_first_offset,
                          uint64_t published_end);

// The forwarder, with nothing to publish, checks the stream's tail: `highest_in_stream` is the
// highest offset of its log the stream's last messages hold (records and refill subjects; nullopt:
// none). Below the last record the broker acknowledged (`published_end` - 1), the broker lost the
// tail — which no remote applier can see as a hole, since no later record arrives — and the
// forwarder publishes again from the returned offset up to `published_end` (as a refill).
std::optional<uint64_t> DecideTailRepublish(std::optional<uint64_t> highest_in_stream, uint64_t published_end,
                                            uint64_t log_first_offset);

// What the remote applier knows after one read of the stream.
struct ReplicaReadFacts {
  bool delivered = false;        // the read delivered anything
  bool hole_open = false;        // a refill is awaited
  bool reading = false;          // a consumer is reading the stream (not reconnecting)
  uint64_t replica_end = 0;      // the replica's next offset
  uint64_t seen_end = 0;         // one past the highest offset any delivery named
};
// Whether the replica may be caught up: nothing came, no hole waits, and the replica holds every
// offset seen. The stream's leader must then still confirm it holds nothing unread
// (`stream_holds_unread` == false; nullopt = it could not be asked, so not caught up).
bool ReplicaMayBeCaughtUp(const ReplicaReadFacts& facts);
bool ReplicaCaughtUp(const ReplicaReadFacts& facts, std::optional<bool> stream_holds_unread);

// The header that carries the timeline of the log a message's records come from: the log's
// TIMELINE file (written by the relay when it started the log) on one line, e.g. "2 branched_from
// 1 at 0/3000148". A log's timeline never changes (a promoted server starts a new log), so every
// message of one log carries the same value; a log without a TIMELINE file sends none.
inline constexpr const char* kTimelineHeader = "Trellara-Timeline";
std::string TimelineHeaderValue(const LogTimeline& timeline);

// What a remote applier does with a delivered message's timeline header before it appends the
// message's records to its replica. `held`: the replica's TIMELINE (nullopt: none yet).
//  - Keep: no header (a forwarder of an older version, or a log without TIMELINE), or the same
//    timeline as held;
//  - Write: the replica has none yet: `timeline` is written to its TIMELINE before any record of
//    the message is appended (the applier then checks the target against it, as for a local log);
//  - Refuse: the header cannot be read, or names another timeline than the replica holds (one log
//    never changes timeline: the stream carries another log's records). `reason` says which.
struct ReplicaTimelineDecision {
  enum class Kind : uint8_t { Keep, Write, Refuse } kind = Kind::Keep;
  LogTimeline timeline;
  std::string reason;
};
ReplicaTimelineDecision DecideReplicaTimeline(const std::optional<LogTimeline>& held,
                                              const std::optional<std::string>& header);

}  // namespace trellara::broker
