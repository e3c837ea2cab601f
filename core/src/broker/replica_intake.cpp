// replica_intake.cpp — holes, refills and catching up of a remote applier (replica_intake.h).
#include "trellara/broker/replica_intake.h"

#include <algorithm>

namespace trellara::broker {

RefillRequest HoleWatch::Ask(const std::string& log_identity, uint64_t seen, int64_t now_ms) {
  asks_++;
  asked_at_ms_ = now_ms;
  wait_ms_ = wait_ms_ == 0 ? kRetryFirstMs : std::min(wait_ms_ * 2, kRetryMaxMs);
  return RefillRequest{log_identity, *hole_, seen};
}

std::optional<RefillRequest> HoleWatch::Seen(const std::string& log_identity, uint64_t expected, uint64_t seen,
                                             int64_t now_ms) {
  seen_end_ = std::max(seen_end_, seen + 1);
  if (hole_ && *hole_ == expected) return std::nullopt;
  hole_ = expected;
  holes_++;
  wait_ms_ = 0;
  return Ask(log_identity, seen, now_ms);
}

bool HoleWatch::Appended(uint64_t offset) {
  seen_end_ = std::max(seen_end_, offset + 1);
  if (!hole_ || offset < *hole_) return false;
  if (offset + 1 < seen_end_) {
    hole_ = offset + 1;  // records after it were passed over: still missing, on the same schedule
    return false;
  }
  hole_.reset();
  wait_ms_ = 0;
  return true;
}

std::optional<RefillRequest> HoleWatch::Due(const std::string& log_identity, int64_t now_ms) {
  if (!hole_ || now_ms - asked_at_ms_ < wait_ms_) return std::nullopt;
  return Ask(log_identity, *hole_, now_ms);
}

RefillAnswer DecideRefill(const RefillRequest& request, const std::string& log_identity, uint64_t log_first_offset,
                          uint64_t published_end) {
  RefillAnswer answer;
  if (request.log_identity != log_identity) {
    answer.kind = RefillAnswer::Kind::OtherLog;
    answer.detail = log_identity;
  } else if (request.from < log_first_offset) {
    answer.kind = RefillAnswer::Kind::Gone;
    answer.first = log_first_offset;
  } else {
    answer.first = std::min(request.from, published_end);
    answer.end = published_end;
  }
  return answer;
}

std::optional<uint64_t> DecideTailRepublish(std::optional<uint64_t> highest_in_stream, uint64_t published_end,
                                            uint64_t log_first_offset) {
  const uint64_t held_end = highest_in_stream ? *highest_in_stream + 1 : 0;
  if (held_end >= published_end) return std::nullopt;
  // What the local log no longer holds cannot be published again; the rest can (a remote applier
  // that needs the older part finds it as a hole and is told it is gone).
  const uint64_t first = std::max(held_end, log_first_offset);
  if (first >= published_end) return std::nullopt;
  return first;
}

bool ReplicaMayBeCaughtUp(const ReplicaReadFacts& facts) {
  return !facts.delivered && !facts.hole_open && facts.reading && facts.replica_end >= facts.seen_end;
}

bool ReplicaCaughtUp(const ReplicaReadFacts& facts, std::optional<bool> stream_holds_unread) {
  return ReplicaMayBeCaughtUp(facts) && stream_holds_unread.has_value() && !*stream_holds_unread;
}

std::string TimelineHeaderValue(const LogTimeline& timeline) {
  std::string text = FormatLogTimeline(timeline);
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

ReplicaTimelineDecision DecideReplicaTimeline(const std::optional<LogTimeline>& held,
                                              const std::optional<std::string>& header) {
  ReplicaTimelineDecision d;
  if (!header) return d;
  auto parsed = ParseLogTimeline(*header);
  if (!parsed) {
    d.kind = ReplicaTimelineDecision::Kind::Refuse;
    d.reason = std::string("its ") + kTimelineHeader + " header " + parsed.error().message;
    return d;
  }
  d.timeline = *parsed;
  if (!held) {
    d.kind = ReplicaTimelineDecision::Kind::Write;
    return d;
  }
  if (held->timeline == parsed->timeline && held->parent_timeline == parsed->parent_timeline &&
      held->branch_lsn == parsed->branch_lsn)
    return d;
  d.kind = ReplicaTimelineDecision::Kind::Refuse;
  d.reason = "it comes from a log on source timeline \"" + TimelineHeaderValue(*parsed) +
             "\" and the replica holds a log on timeline \"" + TimelineHeaderValue(*held) +
             "\": one log never changes timeline, so the stream carries another log's records";
  return d;
}

}  // namespace trellara::broker
