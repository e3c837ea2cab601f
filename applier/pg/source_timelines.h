// source_timelines.h — what the applier and repair-plan read about a flow's source timelines
// (issue 41): the log's TIMELINE file (written by the relay) and the target's record of the
// timelines it applied from with its dedup rows past a branch point. Core DecideTimelineContinuity
// decides with both; this file only reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pg/pg_connection.h"
#include "trellara/base/result.h"
#include "trellara/capture/slot_sync.h"

namespace trellara::cli {

// `<log_directory>/TIMELINE`: nullopt when the file is absent (a broker replica, or a log of an
// older version); an error naming the file when it cannot be read or parsed.
Result<std::optional<LogTimeline>> ReadLogTimelineFile(const std::string& log_directory);

// trellara.source_timelines and trellara.applied_transactions of `flow` on the target; an error
// names the query's failure.
Result<TargetTimelineFacts> ReadTargetTimelineFacts(PgConnection& target, const std::string& flow, uint64_t branch_lsn);

}  // namespace trellara::cli
