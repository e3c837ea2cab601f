// partitioned_log.h — what a partitioned flow's log holds past its applier (partition-watermarks,
// run): read through the barrier from the applier's consumer offset to the log's published end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kit/config.h"
#include "trellara/partition/partition.h"

namespace trellara::cli {

struct PendingLog {
  uint64_t last_commit_lsn = 0;  // of the last whole transaction read
  // The partitioned transactions above `visible_lsn`, in commit order, with the partitions each lists.
  std::vector<partition::PendingTransaction> partitioned;
  std::string problem;  // why the scan stopped before the log's end ("" when it reached it)
};

// Throws CommandFailed (exit 2) when the log cannot be opened.
PendingLog ReadPendingLog(const FlowConfig& config, uint64_t visible_lsn);

}  // namespace trellara::cli
