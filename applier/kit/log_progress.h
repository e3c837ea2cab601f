// log_progress.h — what the flow's log holds past the applier's consumer offset, read without
// writing anything (status, metrics, pilot-package).
#pragma once

#include <cstdint>
#include <optional>

#include "kit/config.h"

namespace trellara::cli {

struct LogProgress {
  std::optional<uint64_t> consumer_offset;  // the applier's consumer offset; nullopt when never written
  uint64_t scanned_from = 0;                // consumer offset, or the log's first offset
  uint64_t end_offset = 0;                  // durable end: the next offset the relay writes
  uint64_t lag_records = 0;                 // records in [scanned_from, end_offset)
  uint64_t lag_bytes = 0;                   // their frame bytes (header + payload)
  uint64_t last_commit_lsn = 0;             // highest commit LSN of a complete transaction in that
                                            // range (envelope or commit marker); 0 if none
};

// Throws CommandFailed naming the log directory when it cannot be read.
LogProgress ReadLogProgress(const FlowConfig& config);

}  // namespace trellara::cli
